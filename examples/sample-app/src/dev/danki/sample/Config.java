package dev.danki.sample;

/** Command-line flags, falling back to environment variables. */
final class Config {
    String version = "v1";
    String bind = "0.0.0.0";
    int port = 8080;
    long slowMs = 0;
    int slowPercent = 100;
    int threads = 8;

    static Config parse(String[] args) {
        Config c = new Config();
        c.version = env("VERSION", c.version);
        c.bind = env("BIND_ADDRESS", c.bind);
        c.port = intValue("PORT", env("PORT", "8080"));
        c.slowMs = intValue("SLOW_MS", env("SLOW_MS", "0"));
        c.slowPercent = intValue("SLOW_PERCENT", env("SLOW_PERCENT", "100"));
        c.threads = intValue("THREADS", env("THREADS", "8"));
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
                case "-h", "--help" -> {
                    System.err.println("usage: sample-app [--version V] [--bind ADDR] [--port N] [--slow-ms MS] [--slow-percent P] [--threads N]\n"
                            + "  (or env VERSION, BIND_ADDRESS, PORT, SLOW_MS, SLOW_PERCENT, THREADS)");
                    System.exit(0);
                }
                default -> fail("unknown flag " + a + " (known: --version --bind --port --slow-ms --slow-percent --threads)");
            }
            i++;
        }
        if (c.port < 1 || c.port > 65535) fail("port must be 1-65535, got " + c.port);
        if (c.slowMs < 0) fail("slow-ms must be >= 0, got " + c.slowMs);
        if (c.slowPercent < 0 || c.slowPercent > 100) fail("slow-percent must be 0-100, got " + c.slowPercent);
        if (c.threads < 1) fail("threads must be >= 1, got " + c.threads);
        return c;
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }

    private static String need(String flag, String v) {
        if (v == null) fail("flag " + flag + " needs a value");
        return v;
    }

    private static int intValue(String what, String v) {
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            fail(what + " must be an integer, got \"" + v + "\"");
            return 0;
        }
    }

    private static void fail(String msg) {
        System.err.println("sample-app: " + msg);
        System.exit(2);
    }
}
