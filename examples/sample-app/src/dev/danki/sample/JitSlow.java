package dev.danki.sample;

import com.sun.net.httpserver.HttpExchange;

import java.util.concurrent.ThreadLocalRandom;

/**
 * {@code jit-slow}: a JIT warm-up several times longer than {@code jit}'s. The
 * main endpoint runs {@code JIT_SLOW_COPIES} (default 16) copies of the request
 * code, each defined by a class loader of its own ({@link Copies}), and each
 * request runs one copy picked at random: as in a service with many tenants or
 * plugins, there is that many times more code to load and compile, and each
 * copy gets only its share of the requests, so it reaches the JIT's thresholds
 * that many times later. A warm request costs what it costs in {@code jit}.
 */
final class JitSlow implements Shape {
    private final Work[] copies;

    JitSlow() {
        copies = new Work[Config.envInt("JIT_SLOW_COPIES", 16, 1, 1000)];
        for (int i = 0; i < copies.length; i++) copies[i] = Copies.load("jit-slow-" + i);
    }

    @Override
    public Work enter(HttpExchange ex) {
        return copies[ThreadLocalRandom.current().nextInt(copies.length)];
    }

    @Override
    public String describe() {
        return "jit-slow (copies=" + copies.length + ")";
    }
}
