package dev.danki.sample;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;

/**
 * An in-memory order "database" with transactions: a write is staged, then
 * committed, or rolled back when it is a warm-up request, so that warm-up runs
 * the real code path and keeps no data.
 */
final class OrderStore {
    record Outcome(String id, BigDecimal total, boolean committed) {}

    private final List<Map<String, Object>> committed = new ArrayList<>();

    synchronized int count() {
        return committed.size();
    }

    Outcome place(Workload work, String body, boolean warmup) {
        Map<String, Object> order = work.order(body);
        String id = UUID.randomUUID().toString();
        order.put("id", id);
        Transaction tx = new Transaction();
        tx.stage(order);
        if (warmup) {
            tx.rollback();
            return new Outcome(id, (BigDecimal) order.get("total"), false);
        }
        tx.commit();
        return new Outcome(id, (BigDecimal) order.get("total"), true);
    }

    private final class Transaction {
        private final List<Map<String, Object>> staged = new ArrayList<>();

        void stage(Map<String, Object> row) {
            staged.add(row);
        }

        void commit() {
            synchronized (OrderStore.this) {
                committed.addAll(staged);
            }
            staged.clear();
        }

        void rollback() {
            staged.clear();
        }
    }
}
