package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@code warm}: a pod that is warm from the start. Until {@code /healthz}
 * answers 200 (it answers 503 meanwhile), the app sends itself
 * {@code WARM_REQUESTS} requests (default 3000) over HTTP on two connections:
 * {@code GET /} and, every fourth, a rolled-back {@code POST /orders} (with the
 * warm-up header), like a Spring {@code ApplicationRunner} that calls its own
 * API before readiness passes. Its first request from outside is about as
 * fast as its thousandth: a warm-up in front of it has nothing to gain. Its
 * own requests count in {@code /metrics} like any others.
 */
final class Warm implements Shape {
    private final Workload base;
    private final String self;
    private final int requests = Config.envInt("WARM_REQUESTS", 3000, 0, 10_000_000);
    private volatile boolean warm;

    Warm(Config cfg, Workload base) {
        this.base = base;
        String host = cfg.bind.equals("0.0.0.0") || cfg.bind.equals("::") ? "127.0.0.1" : cfg.bind;
        self = "http://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + cfg.port;
    }

    @Override
    public void start() {
        Thread t = new Thread(this::warmUp, "self-warm-up");
        t.setDaemon(true);
        t.start();
    }

    private void warmUp() {
        long start = System.nanoTime();
        AtomicInteger next = new AtomicInteger();
        Runnable loop = () -> {
            for (int i; (i = next.getAndIncrement()) < requests; ) {
                try {
                    call(i % 4 == 3 ? "POST" : "GET", i % 4 == 3 ? "/orders" : "/?seed=" + i);
                } catch (IOException e) {
                    System.err.println("sample-app: self warm-up request " + i + ": " + e);
                }
            }
        };
        Thread other = new Thread(loop, "self-warm-up-2");
        other.setDaemon(true);
        other.start();
        loop.run();
        try {
            other.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        }
        warm = true;
        System.err.printf("sample-app: warm after %d requests to itself in %.1f s: ready%n", requests, (System.nanoTime() - start) / 1e9);
    }

    /** One request to the app itself; keep-alive (the JDK reuses the connection once the body is read). */
    private void call(String method, String path) throws IOException {
        HttpURLConnection c = (HttpURLConnection) URI.create(self + path).toURL().openConnection();
        c.setRequestMethod(method);
        c.setRequestProperty(Main.WARMUP_HEADER, "self");
        if (method.equals("POST")) {
            c.setDoOutput(true);
            try (OutputStream out = c.getOutputStream()) {
                out.write("{}".getBytes(StandardCharsets.UTF_8));
            }
        }
        int code = c.getResponseCode();
        try (InputStream in = code < 400 ? c.getInputStream() : c.getErrorStream()) {
            if (in != null) in.transferTo(OutputStream.nullOutputStream());
        }
        if (code >= 400) throw new IOException(method + " " + path + ": HTTP " + code);
    }

    @Override
    public boolean ready() {
        return warm;
    }

    @Override
    public Work enter(HttpExchange ex) {
        return base;
    }

    @Override
    public String describe() {
        return "warm (warm-requests=" + requests + ")";
    }
}
