package dev.danki.sample;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneId;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

/**
 * The per-request work: what a typical JVM backend does for one call, in code
 * paths the JIT has to discover (so a cold process is slow).
 */
final class Workload implements Work {

    private static final int ITEMS = 220; // ~50 KB of JSON
    private static final String[] CATEGORIES = {"books", "games", "garden", "kitchen", "music", "outdoor", "sports", "toys"};
    private static final String[] ZONES = {"Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney", "UTC"};
    private static final Pattern SKU = Pattern.compile("^([A-Z]{3})-(\\d{4})-([a-f0-9]{6})$");
    private static final Pattern EMAIL = Pattern.compile("^[\\w.+-]+@([\\w-]+\\.)+[a-z]{2,}$");
    private static final DateTimeFormatter DAY = DateTimeFormatter.ISO_LOCAL_DATE;
    private static final MathContext MC = new MathContext(12, RoundingMode.HALF_EVEN);

    @Override
    public Quote quote(long seed) throws NoSuchAlgorithmException {
        SplittableRandom rnd = new SplittableRandom(seed);
        String json = catalogue(rnd);
        @SuppressWarnings("unchecked")
        Map<String, Object> doc = (Map<String, Object>) Json.parse(json);
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> items = (List<Map<String, Object>>) doc.get("items");

        // Streams and BigDecimal: totals per category, with tax and discounts.
        Map<String, BigDecimal> byCategory = items.stream()
                .filter(it -> SKU.matcher((String) it.get("sku")).matches())
                .collect(Collectors.groupingBy(it -> (String) it.get("category"), TreeMap::new,
                        Collectors.reducing(BigDecimal.ZERO, Workload::lineTotal, BigDecimal::add)));
        BigDecimal total = byCategory.values().stream().reduce(BigDecimal.ZERO, BigDecimal::add)
                .multiply(new BigDecimal("1.19"), MC).setScale(2, RoundingMode.HALF_EVEN);

        // java.time: delivery windows in the buyers' zones.
        long lateDays = items.stream().mapToLong(it -> {
            LocalDate shipped = LocalDate.parse((String) it.get("shipped"), DAY);
            ZonedDateTime due = shipped.atStartOfDay(ZoneId.of((String) it.get("zone"))).plusDays(3);
            return Duration.between(due.toInstant(), Instant.parse("2026-01-01T00:00:00Z")).toDays() > 400 ? 1 : 0;
        }).sum();

        List<String> top = items.stream()
                .sorted(Comparator.comparing((Map<String, Object> it) -> (BigDecimal) it.get("price")).reversed()
                        .thenComparing(it -> (String) it.get("sku")))
                .limit(20).map(it -> ((String) it.get("name")).toUpperCase()).collect(Collectors.toList());

        // The filter chain: many small classes, each called once per request.
        Ctx ctx = new Ctx(json.getBytes(StandardCharsets.UTF_8), seed);
        for (Filter f : Filters.CHAIN) f.apply(ctx);

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("byCategory", byCategory);
        out.put("total", total);
        out.put("late", lateDays);
        out.put("top", top);
        out.put("chain", ctx.notes);
        out.put("tags", ctx.tags);
        StringBuilder b = new StringBuilder(json.length() / 4);
        Json.write(b, out);
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        sha.update(b.toString().getBytes(StandardCharsets.UTF_8));
        sha.update(Long.toString(ctx.hash).getBytes(StandardCharsets.UTF_8));
        return new Quote(items.size(), total, HexFormat.of().formatHex(sha.digest(), 0, 8), Filters.CHAIN.size());
    }

    /** Validates and prices an order; the caller decides whether it is kept. */
    Map<String, Object> order(String body) {
        Object parsed = Json.parse(body.isBlank() ? "{}" : body);
        if (!(parsed instanceof Map<?, ?> m)) throw new Main.BadRequest("order must be a JSON object");
        String email = String.valueOf(m.containsKey("email") ? m.get("email") : "buyer@example.com");
        if (!EMAIL.matcher(email).matches()) throw new Main.BadRequest("field email: not an e-mail address: " + email);
        Object rawLines = m.containsKey("lines") ? m.get("lines") : List.of(Map.of("sku", "ABC-0001-abcdef", "qty", 1L, "price", "9.99"));
        if (!(rawLines instanceof List<?> lines) || lines.isEmpty()) throw new Main.BadRequest("field lines: must be a non-empty list");
        BigDecimal total = BigDecimal.ZERO;
        List<Map<String, Object>> priced = new ArrayList<>();
        for (Object o : lines) {
            if (!(o instanceof Map<?, ?> line)) throw new Main.BadRequest("field lines: each line must be an object");
            String sku = String.valueOf(line.get("sku"));
            Matcher sm = SKU.matcher(sku);
            if (!sm.matches()) throw new Main.BadRequest("field lines[].sku: must look like ABC-0001-abcdef, got " + sku);
            long qty = line.get("qty") instanceof Number n ? n.longValue() : 1;
            if (qty < 1) throw new Main.BadRequest("field lines[].qty: must be >= 1");
            BigDecimal price = new BigDecimal(String.valueOf(line.containsKey("price") ? line.get("price") : "1.00"));
            BigDecimal sum = price.multiply(BigDecimal.valueOf(qty), MC);
            total = total.add(sum);
            Map<String, Object> p = new LinkedHashMap<>();
            p.put("sku", sku);
            p.put("group", sm.group(1));
            p.put("qty", qty);
            p.put("sum", sum.setScale(2, RoundingMode.HALF_EVEN));
            priced.add(p);
        }
        Ctx ctx = new Ctx(body.getBytes(StandardCharsets.UTF_8), total.hashCode());
        for (Filter f : Filters.CHAIN) f.apply(ctx);
        Map<String, Object> order = new LinkedHashMap<>();
        order.put("email", email);
        order.put("lines", priced);
        order.put("total", total.multiply(new BigDecimal("1.19"), MC).setScale(2, RoundingMode.HALF_EVEN));
        order.put("placed", ZonedDateTime.now(ZoneId.of("UTC")).format(DateTimeFormatter.ISO_OFFSET_DATE_TIME));
        order.put("audit", ctx.hash);
        return order;
    }

    private static BigDecimal lineTotal(Map<String, Object> it) {
        BigDecimal price = (BigDecimal) it.get("price");
        long qty = (Long) it.get("qty");
        BigDecimal discount = ((BigDecimal) it.get("discount")).movePointLeft(2);
        return price.multiply(BigDecimal.valueOf(qty), MC).multiply(BigDecimal.ONE.subtract(discount), MC);
    }

    private static String catalogue(SplittableRandom rnd) {
        List<Object> items = new ArrayList<>(ITEMS);
        LocalDate base = LocalDate.of(2024, 1, 1);
        for (int k = 0; k < ITEMS; k++) {
            Map<String, Object> it = new LinkedHashMap<>();
            String cat = CATEGORIES[rnd.nextInt(CATEGORIES.length)];
            it.put("sku", String.format("%s-%04d-%06x", cat.substring(0, 3).toUpperCase(), rnd.nextInt(10000), rnd.nextInt(0x1000000)));
            it.put("name", cat + " item " + Long.toString(rnd.nextLong() & 0xffffffL, 36));
            it.put("category", cat);
            it.put("price", BigDecimal.valueOf(rnd.nextInt(100, 100000), 2));
            it.put("qty", (long) rnd.nextInt(1, 20));
            it.put("discount", BigDecimal.valueOf(rnd.nextInt(0, 300), 1));
            it.put("shipped", base.plusDays(rnd.nextInt(0, 700)).format(DAY));
            it.put("zone", ZONES[rnd.nextInt(ZONES.length)]);
            it.put("buyer", "user" + rnd.nextInt(100000) + "@example.com");
            it.put("active", rnd.nextBoolean());
            it.put("note", "free text with \"quotes\" and a tab\there #" + k);
            items.add(it);
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("generated", Instant.ofEpochSecond(1_700_000_000L + rnd.nextInt(1_000_000)).toString());
        doc.put("items", items);
        StringBuilder b = new StringBuilder(64 * 1024);
        Json.write(b, doc);
        return b.toString();
    }
}
