package dev.danki.sample;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.reflect.Constructor;
import java.util.regex.Pattern;

/**
 * Loads fresh copies of the request code ({@link Workload}, {@link Json},
 * {@link Ctx}, the filter chain) with a class loader of their own each, as an
 * application server loads each tenant's or plugin's copy of a library. To the
 * JVM every copy is a distinct set of classes: each is loaded, verified,
 * interpreted and JIT-compiled on its own, so a request running a copy that
 * has run rarely is cold even when other copies are warm. Used by the
 * {@code jit-slow} shape (many copies, one picked per request) and by
 * {@code lazy-endpoints} (one copy per endpoint, loaded on its first call).
 *
 * <p>Only the request code is copied; the JDK and the types the handler
 * shares with the copies ({@link Work}, {@link Quote}, {@link Main}) come from
 * the app's own class loader.
 */
final class Copies {
    /** The classes each copy gets its own version of (child-first). */
    private static final Pattern COPIED = Pattern.compile(
            "dev\\.danki\\.sample\\.(Workload|Json|Ctx|Filter|Filters|F\\d+)(\\$.*)?");

    private Copies() {}

    /** A new copy of the workload; its classes load lazily, on first use. */
    static Work load(String name) {
        try {
            Class<?> c = Class.forName(Workload.class.getName(), true, new Loader(name, Copies.class.getClassLoader()));
            Constructor<?> k = c.getDeclaredConstructor();
            k.setAccessible(true); // package-private, and in another runtime package
            return (Work) k.newInstance();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("loading workload copy " + name + ": " + e, e);
        }
    }

    /** Child-first for {@link #COPIED}, the parent for everything else. */
    private static final class Loader extends ClassLoader {
        static {
            registerAsParallelCapable();
        }

        Loader(String name, ClassLoader parent) {
            super("copy-" + name, parent);
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (!COPIED.matcher(name).matches()) return super.loadClass(name, resolve);
            synchronized (getClassLoadingLock(name)) {
                Class<?> c = findLoadedClass(name);
                if (c == null) c = findClass(name);
                if (resolve) resolveClass(c);
                return c;
            }
        }

        @Override
        protected Class<?> findClass(String name) throws ClassNotFoundException {
            String file = name.replace('.', '/') + ".class";
            try (InputStream in = getParent().getResourceAsStream(file)) {
                if (in == null) throw new ClassNotFoundException(name);
                byte[] b = in.readAllBytes();
                return defineClass(name, b, 0, b.length);
            } catch (IOException e) {
                throw new UncheckedIOException("reading " + file, e);
            }
        }
    }
}
