package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.util.concurrent.locks.LockSupport;

/**
 * A cold-start shape ({@code COLD_SHAPE}, {@code --cold-shape}): how the main
 * endpoint's latency evolves after the process starts, on top of the natural
 * JIT warm-up every mode has. One class per shape; each reads its own knobs
 * from the environment (see the README):
 *
 * <ul>
 *   <li>{@code jit} (default): only the real class loading and JIT warm-up;</li>
 *   <li>{@code jit-slow}: many copies of the request code ({@link JitSlow});</li>
 *   <li>{@code cache}: misses until a cache of N keys is full ({@link Cache});</li>
 *   <li>{@code lazy-endpoints}: endpoints initialised on their first call ({@link LazyEndpoints});</li>
 *   <li>{@code warm}: warms itself before it reports ready ({@link Warm});</li>
 *   <li>{@code never}: never settles ({@link Never}).</li>
 * </ul>
 */
interface Shape {
    String NAMES = "jit, jit-slow, cache, lazy-endpoints, warm, never";

    /**
     * Called by each request of the main endpoint (and of the shape's own
     * endpoints) before its work: may wait (a cache miss, a lazy init) and
     * set response headers. Returns the code to run the request with.
     */
    Work enter(HttpExchange ex) throws Exception;

    /** Whether the shape adds this path as an endpoint of its own. */
    default boolean serves(String path) {
        return false;
    }

    /** Whether {@code /healthz} reports ready (false while {@code warm} warms itself). */
    default boolean ready() {
        return true;
    }

    /** Called once the server listens. */
    default void start() {}

    /** The shape and its settings, for the start-up log line. */
    String describe();

    static Shape of(Config cfg, Workload base) {
        return switch (cfg.coldShape) {
            case "jit" -> new Shape() {
                @Override
                public Work enter(HttpExchange ex) {
                    return base;
                }

                @Override
                public String describe() {
                    return "jit";
                }
            };
            case "jit-slow" -> new JitSlow();
            case "cache" -> new Cache(base);
            case "lazy-endpoints" -> new LazyEndpoints(base);
            case "warm" -> new Warm(cfg, base);
            case "never" -> new Never(base);
            default -> throw Config.fail("cold-shape (COLD_SHAPE) must be one of " + NAMES + ", got \"" + cfg.coldShape + "\"");
        };
    }

    /**
     * Waits about {@code nanos}, to the tens of microseconds ({@code
     * Thread.sleep(ms, ns)} rounds to milliseconds on JDK 17).
     */
    static void pause(long nanos) throws InterruptedException {
        long end = System.nanoTime() + nanos;
        for (long left = nanos; left > 0; left = end - System.nanoTime()) {
            LockSupport.parkNanos(left);
            if (Thread.interrupted()) throw new InterruptedException();
        }
    }
}
