package dev.danki.spring;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

import jakarta.validation.Valid;
import jakarta.validation.constraints.DecimalMin;
import jakarta.validation.constraints.Digits;
import jakarta.validation.constraints.Email;
import jakarta.validation.constraints.Max;
import jakarta.validation.constraints.Min;
import jakarta.validation.constraints.NotBlank;
import jakarta.validation.constraints.NotEmpty;
import jakarta.validation.constraints.NotNull;
import jakarta.validation.constraints.Pattern;
import jakarta.validation.constraints.PositiveOrZero;
import jakarta.validation.constraints.Size;

/** The DTOs of the quote endpoint and a seeded generator of catalogues and quote requests. */
final class Catalogue {
    private Catalogue() {}

    static final String SKU = "[A-Z]{3}-\\d{4}-[a-z]{6}";

    /** One catalogue entry, as a typical service reads it from its store and sends it as JSON. */
    record Item(
            @NotNull @Pattern(regexp = SKU) String sku,
            @NotBlank @Size(max = 80) String name,
            @NotBlank String category,
            @NotNull @DecimalMin("0.01") @Digits(integer = 6, fraction = 2) BigDecimal price,
            @PositiveOrZero int stock,
            @Size(max = 8) List<@NotBlank String> tags,
            @NotNull Instant updated) {}

    /** What a client asks a quote for. */
    record QuoteRequest(
            @NotBlank @Email String email,
            @NotEmpty @Size(max = 20) List<@Valid Line> lines) {}

    record Line(@NotNull @Pattern(regexp = SKU) String sku, @Min(1) @Max(100) int qty) {}

    /** One priced line of a quote. */
    record Priced(String sku, String name, int qty, BigDecimal unit, BigDecimal amount) {}

    /** Per category: how many items, how many in stock, the mean and the highest price. */
    record CategoryStats(long items, long inStock, BigDecimal meanPrice, BigDecimal maxPrice) {}

    /** The quote endpoint's answer. */
    record Quote(String version, int items, int invalidItems, int catalogueBytes, List<Priced> lines,
            BigDecimal subtotal, BigDecimal discount, BigDecimal tax, BigDecimal total,
            Map<String, CategoryStats> categories) {}

    private static final String[] CATEGORIES = {"books", "garden", "kitchen", "music", "outdoor", "tools", "toys", "video"};
    private static final String[] WORDS = {"alpine", "bright", "cedar", "delta", "ember", "fjord", "granite", "harbor",
            "indigo", "juniper", "kestrel", "lumen", "meadow", "nimbus", "onyx", "prairie", "quartz", "ridge"};
    private static final String[] TAGS = {"new", "sale", "eco", "gift", "bulk", "limited", "refurb", "import"};

    /** n items from seed; about one in 40 breaks a constraint, as real data does. */
    static List<Item> items(Random r, int n) {
        List<Item> out = new ArrayList<>(n);
        Instant base = Instant.parse("2026-01-01T00:00:00Z");
        for (int i = 0; i < n; i++) {
            String sku = sku(r, i);
            String name = WORDS[r.nextInt(WORDS.length)] + " " + WORDS[r.nextInt(WORDS.length)] + " " + (i + 1);
            BigDecimal price = BigDecimal.valueOf(100 + r.nextInt(99_900), 2);
            int stock = r.nextInt(40) == 0 ? -1 : r.nextInt(500);
            List<String> tags = new ArrayList<>();
            for (int t = r.nextInt(4); t > 0; t--) tags.add(TAGS[r.nextInt(TAGS.length)]);
            out.add(new Item(sku, name, CATEGORIES[r.nextInt(CATEGORIES.length)], price, stock, tags,
                    base.plusSeconds(r.nextInt(30_000_000))));
        }
        return out;
    }

    /** A quote request for a few items of the catalogue. */
    static QuoteRequest request(Random r, List<Item> items) {
        List<Line> lines = new ArrayList<>();
        for (int k = 1 + r.nextInt(6); k > 0; k--) {
            lines.add(new Line(items.get(r.nextInt(items.size())).sku(), 1 + r.nextInt(10)));
        }
        return new QuoteRequest("buyer" + r.nextInt(1000) + "@example.com", lines);
    }

    static String sku(Random r, int i) {
        StringBuilder b = new StringBuilder(15);
        for (int k = 0; k < 3; k++) b.append((char) ('A' + r.nextInt(26)));
        b.append('-').append(String.format("%04d", i % 10_000)).append('-');
        for (int k = 0; k < 6; k++) b.append((char) ('a' + r.nextInt(26)));
        return b.toString();
    }

    static BigDecimal money(BigDecimal v) {
        return v.setScale(2, RoundingMode.HALF_EVEN);
    }
}
