package dev.danki.sample;

import java.util.concurrent.ThreadLocalRandom;

/**
 * A noisy neighbour ({@code NOISE_PERCENT}, {@code NOISE_MS}): on top of any
 * shape, that share of requests, picked at random, waits an extra 0.5–1.5 ×
 * {@code NOISE_MS} (uniform), as when another tenant of the node takes the CPU
 * or the disk for a moment. Unlike {@code SLOW_MS} (a bad version, the same
 * delay every time), the spikes vary in size, and both versions of a rollout
 * would have them.
 */
final class Noise {
    private final int percent;
    private final long ms;

    Noise(Config cfg) {
        percent = cfg.noisePercent;
        ms = cfg.noiseMs;
    }

    boolean on() {
        return percent > 0 && ms > 0;
    }

    void spike() throws InterruptedException {
        if (!on()) return;
        ThreadLocalRandom r = ThreadLocalRandom.current();
        if (r.nextInt(100) < percent) Shape.pause((long) (ms * 1e6 * (0.5 + r.nextDouble())));
    }
}
