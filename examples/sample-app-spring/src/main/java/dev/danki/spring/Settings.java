package dev.danki.spring;

import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/** The app's settings: a flag, else the environment variable, else the default. */
public record Settings(String version, String bind, int port, long slowMs, int slowPercent) {

    /** Parses this app's flags ("--flag value"); every other argument is added to rest for Spring. */
    static Settings parse(String[] args, List<String> rest) {
        String version = env("VERSION", "v1");
        String bind = env("BIND_ADDRESS", "0.0.0.0");
        int port = intValue("PORT", env("PORT", "8080"));
        int slowMs = intValue("SLOW_MS", env("SLOW_MS", "0"));
        int slowPercent = intValue("SLOW_PERCENT", env("SLOW_PERCENT", "100"));
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--version" -> version = need(args, ++i, a);
                case "--bind" -> bind = need(args, ++i, a);
                case "--port" -> port = intValue(a, need(args, ++i, a));
                case "--slow-ms" -> slowMs = intValue(a, need(args, ++i, a));
                case "--slow-percent" -> slowPercent = intValue(a, need(args, ++i, a));
                case "-h", "--help" -> {
                    System.err.println("usage: sample-app-spring [--version V] [--bind ADDR] [--port N] [--slow-ms MS] [--slow-percent P] [--spring.property=value ...]\n"
                            + "  (or env VERSION, BIND_ADDRESS, PORT, SLOW_MS, SLOW_PERCENT)");
                    System.exit(0);
                }
                default -> {
                    if (!a.startsWith("--") || !a.contains("=")) {
                        fail("unknown argument " + a + " (known: --version --bind --port --slow-ms --slow-percent, or Spring's --name=value)");
                    }
                    rest.add(a);
                }
            }
        }
        if (port < 0 || port > 65535) fail("port must be 0-65535, got " + port);
        if (slowMs < 0) fail("slow-ms must be >= 0, got " + slowMs);
        if (slowPercent < 0 || slowPercent > 100) fail("slow-percent must be 0-100, got " + slowPercent);
        return new Settings(version, bind, port, slowMs, slowPercent);
    }

    /** The injected slowness of a "bad" version: SLOW_PERCENT % of requests wait SLOW_MS. */
    void slow() throws InterruptedException {
        if (slowMs > 0 && (slowPercent >= 100 || ThreadLocalRandom.current().nextInt(100) < slowPercent)) {
            Thread.sleep(slowMs);
        }
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }

    private static String need(String[] args, int i, String flag) {
        if (i >= args.length) fail("flag " + flag + " needs a value");
        return args[i];
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
        System.err.println("sample-app-spring: " + msg);
        System.exit(2);
    }
}
