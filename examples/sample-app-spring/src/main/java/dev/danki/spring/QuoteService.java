package dev.danki.spring;

import java.math.BigDecimal;
import java.math.MathContext;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.stream.Collectors;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import jakarta.validation.Validator;
import org.springframework.stereotype.Service;

import dev.danki.spring.Catalogue.CategoryStats;
import dev.danki.spring.Catalogue.Item;
import dev.danki.spring.Catalogue.Priced;
import dev.danki.spring.Catalogue.Quote;
import dev.danki.spring.Catalogue.QuoteRequest;

/**
 * The main endpoint's work, what a typical Spring service does per request:
 * read a catalogue (here generated from the seed and sent through Jackson
 * both ways, as if from a JSON store or another service), validate it and a
 * quote request with Bean Validation, then price the request with streams
 * and BigDecimal.
 */
@Service
class QuoteService {
    static final int ITEMS = 120;
    private static final TypeReference<List<Item>> ITEM_LIST = new TypeReference<>() {};
    private static final BigDecimal TAX = new BigDecimal("0.081");
    private static final BigDecimal DISCOUNT = new BigDecimal("0.05");
    private static final BigDecimal DISCOUNT_FROM = new BigDecimal("500.00");

    private final ObjectMapper json;
    private final Validator validator;
    private final Settings settings;

    QuoteService(ObjectMapper json, Validator validator, Settings settings) {
        this.json = json;
        this.validator = validator;
        this.settings = settings;
    }

    Quote quote(long seed) throws JsonProcessingException {
        Random r = new Random(seed);
        String text = json.writeValueAsString(Catalogue.items(r, ITEMS));
        List<Item> items = json.readValue(text, ITEM_LIST);
        int invalid = (int) items.stream().filter(i -> !validator.validate(i).isEmpty()).count();
        QuoteRequest req = Catalogue.request(r, items);
        var violations = validator.validate(req);
        if (!violations.isEmpty()) {
            // The generator makes valid requests only: a violation is a bug here.
            throw new IllegalStateException("generated quote request is invalid: " + violations);
        }

        Map<String, Item> bySku = items.stream().collect(Collectors.toMap(Item::sku, Function.identity(), (a, b) -> a));
        List<Priced> lines = req.lines().stream()
                .map(l -> {
                    Item it = bySku.get(l.sku());
                    return new Priced(it.sku(), it.name(), l.qty(), it.price(), Catalogue.money(it.price().multiply(BigDecimal.valueOf(l.qty()))));
                })
                .sorted(Comparator.comparing(Priced::amount).reversed())
                .toList();
        BigDecimal subtotal = lines.stream().map(Priced::amount).reduce(BigDecimal.ZERO, BigDecimal::add);
        BigDecimal discount = Catalogue.money(subtotal.compareTo(DISCOUNT_FROM) >= 0 ? subtotal.multiply(DISCOUNT) : BigDecimal.ZERO);
        BigDecimal tax = Catalogue.money(subtotal.subtract(discount).multiply(TAX));
        BigDecimal total = subtotal.subtract(discount).add(tax);

        Map<String, CategoryStats> categories = items.stream().collect(Collectors.groupingBy(Item::category, TreeMap::new,
                Collectors.collectingAndThen(Collectors.toList(), QuoteService::stats)));
        return new Quote(settings.version(), items.size(), invalid, text.length(), lines, subtotal, discount, tax, total, categories);
    }

    private static CategoryStats stats(List<Item> items) {
        BigDecimal sum = items.stream().map(Item::price).reduce(BigDecimal.ZERO, BigDecimal::add);
        BigDecimal max = items.stream().map(Item::price).max(Comparator.naturalOrder()).orElse(BigDecimal.ZERO);
        long inStock = items.stream().filter(i -> i.stock() > 0).count();
        return new CategoryStats(items.size(), inStock,
                Catalogue.money(sum.divide(BigDecimal.valueOf(items.size()), MathContext.DECIMAL64)), max);
    }
}
