package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.StringJoiner;

/**
 * {@code lazy-endpoints}: extra endpoints, each initialised lazily on its
 * first call, for a weighted request mix. {@code LAZY_ENDPOINTS} (default
 * {@code /a=100,/b=300,/c=1000}) lists them as path=first-call cost in ms.
 * The first call of an endpoint waits that long (it opens its connection
 * pool, loads its configuration) and loads the endpoint's own copy of the
 * request code ({@link Copies}); the endpoint then stays cold until it has
 * been called often enough for the JIT to compile its copy, so a rarely
 * called endpoint stays slow longer than a frequent one. GET {@code /} is
 * served as in {@code jit}.
 */
final class LazyEndpoints implements Shape {
    private final Work base;
    private final Map<String, Endpoint> endpoints = new LinkedHashMap<>();

    LazyEndpoints(Work base) {
        this.base = base;
        String spec = Config.envString("LAZY_ENDPOINTS", "/a=100,/b=300,/c=1000");
        for (String e : spec.split(",")) {
            String[] kv = e.trim().split("=", 2);
            if (kv.length != 2 || !kv[0].startsWith("/") || kv[0].equals("/") || endpoints.containsKey(kv[0])) {
                throw Config.fail("LAZY_ENDPOINTS must be a comma-separated list of distinct /path=ms (e.g. /a=100,/b=300), got \"" + spec + "\"");
            }
            endpoints.put(kv[0], new Endpoint(kv[0], Config.intValue("LAZY_ENDPOINTS " + kv[0], kv[1])));
        }
    }

    @Override
    public boolean serves(String path) {
        return endpoints.containsKey(path);
    }

    @Override
    public Work enter(HttpExchange ex) throws InterruptedException {
        Endpoint e = endpoints.get(ex.getRequestURI().getPath());
        return e == null ? base : e.work();
    }

    @Override
    public String describe() {
        StringJoiner j = new StringJoiner(",", "lazy-endpoints (", ")");
        endpoints.values().forEach(e -> j.add(e.path + "=" + e.initMs + "ms"));
        return j.toString();
    }

    private static final class Endpoint {
        final String path;
        final long initMs;
        private volatile Work work;

        Endpoint(String path, long initMs) {
            if (initMs < 0) throw Config.fail("LAZY_ENDPOINTS " + path + ": first-call cost must be >= 0 ms, got " + initMs);
            this.path = path;
            this.initMs = initMs;
        }

        /** The endpoint's code, initialised by the first call (concurrent first calls wait for it). */
        Work work() throws InterruptedException {
            Work w = work;
            if (w != null) return w;
            synchronized (this) {
                if (work == null) {
                    Shape.pause(initMs * 1_000_000);
                    work = Copies.load("endpoint" + path.replace('/', '-'));
                }
                return work;
            }
        }
    }
}
