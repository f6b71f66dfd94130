package dev.danki.spring;

import java.io.IOException;

import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.stereotype.Component;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * Puts X-Version on every response (which version answered) and, behind an
 * Istio sidecar, X-Seen-Client-Cert: the x-forwarded-client-cert the sidecar
 * passed on (the lab's mesh check looks for it).
 */
@Component
class VersionFilter extends OncePerRequestFilter {
    private final Settings settings;

    VersionFilter(Settings settings) {
        this.settings = settings;
    }

    @Override
    protected void doFilterInternal(HttpServletRequest req, HttpServletResponse resp, FilterChain chain)
            throws ServletException, IOException {
        // Before the chain: once the body is written, headers are committed.
        resp.setHeader("X-Version", settings.version());
        String xfcc = req.getHeader("x-forwarded-client-cert");
        if (xfcc != null) resp.setHeader("X-Seen-Client-Cert", xfcc);
        chain.doFilter(req, resp);
    }
}
