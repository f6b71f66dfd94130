package dev.danki.sample;

/** Command-line flags, falling back to environment variables. */
final class Config {
    String version = "v1";
    String bind = "0.0.0.0";
    int port = 8080;
    long slowMs = 0;
    int slowPercent = 100;
    int threads = 8;
    String coldShape = "jit";
    int noisePercent = 0;
    int noiseMs = 100;
    int maxConcurrency = 0;
    /** SPIFFE IDs whose requests are warm-up (x-forwarded-client-cert), see {@link WarmupRule}. */
    java.util.List<String> warmupPrincipals = java.util.List.of();

    static Config parse(String[] args) {
        Config c = new Config();
        c.version = env("VERSION", c.version);
        c.bind = env("BIND_ADDRESS", c.bind);
        c.port = intValue("PORT", env("PORT", "8080"));
        c.slowMs = intValue("SLOW_MS", env("SLOW_MS", "0"));
        c.slowPercent = intValue("SLOW_PERCENT", env("SLOW_PERCENT", "100"));
        c.threads = intValue("THREADS", env("THREADS", "8"));
        c.coldShape = env("COLD_SHAPE", c.coldShape);
        c.noisePercent = intValue("NOISE_PERCENT", env("NOISE_PERCENT", "0"));
        c.noiseMs = intValue("NOISE_MS", env("NOISE_MS", "100"));
        c.maxConcurrency = intValue("MAX_CONCURRENCY", env("MAX_CONCURRENCY", "0"));
        c.warmupPrincipals = WarmupRule.parsePrincipals(env("WARMUP_PRINCIPALS", ""));
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "--version" -> c.version = need(a, v);
                case "--bind" -> c.bind = need(a, v);
                case "--port" -> c.port = intValue(a, need(a, v));
                case "--slow-ms" -> c.slowMs = intValue(a, need(a, v));
                case "--slow-percent" -> c.slowPercent = intValue(a, need(a, v));
                case "--threads" -> c.threads = intValue(a, need(a, v));
                case "--cold-shape" -> c.coldShape = need(a, v);
                case "--noise-percent" -> c.noisePercent = intValue(a, need(a, v));
                case "--noise-ms" -> c.noiseMs = intValue(a, need(a, v));
                case "--max-concurrency" -> c.maxConcurrency = intValue(a, need(a, v));
                case "--warmup-principals" -> c.warmupPrincipals = WarmupRule.parsePrincipals(need(a, v));
                case "-h", "--help" -> {
                    System.err.println("usage: sample-app [--version V] [--bind ADDR] [--port N] [--slow-ms MS] [--slow-percent P] [--threads N]\n"
                            + "       [--cold-shape " + Shape.NAMES.replace(", ", "|") + "] [--noise-percent P] [--noise-ms MS] [--max-concurrency N]\n"
                            + "       [--warmup-principals spiffe://TD/ns/NS/sa/SA,...]\n"
                            + "  (or env VERSION, BIND_ADDRESS, PORT, SLOW_MS, SLOW_PERCENT, THREADS, COLD_SHAPE, NOISE_PERCENT, NOISE_MS, MAX_CONCURRENCY,\n"
                            + "   WARMUP_PRINCIPALS;\n"
                            + "   each shape's own settings are environment variables: see the README)");
                    System.exit(0);
                }
                default -> fail("unknown flag " + a + " (known: --version --bind --port --slow-ms --slow-percent --threads --cold-shape --noise-percent --noise-ms --max-concurrency --warmup-principals)");
            }
            i++;
        }
        if (c.port < 1 || c.port > 65535) fail("port must be 1-65535, got " + c.port);
        if (c.slowMs < 0) fail("slow-ms must be >= 0, got " + c.slowMs);
        if (c.slowPercent < 0 || c.slowPercent > 100) fail("slow-percent must be 0-100, got " + c.slowPercent);
        if (c.threads < 1) fail("threads must be >= 1, got " + c.threads);
        if (c.noisePercent < 0 || c.noisePercent > 100) fail("noise-percent must be 0-100, got " + c.noisePercent);
        if (c.noiseMs < 0) fail("noise-ms must be >= 0, got " + c.noiseMs);
        if (c.maxConcurrency < 0) fail("max-concurrency must be >= 0 (0: no limit), got " + c.maxConcurrency);
        return c;
    }

    /** A shape's integer setting from the environment, checked against [min, max]. */
    static int envInt(String name, int def, int min, int max) {
        int v = intValue(name, env(name, Integer.toString(def)));
        if (v < min || v > max) fail(name + " must be " + min + "-" + max + ", got " + v);
        return v;
    }

    /** A shape's text setting from the environment. */
    static String envString(String name, String def) {
        return env(name, def);
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }

    private static String need(String flag, String v) {
        if (v == null) fail("flag " + flag + " needs a value");
        return v;
    }

    static int intValue(String what, String v) {
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            fail(what + " must be an integer, got \"" + v + "\"");
            return 0;
        }
    }

    /** Exits with the message; returns only to let callers write {@code throw fail(…)}. */
    static RuntimeException fail(String msg) {
        System.err.println("sample-app: " + msg);
        System.exit(2);
        return new IllegalStateException(msg);
    }
}
