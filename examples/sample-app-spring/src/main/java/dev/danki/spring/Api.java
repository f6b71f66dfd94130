package dev.danki.spring;

import java.util.LinkedHashMap;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import jakarta.validation.Valid;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import dev.danki.spring.Catalogue.Quote;

/** The endpoints of the lab's sample-app contract. */
@RestController
class Api {
    /** The marker danki's warm-up puts on its requests (docs/warmup.md). */
    static final String WARMUP_HEADER = "X-Danki-Warmup";

    private final QuoteService quotes;
    private final Orders orders;
    private final Settings settings;
    private final PrometheusMeterRegistry registry;

    Api(QuoteService quotes, Orders orders, Settings settings, PrometheusMeterRegistry registry) {
        this.quotes = quotes;
        this.orders = orders;
        this.settings = settings;
        this.registry = registry;
    }

    /** The main work; ?seed=N picks the catalogue and the request (default: a random one). */
    @GetMapping({"/", "/api/quote"})
    Quote quote(@RequestParam(required = false) Long seed) throws JsonProcessingException, InterruptedException {
        settings.slow();
        return quotes.quote(seed != null ? seed : System.nanoTime());
    }

    /**
     * Stores the order, unless it is warm-up (the X-Danki-Warmup header) or a
     * mirrored copy (Envoy appends -shadow to a mirrored request's Host):
     * then the same code runs and the order is rolled back.
     */
    @PostMapping("/orders")
    ResponseEntity<Map<String, Object>> place(@Valid @RequestBody(required = false) Orders.OrderRequest body,
            @RequestHeader HttpHeaders headers) throws InterruptedException {
        settings.slow();
        String by = headers.containsKey(WARMUP_HEADER) ? "header" : shadowHost(headers.getFirst(HttpHeaders.HOST)) ? "mirror" : null;
        Orders.Order o = orders.place(body, by != null);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", settings.version());
        out.put("id", o.id() == 0 ? null : Long.toString(o.id()));
        out.put("total", o.total().toPlainString());
        out.put("committed", by == null);
        out.put("warmup", by != null);
        out.put("warmupBy", by);
        return ResponseEntity.status(by == null ? HttpStatus.CREATED : HttpStatus.OK).body(out);
    }

    @GetMapping("/orders/count")
    Map<String, Object> count() {
        return Map.of("version", settings.version(), "count", orders.count());
    }

    /** The lab's readiness probe. */
    @GetMapping(value = "/healthz", produces = MediaType.TEXT_PLAIN_VALUE)
    String healthz() {
        return "ok\n";
    }

    /**
     * Actuator's Prometheus registry, also at the path the lab's Prometheus
     * scrapes every sample app on (prometheus.io/path: /metrics).
     */
    @GetMapping(value = "/metrics", produces = "text/plain; version=0.0.4; charset=utf-8")
    String metrics() {
        return registry.scrape();
    }

    static boolean shadowHost(String host) {
        if (host == null) return false;
        int colon = host.lastIndexOf(':');
        String name = colon > 0 && host.indexOf(']') < colon ? host.substring(0, colon) : host;
        return name.endsWith("-shadow");
    }
}
