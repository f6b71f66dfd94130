package dev.danki.sample;

/** One step of the per-request filter chain (the generated classes F000…). */
interface Filter {
    void apply(Ctx c);
}
