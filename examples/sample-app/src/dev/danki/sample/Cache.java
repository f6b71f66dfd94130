package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;

/**
 * {@code cache}: a cache that is full after {@code CACHE_KEYS} (default 200)
 * distinct keys. Each request reads one key, {@code ?key=K} (taken modulo
 * CACHE_KEYS) or else one picked at random; a miss waits
 * {@code CACHE_MISS_MS} (default 20: the round trip to the backing store)
 * and stores the key. Once every key is stored, no request misses: latency
 * steps down. With random keys the share of misses after r requests is about
 * e^(−r/CACHE_KEYS): the median steps down after ~0.7 × CACHE_KEYS requests,
 * the p99 after ~4.6 × CACHE_KEYS. Responses say {@code X-Cache: hit|miss}.
 */
final class Cache implements Shape {
    private final Work base;
    private final int keys = Config.envInt("CACHE_KEYS", 200, 1, 10_000_000);
    private final long missMs = Config.envInt("CACHE_MISS_MS", 20, 0, 600_000);
    private final Set<Integer> stored = ConcurrentHashMap.newKeySet();

    Cache(Work base) {
        this.base = base;
    }

    @Override
    public Work enter(HttpExchange ex) throws InterruptedException {
        int key = key(ex);
        boolean hit = stored.contains(key);
        if (!hit) {
            Shape.pause(missMs * 1_000_000);
            stored.add(key);
        }
        ex.getResponseHeaders().set("X-Cache", hit ? "hit" : "miss");
        return base;
    }

    private int key(HttpExchange ex) {
        String q = ex.getRequestURI().getRawQuery();
        if (q != null) {
            for (String kv : q.split("&")) {
                if (kv.startsWith("key=")) {
                    try {
                        return (int) Math.floorMod(Long.parseLong(kv.substring(4)), (long) keys);
                    } catch (NumberFormatException e) {
                        throw new Main.BadRequest("query parameter key must be an integer, got " + kv.substring(4));
                    }
                }
            }
        }
        return ThreadLocalRandom.current().nextInt(keys);
    }

    @Override
    public String describe() {
        return "cache (keys=" + keys + ", miss-ms=" + missMs + ")";
    }
}
