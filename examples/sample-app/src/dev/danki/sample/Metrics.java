package dev.danki.sample;

import java.lang.management.CompilationMXBean;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.DoubleAdder;
import java.util.concurrent.atomic.LongAdder;

/**
 * A tiny Prometheus text exposition: request counters and JVM GC/heap/JIT figures. The JIT's
 * cumulative compile time is Micrometer's name for it ({@code jvm_compilation_time_ms_total}),
 * the signal danki's warm-up reads to tell a JIT still compiling (docs/warmup.md).
 */
final class Metrics {
    private final String version;
    private final long startMillis = System.currentTimeMillis();
    private final Map<String, LongAdder> requests = new ConcurrentHashMap<>();
    private final Map<String, DoubleAdder> seconds = new ConcurrentHashMap<>();

    Metrics(String version) {
        this.version = version;
    }

    void observe(String path, int status, double secs) {
        String key = "path=\"" + path + "\",code=\"" + status + "\"";
        requests.computeIfAbsent(key, k -> new LongAdder()).increment();
        seconds.computeIfAbsent("path=\"" + path + "\"", k -> new DoubleAdder()).add(secs);
    }

    String render() {
        StringBuilder b = new StringBuilder(2048);
        b.append("# HELP sample_app_info Version of the sample app.\n# TYPE sample_app_info gauge\n");
        b.append("sample_app_info{version=\"").append(version).append("\"} 1\n");
        b.append("# HELP sample_app_requests_total HTTP requests served.\n# TYPE sample_app_requests_total counter\n");
        new TreeMap<>(requests).forEach((k, v) -> b.append("sample_app_requests_total{").append(k).append("} ").append(v.sum()).append('\n'));
        b.append("# HELP sample_app_request_seconds_total Time spent serving requests.\n# TYPE sample_app_request_seconds_total counter\n");
        new TreeMap<>(seconds).forEach((k, v) -> b.append("sample_app_request_seconds_total{").append(k).append("} ").append(v.sum()).append('\n'));
        b.append("# HELP jvm_gc_collection_seconds_total Time spent in GC pauses, per collector.\n# TYPE jvm_gc_collection_seconds_total counter\n");
        StringBuilder count = new StringBuilder();
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            String l = "{gc=\"" + gc.getName() + "\"} ";
            b.append("jvm_gc_collection_seconds_total").append(l).append(Math.max(0, gc.getCollectionTime()) / 1000.0).append('\n');
            count.append("jvm_gc_collections_total").append(l).append(Math.max(0, gc.getCollectionCount())).append('\n');
        }
        b.append("# HELP jvm_gc_collections_total GC runs, per collector.\n# TYPE jvm_gc_collections_total counter\n").append(count);
        MemoryMXBean mem = ManagementFactory.getMemoryMXBean();
        b.append("# HELP jvm_memory_heap_used_bytes Heap in use.\n# TYPE jvm_memory_heap_used_bytes gauge\n");
        b.append("jvm_memory_heap_used_bytes ").append(mem.getHeapMemoryUsage().getUsed()).append('\n');
        b.append("# HELP jvm_classes_loaded Classes currently loaded.\n# TYPE jvm_classes_loaded gauge\n");
        b.append("jvm_classes_loaded ").append(ManagementFactory.getClassLoadingMXBean().getLoadedClassCount()).append('\n');
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        if (jit != null && jit.isCompilationTimeMonitoringSupported()) {
            b.append("# HELP jvm_compilation_time_ms_total Time spent by the JIT compiling, in milliseconds.\n# TYPE jvm_compilation_time_ms_total counter\n");
            b.append("jvm_compilation_time_ms_total{compiler=\"").append(jit.getName()).append("\"} ").append(jit.getTotalCompilationTime()).append('\n');
        }
        b.append("# HELP process_uptime_seconds Seconds since the app started.\n# TYPE process_uptime_seconds gauge\n");
        b.append("process_uptime_seconds ").append((System.currentTimeMillis() - startMillis) / 1000.0).append('\n');
        return b.toString();
    }
}
