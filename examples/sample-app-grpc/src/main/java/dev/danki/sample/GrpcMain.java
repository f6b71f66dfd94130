package dev.danki.sample;

import com.google.protobuf.util.JsonFormat;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.danki.sample.grpc.v1.CatalogGrpc;
import dev.danki.sample.grpc.v1.CountOrdersReply;
import dev.danki.sample.grpc.v1.CountOrdersRequest;
import dev.danki.sample.grpc.v1.GetItemRequest;
import dev.danki.sample.grpc.v1.Item;
import dev.danki.sample.grpc.v1.PlaceOrderReply;
import dev.danki.sample.grpc.v1.PlaceOrderRequest;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.ForwardingServerCall.SimpleForwardingServerCall;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.protobuf.services.ProtoReflectionService;
import io.grpc.protobuf.services.ProtoReflectionServiceV1;
import io.grpc.stub.StreamObserver;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

/**
 * The gRPC mode of the danki sample app: service {@code danki.sample.v1.Catalog}
 * (src/main/protobuf/catalog.proto) runs the HTTP app's per-request work
 * ({@link Workload}, the same JIT-heavy code: a fresh JVM answers its first
 * calls tens of times slower than a warm one), with the standard health
 * service (SERVING once the server listens) and server reflection (v1 and
 * v1alpha), so that a warm-up needs no generated code of its own.
 *
 * <p>{@code GetItem} is read-only ({@code idempotency_level = NO_SIDE_EFFECTS});
 * {@code PlaceOrder} stores an order unless the call carries the metadata
 * {@code x-danki-warmup}, as the HTTP app's {@code POST /orders} does with the
 * header {@code X-Danki-Warmup}.
 *
 * <p>A small HTTP side port ({@code METRICS_PORT}, default 8081; 0: off) serves
 * {@code /metrics} (Prometheus text: calls per method and status code, warm-up
 * calls, the HTTP app's JVM figures) and {@code /healthz} (200 once the gRPC
 * health status is SERVING) for an httpGet readiness probe and for Prometheus.
 *
 * <p>Environment (as the HTTP app): VERSION, BIND_ADDRESS, PORT (default 9090
 * here), SLOW_MS, SLOW_PERCENT, THREADS, NOISE_PERCENT, NOISE_MS; and
 * METRICS_PORT. COLD_SHAPE and MAX_CONCURRENCY are the HTTP app's only.
 */
public final class GrpcMain {
    /** The warm-up marker; gRPC metadata keys are lower case. */
    static final Metadata.Key<String> WARMUP_KEY = Metadata.Key.of("x-danki-warmup", Metadata.ASCII_STRING_MARSHALLER);
    static final Context.Key<Boolean> WARMUP = Context.key("danki-warmup");
    static final String SERVICE = CatalogGrpc.SERVICE_NAME;

    private GrpcMain() {}

    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length > 0) {
            System.err.println("usage: sample-app-grpc (no flags: configure with the environment — VERSION, BIND_ADDRESS, PORT (9090),\n"
                    + "  METRICS_PORT (8081, 0: off), SLOW_MS, SLOW_PERCENT, THREADS, NOISE_PERCENT, NOISE_MS)");
            System.exit(args[0].equals("-h") || args[0].equals("--help") ? 0 : 2);
        }
        // The HTTP app's settings and their checks; PORT's default differs.
        Config cfg = Config.parse(new String[0]);
        int port = System.getenv("PORT") == null || System.getenv("PORT").isEmpty() ? 9090 : cfg.port;
        int metricsPort = Config.envInt("METRICS_PORT", 8081, 0, 65535);
        if (metricsPort == port) throw Config.fail("METRICS_PORT must differ from PORT (" + port + ")");

        Metrics metrics = new Metrics(cfg.version);
        Calls calls = new Calls();
        HealthStatusManager health = new HealthStatusManager();
        ExecutorService pool = Executors.newFixedThreadPool(cfg.threads);
        Server server = NettyServerBuilder.forAddress(new InetSocketAddress(cfg.bind, port))
                .executor(pool)
                .addService(ServerInterceptors.intercept(new Catalog(cfg, new Workload(), new OrderStore(), new Noise(cfg)),
                        new Observe(metrics, calls)))
                .addService(health.getHealthService())
                .addService(ProtoReflectionServiceV1.newInstance())
                .addService(deprecatedReflection())
                .build();
        server.start();
        // Ready: the overall status ("") and the service's own.
        health.setStatus("", ServingStatus.SERVING);
        health.setStatus(SERVICE, ServingStatus.SERVING);

        HttpServer side = null;
        if (metricsPort > 0) {
            side = HttpServer.create(new InetSocketAddress(cfg.bind, metricsPort), 16);
            side.createContext("/metrics", ex -> reply(ex, 200, "text/plain; version=0.0.4", metrics.render() + calls.render()));
            side.createContext("/healthz", ex -> reply(ex, 200, "text/plain", "ok\n"));
            side.start();
        }
        HttpServer sideServer = side;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            health.enterTerminalState(); // NOT_SERVING to health watchers first
            server.shutdown();
            try {
                server.awaitTermination(3, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            server.shutdownNow();
            if (sideServer != null) sideServer.stop(0);
            pool.shutdownNow();
        }));
        System.err.printf("sample-app-grpc %s listening on %s:%d (gRPC: %s, health, reflection; metrics-port=%d, slow-ms=%d, slow-percent=%d, threads=%d)%n",
                cfg.version, cfg.bind, port, SERVICE, metricsPort, cfg.slowMs, cfg.slowPercent, cfg.threads);
        server.awaitTermination();
    }

    /** v1alpha reflection, still the only one some clients ask for. */
    @SuppressWarnings("deprecation")
    private static io.grpc.BindableService deprecatedReflection() {
        return ProtoReflectionService.newInstance();
    }

    private static void reply(HttpExchange ex, int status, String type, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", type);
        ex.sendResponseHeaders(status, b.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(b);
        }
    }

    /** The Catalog methods, each the HTTP app's work for the same endpoint. */
    static final class Catalog extends CatalogGrpc.CatalogImplBase {
        private final Config cfg;
        private final Workload work;
        private final OrderStore orders;
        private final Noise noise;
        private final JsonFormat.Printer json = JsonFormat.printer().omittingInsignificantWhitespace();

        Catalog(Config cfg, Workload work, OrderStore orders, Noise noise) {
            this.cfg = cfg;
            this.work = work;
            this.orders = orders;
            this.noise = noise;
        }

        @Override
        public void getItem(GetItemRequest req, StreamObserver<Item> out) {
            answer(out, () -> {
                slow();
                Quote q = work.quote(req.getId());
                return Item.newBuilder().setId(req.getId()).setVersion(cfg.version).setItems(q.items())
                        .setTotal(q.total().toPlainString()).setDigest(q.digest()).setFilters(q.filters()).build();
            });
        }

        @Override
        public void placeOrder(PlaceOrderRequest req, StreamObserver<PlaceOrderReply> out) {
            answer(out, () -> {
                slow();
                boolean warmup = Boolean.TRUE.equals(WARMUP.get());
                // The HTTP app's order code reads JSON: the proto's JSON form
                // (qty is int32, so it prints as a number as that code wants).
                OrderStore.Outcome o = orders.place(work, json.print(req), warmup);
                return PlaceOrderReply.newBuilder().setVersion(cfg.version).setId(o.id())
                        .setTotal(o.total().toPlainString()).setCommitted(o.committed()).setWarmup(warmup).build();
            });
        }

        @Override
        public void countOrders(CountOrdersRequest req, StreamObserver<CountOrdersReply> out) {
            answer(out, () -> CountOrdersReply.newBuilder().setVersion(cfg.version).setCount(orders.count()).build());
        }

        interface Body<T> {
            T run() throws Exception;
        }

        /** Runs a unary call; a bad field is INVALID_ARGUMENT, anything else INTERNAL. */
        private static <T> void answer(StreamObserver<T> out, Body<T> body) {
            T reply;
            try {
                reply = body.run();
            } catch (Main.BadRequest e) {
                out.onError(Status.INVALID_ARGUMENT.withDescription(e.getMessage()).asRuntimeException());
                return;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                out.onError(Status.CANCELLED.withDescription("interrupted").asRuntimeException());
                return;
            } catch (Exception e) {
                out.onError(Status.INTERNAL.withDescription(String.valueOf(e)).withCause(e).asRuntimeException());
                return;
            }
            out.onNext(reply);
            out.onCompleted();
        }

        /** A "bad" version's delay (SLOW_MS on SLOW_PERCENT % of calls), then the noisy neighbour. */
        private void slow() throws InterruptedException {
            if (cfg.slowMs > 0 && (cfg.slowPercent >= 100 || ThreadLocalRandom.current().nextInt(100) < cfg.slowPercent)) {
                Thread.sleep(cfg.slowMs);
            }
            noise.spike();
        }
    }

    /**
     * Marks warm-up calls in the call's Context and counts every call by
     * method and status code (in {@link Metrics}, as the HTTP app counts
     * paths) and the warm-up calls by method.
     */
    static final class Observe implements ServerInterceptor {
        private final Metrics metrics;
        private final Calls calls;

        Observe(Metrics metrics, Calls calls) {
            this.metrics = metrics;
            this.calls = calls;
        }

        @Override
        public <Q, A> ServerCall.Listener<Q> interceptCall(ServerCall<Q, A> call, Metadata headers, ServerCallHandler<Q, A> next) {
            long start = System.nanoTime();
            boolean warmup = headers.containsKey(WARMUP_KEY);
            String method = "/" + call.getMethodDescriptor().getFullMethodName();
            if (warmup) calls.warmup(method);
            ServerCall<Q, A> counted = new SimpleForwardingServerCall<>(call) {
                @Override
                public void close(Status status, Metadata trailers) {
                    metrics.observe(method, status.getCode().value(), (System.nanoTime() - start) / 1e9);
                    super.close(status, trailers);
                }
            };
            return Contexts.interceptCall(Context.current().withValue(WARMUP, warmup), counted, headers, next);
        }
    }

    /** Warm-up calls per method, rendered after {@link Metrics}' text. */
    static final class Calls {
        private final Map<String, LongAdder> warmup = new ConcurrentHashMap<>();

        void warmup(String method) {
            warmup.computeIfAbsent(method, k -> new LongAdder()).increment();
        }

        String render() {
            StringBuilder b = new StringBuilder(256);
            b.append("# HELP sample_app_warmup_calls_total gRPC calls that carried the metadata x-danki-warmup.\n")
                    .append("# TYPE sample_app_warmup_calls_total counter\n");
            new TreeMap<>(warmup).forEach((m, n) -> b.append("sample_app_warmup_calls_total{method=\"").append(m)
                    .append("\"} ").append(n.sum()).append('\n'));
            return b.toString();
        }
    }
}
