package policy

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/mtls"
)

// Policy is the operator's settings that bound tenant configs. The zero
// value is the strictest policy (see the package doc).
type Policy struct {
	// LocalFiles lets configs name files on danki's own machine
	// (grpcDescriptorSet, prometheus.caFile and bearerTokenFile, fortio
	// result paths). Only the command line sets it: in the plugins and the
	// gate those files are the controller's (its ServiceAccount token).
	LocalFiles bool
	// Limits caps every load knob; zero fields take DefaultLimits.
	Limits Limits
	// Network says which addresses load may be sent to.
	Network Network
	// Prometheus lists the servers tenant configs may query, each with the
	// operator's credentials. A tenant's prometheus.address must be one of
	// them.
	Prometheus []Prometheus
	// VirtualServiceNamespaces are namespaces besides a Rollout's own
	// where its danki/istio config may name the VirtualService (e.g. a
	// shared gateway namespace). None: the Rollout's own only.
	VirtualServiceNamespaces []string
	// Mesh is danki's place in an Istio mesh (its settings and its
	// workload certificate, minted on first use): load to a pod with a
	// sidecar is dialled with mTLS through it, as the pod's mode says
	// (tenants choose auto, istio or off per config). Nil: every pod in
	// plaintext.
	Mesh *mtls.Mesh
}

// Local is the policy of the danki command line: its user is the
// operator, so files and any address are allowed; the caps still hold
// (they catch typos such as --connections 5000).
func Local() Policy {
	return Policy{LocalFiles: true, Network: Network{AnyTarget: true}}
}

// OrLocal is *p, or Local() when p is nil: the policy of a config a
// library caller or the command line built without one (the parsers of
// tenant configs always set it).
func OrLocal(p *Policy) Policy {
	if p == nil {
		return Local()
	}
	return *p
}

// Tenant reports whether configs under this policy come from tenants
// (anything but the command line).
func (p Policy) Tenant() bool { return !p.LocalFiles }

// CheckFile refuses a file path given in a tenant config: field names it,
// instead says what to use.
func (p Policy) CheckFile(field, path, instead string) error {
	if path == "" || p.LocalFiles {
		return nil
	}
	return fmt.Errorf("%s: %q names a file on the Argo Rollouts controller or the gate, which a Rollout, AnalysisTemplate or pod annotation may not read (it could be the controller's own token); %s", field, path, instead)
}

// Prometheus is one Prometheus server the operator allows, with the
// credentials danki uses for it (files on danki's own machine, read by
// danki only for this address).
type Prometheus struct {
	// Address is the server's base URL, e.g.
	// http://prometheus.istio-system:9090.
	Address string
	// BearerTokenFile is sent as "Authorization: Bearer" (re-read per
	// request, so rotated tokens work).
	BearerTokenFile string
	// CAFile verifies an https server.
	CAFile string
}

// ParsePrometheus reads an operator setting: ADDRESS, optionally followed
// by ",bearerTokenFile=PATH" and ",caFile=PATH".
func ParsePrometheus(s string) (Prometheus, error) {
	parts := strings.Split(s, ",")
	p := Prometheus{Address: strings.TrimRight(strings.TrimSpace(parts[0]), "/")}
	u, err := url.Parse(p.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return p, fmt.Errorf("%q: want an http(s) base URL such as http://prometheus.istio-system:9090, optionally followed by ,bearerTokenFile=PATH,caFile=PATH", s)
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		switch {
		case ok && k == "bearerTokenFile":
			p.BearerTokenFile = v
		case ok && k == "caFile":
			p.CAFile = v
		default:
			return p, fmt.Errorf("%q: unknown setting %q after the address (want bearerTokenFile=PATH or caFile=PATH)", s, kv)
		}
	}
	return p, nil
}

// PrometheusFor returns the operator's entry for a tenant's
// prometheus.address (compared without a trailing slash), or an error that
// lists the allowed ones.
func (p Policy) PrometheusFor(address string) (Prometheus, error) {
	want := strings.TrimRight(strings.TrimSpace(address), "/")
	var allowed []string
	for _, s := range p.Prometheus {
		if s.Address == want {
			return s, nil
		}
		allowed = append(allowed, s.Address)
	}
	if len(allowed) == 0 {
		return Prometheus{}, fmt.Errorf("%q is not a Prometheus the operator allows: none is (the operator lists them with --prometheus in the plugin's args in argo-rollouts-config, or the gate's flags; docs/security.md)", address)
	}
	return Prometheus{}, fmt.Errorf("%q is not a Prometheus the operator allows (%s); use one of those, or ask the operator to add it with --prometheus (docs/security.md)", address, strings.Join(allowed, ", "))
}

// Limits are the operator's caps on a warm-up or load test, per target.
// Zero fields take DefaultLimits.
type Limits struct {
	QPS           float64       // requests per second per target (qps, stableQPS, startQPS)
	Connections   int           // concurrent connections per target
	Requests      int64         // requests per target (maxRequests, minRequests)
	Deadline      time.Duration // a whole warm-up or load test
	HealthTimeout time.Duration // the wait for targets to turn healthy
	Timeout       time.Duration // one request
	Retries       int           // the gate's attempts per pod
	FileBytes     int64         // a file danki reads (a descriptor set, a fortio result)
}

// DefaultLimits are generous for a warm-up (danki's own defaults are 20
// qps, 4 connections, 20,000 requests, 10 minutes) and small enough that no
// single config can turn danki into a load generator against a cluster.
var DefaultLimits = Limits{
	QPS:           500,
	Connections:   64,
	Requests:      200_000,
	Deadline:      time.Hour,
	HealthTimeout: 30 * time.Minute,
	Timeout:       time.Minute,
	Retries:       10,
	FileBytes:     16 << 20,
}

// WithDefaults fills zero caps from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	l.QPS = cmp.Or(l.QPS, d.QPS)
	l.Connections = cmp.Or(l.Connections, d.Connections)
	l.Requests = cmp.Or(l.Requests, d.Requests)
	l.Deadline = cmp.Or(l.Deadline, d.Deadline)
	l.HealthTimeout = cmp.Or(l.HealthTimeout, d.HealthTimeout)
	l.Timeout = cmp.Or(l.Timeout, d.Timeout)
	l.Retries = cmp.Or(l.Retries, d.Retries)
	l.FileBytes = cmp.Or(l.FileBytes, d.FileBytes)
	return l
}

// Over says why value is above the cap named by flag ("" when it is not):
// the text of a config error for the field that holds it.
func Over[T int | int64 | float64 | time.Duration](value, cap T, flag string) string {
	if value <= cap {
		return ""
	}
	return fmt.Sprintf("%v is above the operator's cap of %v; lower it (the operator sets the cap with %s, docs/security.md)", value, cap, flag)
}
