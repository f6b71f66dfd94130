package dev.danki.sample;

import java.math.BigDecimal;

/** The result of one {@link Work#quote} call (public: see {@link Work}). */
public record Quote(int items, BigDecimal total, String digest, int filters) {}
