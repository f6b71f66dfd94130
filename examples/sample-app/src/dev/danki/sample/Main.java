package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The danki sample app: a small HTTP service whose main endpoint does the kind
 * of CPU work a real JVM service does per request (JSON, streams, BigDecimal,
 * regex, java.time, hashing, a chain of many small classes), so that a fresh
 * process is tens of times slower than a warm one, like the services in the
 * field reports.
 *
 * <p>Endpoints: {@code GET /} (or {@code /api/quote}) the main work,
 * {@code POST /orders} a write that rolls back for warm-up requests (the
 * header {@code X-Danki-Warmup}, or with {@code --warmup-principals} the
 * caller's mesh identity: {@link WarmupRule}) and for mirrored requests (a
 * Host ending in {@code -shadow}), {@code GET /orders/count}, {@code GET /healthz},
 * {@code GET /metrics} (Prometheus text).
 *
 * <p>Configuration (flag, else environment variable): {@code --version}/VERSION,
 * {@code --port}/PORT (8080), {@code --bind}/BIND_ADDRESS (0.0.0.0),
 * {@code --slow-ms}/SLOW_MS (0: extra delay per request, for a "bad" canary;
 * {@code --slow-percent}/SLOW_PERCENT: only that share of requests, default 100),
 * {@code --threads}/THREADS (8), {@code --cold-shape}/COLD_SHAPE ({@code jit}:
 * the cold-start shape, see {@link Shape}), {@code --noise-percent}/NOISE_PERCENT
 * and {@code --noise-ms}/NOISE_MS (a noisy neighbour's spikes, see {@link Noise}),
 * {@code --max-concurrency}/MAX_CONCURRENCY (0: unlimited; N: at most N main
 * requests at work at once, the others wait — a lock or a small pool: lower
 * capacity, the same latency at low load), {@code --warmup-principals}/WARMUP_PRINCIPALS
 * (a comma list of SPIFFE IDs: requests whose mesh peer is one of them are
 * warm-up, and the header is then not trusted from a mesh caller).
 */
public final class Main {
    static final String WARMUP_HEADER = "X-Danki-Warmup";

    private Main() {}

    /** MAX_CONCURRENCY's permits; null without a limit. */
    private static java.util.concurrent.Semaphore limit;

    public static void main(String[] args) throws IOException {
        Config cfg = Config.parse(args);
        if (cfg.maxConcurrency > 0) limit = new java.util.concurrent.Semaphore(cfg.maxConcurrency, true);
        Metrics metrics = new Metrics(cfg.version);
        OrderStore orders = new OrderStore();
        Workload work = new Workload();
        Shape shape = Shape.of(cfg, work);
        Noise noise = new Noise(cfg);
        WarmupRule warmup = new WarmupRule(cfg.warmupPrincipals);

        HttpServer server = HttpServer.create(new InetSocketAddress(cfg.bind, cfg.port), 128);
        ExecutorService pool = Executors.newFixedThreadPool(cfg.threads);
        server.setExecutor(pool);
        server.createContext("/", ex -> handle(ex, cfg, metrics, shape, () -> quote(ex, cfg, shape, noise)));
        server.createContext("/healthz", ex -> handle(ex, cfg, metrics, shape, () -> shape.ready()
                ? new Reply(200, "text/plain", "ok\n") : new Reply(503, "text/plain", "warming up\n")));
        server.createContext("/metrics", ex -> handle(ex, cfg, metrics, shape, () -> new Reply(200, "text/plain; version=0.0.4", metrics.render())));
        server.createContext("/orders", ex -> handle(ex, cfg, metrics, shape, () -> orders(ex, cfg, work, orders, noise, warmup)));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.stop(0);
            pool.shutdownNow();
        }));
        server.start();
        shape.start();
        String extra = (cfg.coldShape.equals("jit") ? "" : ", cold-shape=" + shape.describe())
                + (noise.on() ? ", noise=" + cfg.noisePercent + "% of " + cfg.noiseMs + " ms" : "")
                + (warmup.meshMode() ? ", warm-up = x-forwarded-client-cert peer in " + cfg.warmupPrincipals
                        + " (without x-forwarded-client-cert: " + WARMUP_HEADER + ")" : "");
        System.err.printf("sample-app %s listening on %s:%d (slow-ms=%d, slow-percent=%d, threads=%d, max-concurrency=%d%s)%n",
                cfg.version, cfg.bind, cfg.port, cfg.slowMs, cfg.slowPercent, cfg.threads, cfg.maxConcurrency, extra);
    }

    record Reply(int status, String contentType, String body) {}

    interface Handler {
        Reply run() throws Exception;
    }

    private static void handle(HttpExchange ex, Config cfg, Metrics metrics, Shape shape, Handler h) throws IOException {
        long start = System.nanoTime();
        Reply reply;
        try {
            reply = h.run();
        } catch (BadRequest e) {
            reply = new Reply(400, "application/json", "{\"error\":" + Json.quote(e.getMessage()) + "}\n");
        } catch (Exception e) {
            reply = new Reply(500, "application/json", "{\"error\":" + Json.quote(String.valueOf(e)) + "}\n");
        }
        byte[] body = reply.body().getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", reply.contentType());
        ex.getResponseHeaders().set("X-Version", cfg.version);
        // Behind an Istio sidecar the caller's mesh identity arrives in
        // x-forwarded-client-cert: say what this app saw (the lab's mesh check).
        String xfcc = ex.getRequestHeaders().getFirst("X-Forwarded-Client-Cert");
        if (xfcc != null) ex.getResponseHeaders().set("X-Seen-Client-Cert", xfcc);
        ex.sendResponseHeaders(reply.status(), body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
        metrics.observe(metricPath(ex.getRequestURI().getPath(), shape), reply.status(), (System.nanoTime() - start) / 1e9);
    }

    private static Reply quote(HttpExchange ex, Config cfg, Shape shape, Noise noise) throws Exception {
        URI uri = ex.getRequestURI();
        if (!uri.getPath().equals("/") && !uri.getPath().equals("/api/quote") && !shape.serves(uri.getPath())) {
            return new Reply(404, "application/json", "{\"error\":\"not found: " + uri.getPath() + "\"}\n");
        }
        drain(ex);
        if (limit != null) limit.acquire();
        Quote r;
        try {
            slow(cfg);
            noise.spike();
            Work work = shape.enter(ex);
            r = work.quote(seed(uri));
        } finally {
            if (limit != null) limit.release();
        }
        return new Reply(200, "application/json", "{\"version\":" + Json.quote(cfg.version)
                + ",\"items\":" + r.items() + ",\"total\":\"" + r.total() + "\",\"digest\":\"" + r.digest()
                + "\",\"filters\":" + r.filters() + "}\n");
    }

    private static Reply orders(HttpExchange ex, Config cfg, Workload work, OrderStore orders, Noise noise, WarmupRule rule) throws Exception {
        String path = ex.getRequestURI().getPath();
        String method = ex.getRequestMethod();
        if (path.equals("/orders/count") && method.equals("GET")) {
            drain(ex);
            return new Reply(200, "application/json", "{\"version\":" + Json.quote(cfg.version)
                    + ",\"count\":" + orders.count() + "}\n");
        }
        if (path.equals("/orders") && method.equals("POST")) {
            String body;
            try (InputStream in = ex.getRequestBody()) {
                body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
            slow(cfg);
            noise.spike();
            WarmupRule.Decision warmup = rule.decide(ex.getRequestHeaders());
            OrderStore.Outcome o = orders.place(work, body, warmup.warmup());
            return new Reply(o.committed() ? 201 : 200, "application/json", "{\"version\":" + Json.quote(cfg.version)
                    + ",\"id\":" + Json.quote(o.id()) + ",\"total\":\"" + o.total() + "\",\"committed\":" + o.committed()
                    + ",\"warmup\":" + warmup.warmup() + ",\"warmupBy\":" + (warmup.by() == null ? "null" : Json.quote(warmup.by())) + "}\n");
        }
        drain(ex);
        return new Reply(405, "application/json", "{\"error\":\"use POST /orders or GET /orders/count\"}\n");
    }

    /**
     * A Host (with or without a port) ending in {@code -shadow}: a mirrored
     * copy. Envoy appends {@code -shadow} to the Host of every request it
     * mirrors (danki's mirror warm-up, Istio mirrors), and drops the copy's
     * answer, so the user's own request was served elsewhere and the copy
     * must keep nothing.
     */
    static boolean isShadowHost(String host) {
        if (host == null) {
            return false;
        }
        int colon = host.lastIndexOf(':');
        if (colon > 0 && host.indexOf(']') < colon && host.substring(colon + 1).chars().allMatch(Character::isDigit)) {
            host = host.substring(0, colon);
        }
        return host.endsWith("-shadow");
    }

    /** The path as a metric label: known paths only, so labels stay few. */
    private static String metricPath(String path, Shape shape) {
        return switch (path) {
            case "/", "/api/quote", "/healthz", "/metrics", "/orders", "/orders/count" -> path;
            default -> shape.serves(path) ? path : "other";
        };
    }

    private static long seed(URI uri) {
        String q = uri.getRawQuery();
        if (q != null) {
            for (String kv : q.split("&")) {
                if (kv.startsWith("seed=")) {
                    try {
                        return Long.parseLong(kv.substring(5));
                    } catch (NumberFormatException e) {
                        throw new BadRequest("query parameter seed must be an integer, got " + kv.substring(5));
                    }
                }
            }
        }
        return System.nanoTime();
    }

    /** The injected slowness of a "bad" version: SLOW_PERCENT % of requests wait SLOW_MS. */
    private static void slow(Config cfg) throws InterruptedException {
        if (cfg.slowMs > 0 && (cfg.slowPercent >= 100
                || java.util.concurrent.ThreadLocalRandom.current().nextInt(100) < cfg.slowPercent)) {
            Thread.sleep(cfg.slowMs);
        }
    }

    private static void drain(HttpExchange ex) throws IOException {
        try (InputStream in = ex.getRequestBody()) {
            in.transferTo(OutputStream.nullOutputStream());
        }
    }

    /** A 400 reply; public, as the workload copies of {@link Copies} throw it too. */
    public static final class BadRequest extends RuntimeException {
        private static final long serialVersionUID = 1L;

        public BadRequest(String msg) {
            super(msg);
        }
    }
}
