package warmup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// Target is one pod (or server) to warm, addressed directly.
type Target struct {
	// Name is the pod name, or host:port for a plain URL.
	Name string `json:"name"`
	// URL is the base URL, scheme://host:port, with no path.
	URL string `json:"url"`
	// HealthURL is the pod's readinessProbe as a URL (httpGet on http
	// only), probed before load when the config sets no healthPath.
	HealthURL string `json:"healthURL,omitempty"`
	// Warmed: the danki warm gate already warmed this pod (its
	// wellknown.WarmCondition is True), so Run sends it nothing.
	Warmed bool `json:"warmed,omitempty"`
	// GRPC: the pod's port is a gRPC port (named grpc or grpc-*, or
	// appProtocol grpc), so the health wait defaults to the gRPC health
	// protocol (Config.HealthProtocol).
	GRPC bool `json:"grpc,omitempty"`
	// CPURequest is the CPU request, in cores, of the pod's container
	// that serves the port (0: unknown or none): the warm-up's default
	// CPU budget (Config.CPUBudget).
	CPURequest float64 `json:"cpuRequest,omitempty"`
	// Peer is the SPIFFE ID the pod's sidecar must prove when the warm-up
	// dials it with Istio mTLS; "" is plaintext. Run sets it from the pod
	// and Config.MTLS unless the caller did.
	Peer string `json:"peer,omitempty"`

	// pod is the pod the target was found as (nil for an explicit URL):
	// its ServiceAccount and sidecar decide Peer.
	pod *corev1.Pod
}

// gateWarmed reports whether the warm gate has warmed the pod.
func gateWarmed(p *corev1.Pod) bool {
	if p == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == wellknown.WarmCondition {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// healthURL is what the health wait probes: healthPath on the target when
// set, else the pod's readinessProbe, else "/".
func (t Target) healthURL(healthPath string) string {
	switch {
	case healthPath != "":
		return t.URL + healthPath
	case t.HealthURL != "":
		return t.HealthURL
	}
	return t.URL + DefaultHealthPath
}

func (t Target) String() string {
	host := strings.TrimPrefix(t.URL, "http://")
	if t.Name == "" || t.Name == host {
		return host
	}
	return t.Name + " (" + host + ")"
}

// URLTargets turns base URLs ("http://10.0.0.5:8080") into targets. field
// names the setting in errors (e.g. "urls" or "--url").
func URLTargets(field string, urls []string) ([]Target, error) {
	var targets []Target
	var errs config.Errors
	seen := map[string]bool{}
	for i, raw := range urls {
		path := fmt.Sprintf("%s[%d]", field, i)
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			errs.Add(path, err)
			continue
		case u.Scheme != "http":
			errs.Addf(path, "%q: only http:// targets are supported (warm-up talks to pods directly, not through the mesh's TLS)", raw)
			continue
		case u.Host == "":
			errs.Addf(path, "%q has no host; write http://host:port", raw)
			continue
		case (u.Path != "" && u.Path != "/") || u.RawQuery != "":
			errs.Addf(path, "%q: give the base URL (http://host:port) only; the path belongs to the requests (path/--path)", raw)
			continue
		}
		base := "http://" + u.Host
		if seen[base] {
			continue
		}
		seen[base] = true
		targets = append(targets, Target{Name: u.Host, URL: base})
	}
	return targets, errs.Err()
}

// TargetSource is where one set of targets comes from: explicit base URLs
// or, when there are none, pods in Kubernetes.
type TargetSource struct {
	// URLs are base URLs (http://host:port).
	URLs []string
	// URLsField names URLs in errors: "urls" in the step config, "--url"
	// on the command line.
	URLsField string
	// Pods finds the pods when URLs is empty.
	Pods KubeTargets
}

// TargetQuery is where a warm-up's targets are. The step plugin (from the
// Rollout and its step config) and `danki warmup` (from its flags) each fill
// one in and call FindTargets, so URLs, pod lookups and their errors behave
// the same in both.
type TargetQuery struct {
	Canary TargetSource
	// Stable is looked up only with CompareToStable (the warm-up needs the
	// stable pods: Config.WantsStable).
	Stable          TargetSource
	CompareToStable bool
	// StableOptional: stable pods are used when there are some (the default
	// rejectSlowerVersion): one lookup, no wait, and none found is no error.
	StableOptional bool
	// MinPods is how many ready pods each pod lookup waits for, within
	// Timeout (the config's healthTimeout).
	MinPods int
	Timeout time.Duration
	// Kube returns the client for pod lookups; it is called only when a
	// source has no URLs. Nil means there is none.
	Kube func() (kubernetes.Interface, error)
	// OnLookup, if set, is told about each pod lookup before it starts
	// (the CLI says what it is waiting for).
	OnLookup func(KubeTargets)
}

// FindTargets returns the canary targets and, with CompareToStable, the
// stable ones: explicit URLs as they are, pods once at least MinPods of
// them are ready (polled every second, up to Timeout).
func FindTargets(ctx context.Context, q TargetQuery) (canary, stable []Target, err error) {
	canary, err = q.find(ctx, q.Canary)
	if err != nil || !q.CompareToStable {
		return canary, nil, err
	}
	if q.StableOptional && len(q.Stable.URLs) == 0 {
		if q.Kube == nil {
			return canary, nil, nil
		}
		kube, err := q.Kube()
		if err != nil {
			return canary, nil, nil
		}
		stable, err = q.Stable.Pods.Resolve(ctx, kube)
		var forbidden *ForbiddenError
		switch {
		case errors.As(err, &forbidden):
			// Not "no stable pods": a missing RBAC rule, which the
			// operator should hear of rather than see every warm-up judged
			// without its reference.
			return canary, nil, fmt.Errorf("the stable pods: %w", err)
		case err != nil:
			return canary, nil, nil // nothing to compare with: the gate judges the new version
		}
		return canary, stable, nil
	}
	stable, err = q.find(ctx, q.Stable)
	return canary, stable, err
}

func (q TargetQuery) find(ctx context.Context, src TargetSource) ([]Target, error) {
	if len(src.URLs) > 0 {
		return URLTargets(src.URLsField, src.URLs)
	}
	if q.Kube == nil {
		return nil, fmt.Errorf("no Kubernetes client to find %s: give URLs instead", src.Pods)
	}
	kube, err := q.Kube()
	if err != nil {
		return nil, err
	}
	if q.OnLookup != nil {
		q.OnLookup(src.Pods)
	}
	wctx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	return src.Pods.Wait(wctx, kube, q.MinPods, time.Second)
}

// TargetConfig is where to find the pods, as the danki/warmup step config
// gives it (docs/warmup.md): the JSON fields next to Config's.
type TargetConfig struct {
	// URLs and StableURLs are explicit base URLs (http://host:port); when
	// set, no pods are looked up.
	URLs       []string `json:"urls,omitempty"`
	StableURLs []string `json:"stableURLs,omitempty"`
	// Service and StableService name the Services whose ready endpoints are
	// the canary and stable pods (the step defaults them to the Rollout's
	// canaryService and stableService).
	Service       string `json:"service,omitempty"`
	StableService string `json:"stableService,omitempty"`
	// UseSelector finds pods by label selector and pod-template hash even
	// when a default Service is known.
	UseSelector bool `json:"useSelector,omitempty"`
	// Port is the pods' port, by name or number. Default: their only port.
	Port intstr.IntOrString `json:"port,omitempty"`
	// MinPods is how many ready pods to wait for (within healthTimeout)
	// before warming. Default 1.
	MinPods int `json:"minPods,omitempty"`
}

// WithDefaults returns a copy with zero values replaced by the defaults.
func (c TargetConfig) WithDefaults() TargetConfig {
	c.MinPods = cmp.Or(c.MinPods, 1)
	return c
}

// Validate checks a defaulted TargetConfig; errors name the JSON field.
// Explicit URLs must be within what the operator's policy allows
// (policy.Network.CheckURL): a tenant's Rollout warms its own pods, and
// names other addresses only where the operator said so. The command line
// (policy.Local) may name any.
func (c TargetConfig) Validate(p policy.Policy) error {
	var errs config.Errors
	if c.MinPods < 1 {
		errs.Addf("minPods", "must be at least 1 (got %d)", c.MinPods)
	}
	for _, f := range []struct {
		field string
		urls  []string
	}{{"urls", c.URLs}, {"stableURLs", c.StableURLs}} {
		if _, err := URLTargets(f.field, f.urls); err != nil {
			errs.Add("", err)
			continue
		}
		for i, u := range f.urls {
			errs.Add("", p.Network.CheckURL(fmt.Sprintf("%s[%d]", f.field, i), u))
		}
	}
	return errs.Err()
}

// Rollout is what FindTargets needs to know about a canary deployment to
// find its pods. The step plugin copies it from an Argo Rollout; the field
// comments name the Rollout's fields.
type Rollout struct {
	Namespace, Name string
	// Selector selects all of the Rollout's pods (spec.selector).
	Selector *metav1.LabelSelector
	// CanaryService and StableService are spec.strategy.canary's Services.
	CanaryService, StableService string
	// CanaryHash and StableHash are the pod-template hashes of the canary
	// and stable ReplicaSets (status.currentPodHash, status.stableRS).
	CanaryHash, StableHash string
}

// Query says where the Rollout's pods are: the URLs when given, else the
// pods of the canary hash (and, when the warm-up wants stable pods, of the
// stable hash) behind Service (default: the Rollout's canaryService) or,
// without one or with UseSelector, matching the Rollout's selector. With
// stable pods wanted but not required (Config.WantsStable), a Rollout
// without a stable ReplicaSet apart from the canary (its first rollout)
// just has none. Timeout and Kube are left for the caller.
func (c TargetConfig) Query(r Rollout, wantStable, requireStable bool) (TargetQuery, error) {
	q := TargetQuery{
		Canary:          TargetSource{URLs: c.URLs, URLsField: "urls"},
		Stable:          TargetSource{URLs: c.StableURLs, URLsField: "stableURLs"},
		CompareToStable: wantStable,
		StableOptional:  wantStable && !requireStable,
		MinPods:         c.MinPods,
	}
	var err error
	if len(c.URLs) == 0 {
		if q.Canary.Pods, err = c.podsOf(r, false); err != nil {
			return q, err
		}
	}
	if wantStable && len(c.StableURLs) == 0 {
		q.Stable.Pods, err = c.podsOf(r, true)
		if err != nil && !requireStable {
			q.CompareToStable, q.StableOptional, err = false, false, nil
		}
	}
	return q, err
}

func (c TargetConfig) podsOf(r Rollout, stable bool) (KubeTargets, error) {
	k := KubeTargets{Namespace: r.Namespace, Port: c.Port, PodTemplateHash: r.CanaryHash}
	service, defaultService := c.Service, r.CanaryService
	if stable {
		service, defaultService, k.PodTemplateHash = c.StableService, r.StableService, r.StableHash
		if k.PodTemplateHash == "" || k.PodTemplateHash == r.CanaryHash {
			return k, fmt.Errorf("compareToStable/rejectSlowerVersion: Rollout %s/%s has no stable ReplicaSet apart from the canary (status.stableRS %q); turn them off for the first rollout or give stableURLs", r.Namespace, r.Name, r.StableHash)
		}
	}
	if k.PodTemplateHash == "" {
		return k, fmt.Errorf("rollout %s/%s has no status.currentPodHash yet", r.Namespace, r.Name)
	}
	if service == "" && !c.UseSelector {
		service = defaultService
	}
	if service != "" {
		k.Service = service
		return k, nil
	}
	if r.Selector == nil {
		return k, fmt.Errorf("rollout %s/%s has neither a canaryService nor spec.selector to find its pods", r.Namespace, r.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(r.Selector)
	if err != nil {
		return k, fmt.Errorf("rollout %s/%s spec.selector: %w", r.Namespace, r.Name, err)
	}
	k.Selector = sel.String()
	return k, nil
}

// Resolve readies a decoded warm-up and its targets under the operator's
// policy p: c keeps p (its caps, files and the addresses its connections may
// go to), both take their defaults, and both are checked, every problem in
// one error list naming its field. The danki/warmup step's config
// (pkg/warmupstep) is this plus its own blocks.
func Resolve(c Config, t TargetConfig, p policy.Policy) (Config, TargetConfig, error) {
	c.Policy = &p
	c, t = c.WithDefaults(), t.WithDefaults()
	var errs config.Errors
	errs.Add("", c.Validate())
	errs.Add("", t.Validate(p))
	if p.Mesh.Resolve(c.MTLS) == mtls.Istio && len(t.URLs)+len(t.StableURLs) > 0 {
		errs.Addf("mtls", "istio with explicit urls/stableURLs: Istio mTLS verifies the SPIFFE ID of a pod's ServiceAccount, and a URL names no pod; set mtls to auto or off (URL targets are then dialled in plaintext), or leave the URLs out to warm the rollout's pods")
	}
	return c, t, errs.Err()
}
