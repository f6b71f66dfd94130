package dev.danki.sample;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** State the filter chain works on. */
final class Ctx {
    final byte[] data;
    long hash;
    final StringBuilder sb = new StringBuilder(64);
    final Map<String, String> notes = new LinkedHashMap<>();
    final List<String> tags = new ArrayList<>();

    Ctx(byte[] data, long seed) {
        this.data = data;
        this.hash = seed ^ 0xcbf29ce484222325L;
    }
}
