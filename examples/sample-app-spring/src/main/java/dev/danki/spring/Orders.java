package dev.danki.spring;

import java.math.BigDecimal;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import jakarta.validation.Valid;
import jakarta.validation.constraints.DecimalMin;
import jakarta.validation.constraints.Digits;
import jakarta.validation.constraints.Email;
import jakarta.validation.constraints.Max;
import jakarta.validation.constraints.Min;
import jakarta.validation.constraints.NotNull;
import jakarta.validation.constraints.Pattern;
import jakarta.validation.constraints.Size;
import org.springframework.stereotype.Component;

/**
 * The order store behind POST /orders: an order is priced inside a
 * "transaction" that commits, or rolls back when the request is warm-up, so
 * warm-up runs the same code and leaves nothing behind.
 */
@Component
class Orders {
    /** The body of POST /orders; every field optional, as in the sample app. */
    record OrderRequest(@Email String email, @Size(max = 50) List<@Valid OrderLine> lines) {}

    record OrderLine(
            @NotNull @Pattern(regexp = Catalogue.SKU) String sku,
            @Min(1) @Max(1000) int qty,
            @NotNull @DecimalMin("0.01") @Digits(integer = 7, fraction = 2) BigDecimal price) {}

    record Order(long id, String email, List<OrderLine> lines, BigDecimal total) {}

    private final Map<Long, Order> stored = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();

    /** Prices req and stores it unless rollback; returns the order (id 0 when rolled back). */
    Order place(OrderRequest req, boolean rollback) {
        List<OrderLine> lines = req == null || req.lines() == null ? List.of() : req.lines();
        BigDecimal total = Catalogue.money(lines.stream()
                .map(l -> l.price().multiply(BigDecimal.valueOf(l.qty())))
                .reduce(BigDecimal.ZERO, BigDecimal::add));
        String email = req == null ? null : req.email();
        if (rollback) {
            return new Order(0, email, lines, total);
        }
        Order o = new Order(ids.incrementAndGet(), email, lines, total);
        stored.put(o.id(), o);
        return o;
    }

    int count() {
        return stored.size();
    }
}
