package warmup

import (
	"context"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// policy is the operator's policy the config is bound by: Config.Policy,
// or the command line's (policy.Local) when nil.
func (c *Config) policy() policy.Policy { return policy.OrLocal(c.Policy) }

// limits are the policy's caps with their defaults.
func (c *Config) limits() policy.Limits { return c.policy().Limits.WithDefaults() }

// dialer is the one dialer every connection of the warm-up goes through
// (health checks, HTTP load, gRPC channels): the policy's network check
// and Config.Guard run on the address actually connected to, after DNS,
// so a host name that resolves to the metadata endpoint or loopback is
// refused as well as one that names it.
func (c *Config) dialer(timeout time.Duration) *net.Dialer {
	return c.policy().Network.GuardedDialer(&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}, c.Guard)
}

// checked says whether connections must go through dial: under a tenant
// policy, with a Guard, or with a target dialled with mTLS (danki does the
// TLS itself, on the command line too). The command line's other
// connections may then use a proxy from the environment as before (a
// checked one may not: the proxy would be the address checked, not the
// target's).
func (c *session) checked() bool {
	return !c.policy().Network.AnyTarget || c.Guard != nil || len(c.routes.peers) > 0
}

// dialContext is dial for HTTP/1.1 (the health checks and the HTTP load),
// bounded by the per-request timeout.
func (c *session) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return c.dial(ctx, network, address, mtls.HTTP1)
}

// capDefault is def, lowered to the operator's cap: a config that leaves
// a field out is never refused for danki's own default.
func capDefault[T int | int64 | float64 | config.Duration](def, limit T) T { return min(def, limit) }

// validateCaps refuses load knobs above the operator's caps
// (policy.Limits), each naming the operator flag that sets the cap.
func (c Config) validateCaps(errs *config.Errors) {
	l := c.limits()
	over := func(field, why string) {
		if why != "" {
			errs.Addf(field, "%s", why)
		}
	}
	over("qps", policy.Over(c.QPS, l.QPS, "--max-qps"))
	over("startQPS", policy.Over(c.StartQPS, l.QPS, "--max-qps"))
	over("stableQPS", policy.Over(c.StableQPS, l.QPS, "--max-qps"))
	over("connections", policy.Over(c.Connections, l.Connections, "--max-connections"))
	over("minRequests", policy.Over(c.MinRequests, l.Requests, "--max-requests"))
	over("maxRequests", policy.Over(c.MaxRequests, l.Requests, "--max-requests"))
	over("deadline", policy.Over(c.Deadline.D(), l.Deadline, "--max-deadline"))
	over("healthTimeout", policy.Over(c.HealthTimeout.D(), l.HealthTimeout, "--max-health-timeout"))
	over("timeout", policy.Over(c.Timeout.D(), l.Timeout, "--max-timeout"))
}

// methodOverrideHeaders make many frameworks (Rails, Express's
// method-override, Spring's HiddenHttpMethodFilter behind a proxy, Google
// APIs) treat a GET as the method they name: a DELETE sent as a GET.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// checkSideEffects refuses, without allowSideEffects, what turns a safe
// method into a write on the server: a method-override header, a _method
// query parameter (the same trick for HTML forms), or a body on GET, HEAD
// or OPTIONS (which some servers read as the write's payload). path is the
// request's path as sent (rendered when it is a template).
func (r RequestSpec) checkSideEffects(path string, errs *config.Errors) {
	for name := range r.Headers {
		for _, o := range methodOverrideHeaders {
			if strings.EqualFold(name, o) {
				errs.Addf("headers", "%s makes many servers treat the request as the method it names (a DELETE sent as a GET): remove it, or set allowSideEffects (only if the application keeps requests with the marker header free of side effects)", name)
			}
		}
	}
	if hasMethodParam(path) {
		errs.Addf("path", "%q has a _method query parameter, which makes many servers treat the request as the method it names: remove it, or set allowSideEffects (only if the application keeps requests with the marker header free of side effects)", path)
	}
	if r.Body != "" && safeMethods[r.Method] {
		errs.Addf("body", "a %s request with a body may be read as a write by the server: remove the body, or use a method that takes one with allowSideEffects", r.Method)
	}
}

// hasMethodParam says whether path's query sets _method.
func hasMethodParam(path string) bool {
	_, query, ok := strings.Cut(path, "?")
	if !ok {
		return false
	}
	q, err := url.ParseQuery(query)
	for k := range q {
		if strings.EqualFold(k, "_method") {
			return true
		}
	}
	// A query that does not parse is still read by lenient servers.
	return err != nil && strings.Contains(strings.ToLower(query), "_method=")
}

// checkMarker enforces the marker rule: with allowSideEffects, the
// application keeps writes free of side effects by checking the marker
// header, so a marker other than X-Danki-Warmup (a typo, or a header the
// application does not check) would send real writes. It must then be
// stated twice: markerHeaderConfirm equal to markerHeader.
func (c Config) checkMarker(errs *config.Errors) {
	if !c.AllowSideEffects || strings.EqualFold(c.MarkerHeader, wellknown.MarkerHeader) {
		if c.MarkerHeaderConfirm != "" && !strings.EqualFold(c.MarkerHeaderConfirm, c.MarkerHeader) {
			errs.Addf("markerHeaderConfirm", "%q differs from markerHeader %q: state the same header twice, or remove markerHeaderConfirm", c.MarkerHeaderConfirm, c.MarkerHeader)
		}
		return
	}
	if !strings.EqualFold(c.MarkerHeaderConfirm, c.MarkerHeader) {
		errs.Addf("markerHeader", "%q with allowSideEffects: the application must check this header, not %s, to keep the warm-up's writes free of side effects; state it twice to confirm — markerHeaderConfirm: %s (got %q) — or drop markerHeader to use %s",
			c.MarkerHeader, wellknown.MarkerHeader, c.MarkerHeader, c.MarkerHeaderConfirm, wellknown.MarkerHeader)
	}
}

// descriptorSetInstead is what a tenant config uses instead of a
// descriptor set file.
const descriptorSetInstead = "leave grpcDescriptorSet out: the warm-up then asks the server's reflection service for the message types (turn gRPC server reflection on in the application)"
