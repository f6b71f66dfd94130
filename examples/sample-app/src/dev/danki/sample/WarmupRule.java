package dev.danki.sample;

import com.sun.net.httpserver.Headers;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Which requests are warm-up (their writes are rolled back), and how the app
 * knows.
 *
 * <p>Without {@code WARMUP_PRINCIPALS}: a request carrying the marker header
 * {@code X-Danki-Warmup}. Anyone who reaches the app can send a header, so
 * this relies on every route stripping it from users' requests.
 *
 * <p>With {@code WARMUP_PRINCIPALS} (mesh mode, a comma list of SPIFFE IDs):
 * a request that came through the pod's Istio sidecar over mTLS carries
 * {@code x-forwarded-client-cert} (XFCC), and it is warm-up if and only if
 * its <em>last</em> element's {@code URI} is one of the principals; the
 * marker header is then ignored. The last element is the one the pod's own
 * sidecar appended for its immediate mTLS peer (Istio's sidecars run
 * {@code forward_client_cert_details: APPEND_FORWARD}): whatever a caller
 * sent in XFCC comes before it, and Envoy removes XFCC from any request that
 * did not reach it over mTLS. A gateway in front ({@code SANITIZE_SET} by
 * default) replaces a user's XFCC with its own client's certificate, which
 * again ends up before the sidecar's element. So the last element names the
 * workload that holds the connection to this pod, which a user cannot
 * forge; any earlier element can be. A malformed XFCC (unbalanced quotes,
 * more than one header line) is not warm-up.
 *
 * <p>Without XFCC the request did not come through the sidecar over mTLS:
 * from inside the pod (the {@code warm} shape's requests to itself, a probe
 * the agent forwards) or as plaintext. Then the marker header decides, as
 * without principals. That is safe where the sidecar admits nothing but
 * mTLS (PeerAuthentication STRICT, or an AuthorizationPolicy that requires
 * principals, which denies plaintext) and the app port cannot be reached
 * around the sidecar (Istio's inbound capture).
 *
 * <p>Either way a mirrored copy (Host ending in {@code -shadow}) is rolled
 * back: it comes from the gateway's identity, like the users' own requests.
 */
final class WarmupRule {
    static final String XFCC = "X-Forwarded-Client-Cert";

    /** Why a request is warm-up: {@code by} is "peer", "header" or "mirror"; null when it is not. */
    record Decision(boolean warmup, String by) {}

    private static final Decision USER = new Decision(false, null);

    private final Set<String> principals;

    WarmupRule(List<String> principals) {
        this.principals = Set.copyOf(principals);
    }

    boolean meshMode() {
        return !principals.isEmpty();
    }

    Decision decide(Headers h) {
        if (Main.isShadowHost(h.getFirst("Host"))) {
            return new Decision(true, "mirror");
        }
        List<String> xfcc = h.get(XFCC);
        if (principals.isEmpty() || xfcc == null) {
            return h.containsKey(Main.WARMUP_HEADER) ? new Decision(true, "header") : USER;
        }
        String peer = xfcc.size() == 1 ? peerUri(xfcc.get(0)) : null;
        return peer != null && principals.contains(peer) ? new Decision(true, "peer") : USER;
    }

    /**
     * The {@code URI} of the last element of an XFCC value (Envoy's format:
     * elements separated by commas, key=value pairs by semicolons, values
     * with {@code , ; =} in double quotes, {@code \"} inside them); null
     * when the value is malformed or its last element has no single URI.
     */
    static String peerUri(String xfcc) {
        List<String> elements = split(xfcc, ',');
        if (elements == null || elements.isEmpty()) {
            return null;
        }
        String uri = null;
        for (String pair : split(elements.get(elements.size() - 1), ';')) {
            int eq = pair.indexOf('=');
            if (eq > 0 && pair.substring(0, eq).trim().equalsIgnoreCase("URI")) {
                if (uri != null) {
                    return null;
                }
                uri = unquote(pair.substring(eq + 1).trim());
            }
        }
        return uri == null || uri.isEmpty() ? null : uri;
    }

    /** Splits s at sep outside double quotes; null when a quote is left open. */
    private static List<String> split(String s, char sep) {
        List<String> out = new ArrayList<>();
        boolean quoted = false;
        int from = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (quoted && c == '\\') {
                i++;
            } else if (c == '"') {
                quoted = !quoted;
            } else if (!quoted && c == sep) {
                out.add(s.substring(from, i));
                from = i + 1;
            }
        }
        if (quoted) {
            return null;
        }
        out.add(s.substring(from));
        return out;
    }

    private static String unquote(String v) {
        if (v.length() < 2 || v.charAt(0) != '"' || v.charAt(v.length() - 1) != '"') {
            return v;
        }
        StringBuilder b = new StringBuilder();
        for (int i = 1; i < v.length() - 1; i++) {
            char c = v.charAt(i);
            if (c == '\\' && i + 1 < v.length() - 1) {
                c = v.charAt(++i);
            }
            b.append(c);
        }
        return b.toString();
    }

    /** WARMUP_PRINCIPALS: a comma list of SPIFFE IDs; empty for none. */
    static List<String> parsePrincipals(String v) {
        List<String> out = new ArrayList<>();
        if (v == null || v.isBlank()) {
            return out;
        }
        for (String p : v.split(",")) {
            p = p.trim();
            if (p.isEmpty()) {
                continue;
            }
            if (!p.startsWith("spiffe://") || p.length() == "spiffe://".length() || p.contains(";") || p.contains("\"")) {
                throw Config.fail("warmup-principals: \"" + p + "\" is not a SPIFFE ID: want spiffe://<trust domain>/ns/<namespace>/sa/<service account>,"
                        + " as x-forwarded-client-cert carries it (an AuthorizationPolicy writes the same principal without spiffe://)");
            }
            out.add(p);
        }
        return out;
    }
}
