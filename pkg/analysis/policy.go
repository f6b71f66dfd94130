package analysis

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// A danki/latency config is a tenant's (an AnalysisTemplate, a Rollout's
// gate, a warm-up step's mirror) whenever it runs inside the Argo Rollouts
// controller, which can read every Secret and whose files include its own
// ServiceAccount token. Everything a config names that danki then reads or
// dials on its behalf is checked here, against the operator's policy:
//
//   - prometheus.address must be one of the operator's --prometheus
//     entries, whose credentials (bearerTokenFile, caFile) are then used;
//     a tenant names no file (bearerTokenFile, caFile) and may not skip TLS
//     verification; its own token comes inline or from a Secret in its own
//     namespace (bearerTokenSecret);
//   - fortio results are http(s) URLs within --allow-target, dialled under
//     the network policy, never files;
//   - source: load sends only to URLs within --allow-target or the pods of
//     the measurement's own namespace, within the caps.
//
// The zero Policy (what a library caller gets without WithPolicy) is the
// strictest; the command line passes policy.Local().

// WithPolicy sets the operator's policy the config is held to (default:
// the zero Policy, the strictest: no Prometheus, no files, no explicit
// URLs).
func WithPolicy(p policy.Policy) Option { return func(a *Analyzer) { a.policy = p } }

type namespaceKey struct{}

// ForNamespace returns a context for measurements made on behalf of
// namespace ns, the AnalysisRun's or the Rollout's: prometheus.
// bearerTokenSecret is read from that namespace only, and source: load
// loads pods of that namespace only (load.namespace must be ns or empty).
func ForNamespace(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, namespaceKey{}, ns)
}

// NamespaceFrom returns the namespace ForNamespace set ("" when none).
func NamespaceFrom(ctx context.Context) string {
	ns, _ := ctx.Value(namespaceKey{}).(string)
	return ns
}

// SecretKeyRef names one key of a Secret in the measurement's own
// namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Messages that say what to use instead of a refused file.
const (
	insteadTokenFile = "use prometheus.bearerTokenSecret (a Secret in this namespace: {name, key}) or leave it out to use the operator's credentials for that address (the plugin's --prometheus ADDRESS,bearerTokenFile=PATH,caFile=PATH)"
	insteadCAFile    = "leave it out: the operator's --prometheus ADDRESS,caFile=PATH (the plugin's args) says how to verify that address"
)

// resolvePrometheus is the one place a Prometheus block becomes the
// settings of an HTTP client: under a tenant policy the address must be
// the operator's, whose credentials and CA are used, and no file named by
// the tenant is read. Errors name the field.
func resolvePrometheus(pc PrometheusConfig, pol policy.Policy) (PrometheusConfig, error) {
	if !pol.Tenant() {
		return pc, nil
	}
	var errs config.Errors
	errs.Add("", pol.CheckFile("prometheus.bearerTokenFile", pc.BearerTokenFile, insteadTokenFile))
	errs.Add("", pol.CheckFile("prometheus.caFile", pc.CAFile, insteadCAFile))
	if pc.InsecureSkipVerify {
		// The operator's token may go to this address: its certificate is
		// verified with the operator's CA, never skipped by a tenant.
		errs.Addf("prometheus.insecureSkipVerify", "a Rollout or AnalysisTemplate may not turn off TLS verification of the operator's Prometheus; remove it (the operator sets the CA with --prometheus ADDRESS,caFile=PATH)")
	}
	op, err := pol.PrometheusFor(pc.Address)
	if err != nil {
		errs.Add("prometheus.address", err)
	}
	if err := errs.Err(); err != nil {
		return PrometheusConfig{}, err
	}
	out := PrometheusConfig{Address: op.Address, CAFile: op.CAFile, BearerToken: pc.BearerToken, BearerTokenSecret: pc.BearerTokenSecret}
	if pc.BearerToken == "" && pc.BearerTokenSecret == nil {
		// The tenant brings no token of its own: the operator's for this
		// address (its file, read by danki for this address only).
		out.BearerTokenFile = op.BearerTokenFile
	}
	out.noRedirects = true
	return out, nil
}

// credentialError is a failure to read the tenant's Prometheus token: not
// Prometheus being unreachable.
type credentialError struct{ err error }

func (e *credentialError) Error() string { return e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// secretToken sends the token of a Secret in the measurement's namespace
// (NamespaceFrom the request's context), read at every request so a
// rotated Secret is picked up.
type secretToken struct {
	ref  SecretKeyRef
	kube func() (kubernetes.Interface, error)
	next http.RoundTripper
}

func (s *secretToken) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := s.read(req.Context())
	if err != nil {
		return nil, &credentialError{err}
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+token)
	return s.next.RoundTrip(req)
}

func (s *secretToken) read(ctx context.Context) (string, error) {
	ns := NamespaceFrom(ctx)
	if ns == "" {
		return "", fmt.Errorf("prometheus.bearerTokenSecret: no namespace to read Secret %q from (it is read from the AnalysisRun's or Rollout's own namespace)", s.ref.Name)
	}
	where := ns + "/" + s.ref.Name
	if s.kube == nil {
		return "", fmt.Errorf("prometheus.bearerTokenSecret: no Kubernetes client to read Secret %s", where)
	}
	kube, err := s.kube()
	if err != nil {
		return "", fmt.Errorf("prometheus.bearerTokenSecret: read Secret %s: %w", where, err)
	}
	sec, err := kube.CoreV1().Secrets(ns).Get(ctx, s.ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("prometheus.bearerTokenSecret: read Secret %s (it must be in the same namespace as the AnalysisRun or Rollout): %w", where, err)
	}
	return secretValue(sec, s.ref.Key, where)
}

func secretValue(sec *corev1.Secret, key, where string) (string, error) {
	v, ok := sec.Data[key]
	if !ok {
		if s, ok := sec.StringData[key]; ok {
			return strings.TrimSpace(s), nil
		}
		return "", fmt.Errorf("prometheus.bearerTokenSecret: Secret %s has no key %q", where, key)
	}
	token := strings.TrimSpace(string(v))
	if token == "" {
		return "", fmt.Errorf("prometheus.bearerTokenSecret: key %q of Secret %s is empty", key, where)
	}
	return token, nil
}

// asCredentialError finds a credentialError in err.
func asCredentialError(err error) (*credentialError, bool) {
	var ce *credentialError
	return ce, errors.As(err, &ce)
}
