package dev.danki.sample;

/**
 * The main endpoint's work, as the request handler sees it. An interface (and
 * public, like {@link Quote}) so that the {@code jit-slow} and
 * {@code lazy-endpoints} shapes can run copies of {@link Workload} defined by
 * other class loaders ({@link Copies}): the handler calls each copy through
 * this one type.
 */
public interface Work {
    Quote quote(long seed) throws Exception;
}
