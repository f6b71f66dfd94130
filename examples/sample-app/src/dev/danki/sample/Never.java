package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.util.concurrent.atomic.AtomicLong;

/**
 * {@code never}: latency never settles, so a warm-up must not call it
 * converged. Two movements, on top of the JIT warm-up:
 *
 * <ul>
 *   <li>a leak-like trend: the r-th request waits r × {@code NEVER_DRIFT_US}
 *   µs (default 5: +5 ms per 1,000 requests, without bound), as when each
 *   request adds to a structure every later request walks;</li>
 *   <li>regime changes: every {@code NEVER_PERIOD} requests (default 500) the
 *   app switches between a quiet regime and a busy one in which each request
 *   waits {@code NEVER_MS} more (default 10), as with a periodic background
 *   compaction.</li>
 * </ul>
 *
 * Either can be turned off with 0. Restart the app to reset the trend.
 */
final class Never implements Shape {
    private final Work base;
    private final long driftUs = Config.envInt("NEVER_DRIFT_US", 5, 0, 1_000_000);
    private final long periodReqs = Config.envInt("NEVER_PERIOD", 500, 1, Integer.MAX_VALUE);
    private final long busyMs = Config.envInt("NEVER_MS", 10, 0, 600_000);
    private final AtomicLong served = new AtomicLong();

    Never(Work base) {
        this.base = base;
    }

    @Override
    public Work enter(HttpExchange ex) throws InterruptedException {
        long r = served.getAndIncrement(); // 0-based
        boolean busy = (r / periodReqs) % 2 == 1;
        Shape.pause(r * driftUs * 1_000 + (busy ? busyMs * 1_000_000 : 0));
        return base;
    }

    @Override
    public String describe() {
        return "never (drift-us=" + driftUs + ", period=" + periodReqs + ", busy-ms=" + busyMs + ")";
    }
}
