package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Defaults of the load source (docs/latency.md, "source: load").
const (
	// DefaultLoadCount is the measured requests per measurement when
	// neither load.count nor load.duration is set: enough for a p99 from
	// the default minTailCount (5 / 0.01 = 500) with room to spare.
	DefaultLoadCount = 1000
	// DefaultLoadDeadline bounds one whole measurement: finding the pods,
	// the warm-up and the measured load.
	DefaultLoadDeadline = 10 * time.Minute
	// DefaultLoadStableQPS caps the total rate sent to the stable pods,
	// which serve users: low, like the warm-up's stable probe.
	DefaultLoadStableQPS = warmup.DefaultStableQPS
)

// loadDelims are the request templates' delimiters under source: load:
// Argo resolves every {{…}} in a metric itself.
var loadDelims = warmup.Delims{Left: "<<", Right: ">>"}

// LoadConfig is source: load — each measurement sends its own synthetic
// load to the new pods (and, when given, to the stable pods side by side)
// and judges the SLOs on every request's exact latency. Where the pods are
// and what is sent use the danki/warmup step's fields and rules (the same
// request templates, marker header and side-effect rules); request
// templates are written with << >> instead of {{ }}, because Argo resolves
// {{…}} in AnalysisTemplates itself.
type LoadConfig struct {
	// URLs of the new pods (http://host:port); else Service, Selector or
	// PodTemplateHash find them in Namespace.
	URLs []string `json:"urls,omitempty"`
	// Service whose ready endpoints are the new pods (e.g. BlueGreen's
	// previewService).
	Service string `json:"service,omitempty"`
	// Selector is a label selector for the new pods, used without Service.
	Selector string `json:"selector,omitempty"`
	// PodTemplateHash keeps only pods of this ReplicaSet (Argo:
	// valueFrom.podTemplateHashValue: Latest), and waits for all of its
	// replicas.
	PodTemplateHash string `json:"podTemplateHash,omitempty"`

	// StableURLs, StableService, StableSelector, StablePodTemplateHash
	// find the stable pods (the version users are on: BlueGreen's
	// activeService, a canary's stableService). Optional; the ratio SLOs
	// and the tail test need them.
	StableURLs            []string `json:"stableURLs,omitempty"`
	StableService         string   `json:"stableService,omitempty"`
	StableSelector        string   `json:"stableSelector,omitempty"`
	StablePodTemplateHash string   `json:"stablePodTemplateHash,omitempty"`

	// Namespace of the pods. Default: the AnalysisRun's.
	Namespace string `json:"namespace,omitempty"`
	// Port of the pods, by name or number. Default: their only port.
	Port intstr.IntOrString `json:"port,omitempty"`
	// MinPods is how many new pods to wait for. Default 1 (with a
	// podTemplateHash: every replica of its ReplicaSet).
	MinPods *config.Number `json:"minPods,omitempty"`

	// Requests, AllowSideEffects, MarkerHeader and HealthPath are the
	// warm-up's (docs/warmup.md), with << >> template delimiters.
	Requests         []warmup.RequestSpec `json:"requests,omitempty"`
	AllowSideEffects bool                 `json:"allowSideEffects,omitempty"`
	MarkerHeader     string               `json:"markerHeader,omitempty"`
	HealthPath       string               `json:"healthPath,omitempty"`

	// Count is the measured requests per measurement, spread evenly over
	// the new pods; Duration bounds the measured load in time. With
	// neither, Count is 1000; with both, whichever comes first.
	Count    *config.Number  `json:"count,omitempty"`
	Duration config.Duration `json:"duration,omitempty"`
	// QPS per new pod (default 20) over Connections connections per pod
	// (default 4), each request bounded by RequestTimeout (default 10s).
	QPS            *config.Number  `json:"qps,omitempty"`
	Connections    *config.Number  `json:"connections,omitempty"`
	RequestTimeout config.Duration `json:"requestTimeout,omitempty"`
	// StableQPS caps the total rate sent to the stable pods, which serve
	// users: they get the new pods' per-pod pace, at most this in all.
	// Default 10.
	StableQPS *config.Number `json:"stableQPS,omitempty"`
	// WarmUp (default true) first warms the new pods until their latency
	// converged (the danki/warmup engine and stopping rule), so that the
	// measurement judges the version, not its cold start. Pods warmed by an
	// earlier measurement of this plugin process are not warmed again.
	WarmUp *bool `json:"warmUp,omitempty"`
	// Deadline bounds one measurement: finding the pods, the warm-up and
	// the measured load. Default 10m.
	Deadline config.Duration `json:"deadline,omitempty"`
	// MTLS is the warm-up's mtls (docs/warmup.md): when the pods are
	// dialled with Istio mTLS, auto, istio or off. Default: the operator's.
	MTLS mtls.Mode `json:"mtls,omitempty"`
}

func (c LoadConfig) withDefaults() LoadConfig {
	if c.Count == nil && c.Duration == 0 {
		c.Count = numberPtr(DefaultLoadCount)
	}
	if c.QPS == nil {
		c.QPS = numberPtr(warmup.DefaultQPS)
	}
	if c.Connections == nil {
		c.Connections = numberPtr(warmup.DefaultConnections)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = config.Duration(warmup.DefaultTimeout)
	}
	if c.StableQPS == nil {
		c.StableQPS = numberPtr(DefaultLoadStableQPS)
	}
	if c.MinPods == nil {
		c.MinPods = numberPtr(1)
	}
	if c.WarmUp == nil {
		on := true
		c.WarmUp = &on
	}
	if c.Deadline == 0 {
		c.Deadline = config.Duration(DefaultLoadDeadline)
	}
	return c
}

// hasStable reports whether stable pods are configured.
func (c LoadConfig) hasStable() bool {
	return len(c.StableURLs) > 0 || c.StableService != "" || c.StableSelector != "" || c.StablePodTemplateHash != ""
}

// baseConfig is what the warm-up and the measured load share: the request
// mix, pace, connections and timeouts, the stable pods' capped rate, and no
// verdict of the warm-up's own (the analysis judges the version).
func (c LoadConfig) baseConfig(deadline config.Duration, stablePods int) warmup.Config {
	off := false
	qps := float64(*c.QPS)
	w := warmup.Config{
		Requests: c.Requests, AllowSideEffects: c.AllowSideEffects, MarkerHeader: c.MarkerHeader,
		HealthPath: c.HealthPath, QPS: qps, Connections: int(*c.Connections),
		Timeout: c.RequestTimeout, Deadline: deadline, HealthTimeout: deadline,
		RejectSlowerVersion: &off, TemplateDelims: loadDelims, MTLS: c.MTLS,
	}
	if stablePods > 0 {
		w.StableQPS = min(float64(*c.StableQPS), qps*float64(stablePods))
	}
	return w
}

// warmupConfig is the warm-up engine's configuration for the measured load:
// a fixed count per pod at a steady pace (no ramp: the pods are warm), the
// stable pods loaded side by side.
func (c LoadConfig) warmupConfig(perPod int64, stablePods int) warmup.Config {
	off, fixed := false, false
	w := c.baseConfig(c.Deadline, stablePods)
	w.StartQPS, w.UntilConverged, w.MaxRequests, w.NeighbourGuard = w.QPS, &fixed, perPod, &off
	if stablePods > 0 {
		w.CompareToStable = true // loads stable side by side; no convergence to hold back
	}
	if c.Duration > 0 {
		w.Deadline = c.Duration
	}
	return w
}

// compile checks a defaulted load block; problems are added under "load.".
func (c LoadConfig) compile(p *config.Errors) {
	count := func(field string, n *config.Number, lo, hi float64) {
		if n == nil {
			return
		}
		if v := float64(*n); v < lo || v > hi || v != math.Trunc(v) {
			p.Addf("load."+field, "%g must be a whole number from %g to %g", v, lo, hi)
		}
	}
	count("count", c.Count, 1, 10_000_000)
	count("connections", c.Connections, 1, 1000)
	count("minPods", c.MinPods, 1, 10_000)
	if v := float64(*c.QPS); v <= 0 || v > 100_000 {
		p.Addf("load.qps", "%g must be above 0 and at most 100000 requests per second per pod", v)
	}
	if v := float64(*c.StableQPS); v <= 0 {
		p.Addf("load.stableQPS", "%g must be above 0; leave the stable fields out to send stable nothing", v)
	}
	if c.Duration < 0 {
		p.Addf("load.duration", "%s must be positive, like \"60s\"", c.Duration)
	}
	if c.Deadline <= 0 {
		p.Addf("load.deadline", "%s must be positive, like \"10m\"", c.Deadline)
	} else if c.Duration > 0 && c.Duration > c.Deadline {
		p.Addf("load.duration", "%s is longer than load.deadline %s, which bounds the whole measurement; raise the deadline", c.Duration, c.Deadline)
	}
	for i, r := range c.Requests {
		if r.GRPC != nil {
			// Not wired yet: the load source resolves HTTP targets only.
			p.Addf(fmt.Sprintf("load.requests[%d].grpc", i), "gRPC requests are not supported by source: load yet; warm and judge gRPC pods with the danki/warmup step (docs/warmup.md#grpc-services) and a Prometheus source")
		}
	}
	if len(c.URLs) == 0 && c.Service == "" && c.Selector == "" && c.PodTemplateHash == "" {
		p.Addf("load", "no new pods to load; set urls, service (e.g. the BlueGreen previewService), selector or podTemplateHash")
	}
	if len(c.URLs) > 0 && (c.Service != "" || c.Selector != "" || c.PodTemplateHash != "") {
		p.Addf("load.urls", "set together with service/selector/podTemplateHash; keep one way to find the new pods")
	}
	if c.MTLS == mtls.Istio && len(c.URLs)+len(c.StableURLs) > 0 {
		p.Addf("load.mtls", "istio with explicit urls/stableURLs: Istio mTLS verifies the SPIFFE ID of a pod's ServiceAccount, and a URL names no pod; set mtls to auto or off (URLs are then loaded in plaintext), or find the pods by service, selector or podTemplateHash")
	}
	if len(c.StableURLs) > 0 && (c.StableService != "" || c.StableSelector != "" || c.StablePodTemplateHash != "") {
		p.Addf("load.stableURLs", "set together with stableService/stableSelector/stablePodTemplateHash; keep one way to find the stable pods")
	}
	for field, urls := range map[string][]string{"urls": c.URLs, "stableURLs": c.StableURLs} {
		if _, err := warmup.URLTargets("load."+field, urls); err != nil {
			p.Add("", err)
		}
	}
	perPod := int64(1)
	if c.Count != nil && *c.Count >= 1 {
		perPod = int64(*c.Count)
	}
	// The warm-up's own rules only: the caps are the policy's, which
	// Compile does not know; checkPolicy holds the load to them when it is
	// built (NewLoad). Checked here at the default caps, an operator's
	// raised --max-qps (or the command line's --cap-qps) was refused.
	w := c.warmupConfig(perPod, 0)
	w.Policy = &uncapped
	if err := w.WithDefaults().Validate(); err != nil {
		p.Add("load", err)
	}
}

// uncapped is the command line's policy without caps on the load (its
// rate, connections, requests and times): what Compile checks a load
// block's warm-up config under (LoadConfig.compile).
var uncapped = func() policy.Policy {
	p := policy.Local()
	d := policy.DefaultLimits
	p.Limits = policy.Limits{QPS: math.Inf(1), Connections: math.MaxInt, Requests: math.MaxInt64,
		Deadline: math.MaxInt64, HealthTimeout: math.MaxInt64, Timeout: math.MaxInt64, Retries: d.Retries, FileBytes: d.FileBytes}
	return p
}()

// WarmedPods remembers the pods a load source has warmed, so that the next
// measurement of a long AnalysisRun measures them at once. Share one among
// the analyzers of a process (WithWarmedPods); it is safe for concurrent use.
type WarmedPods struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// warmedFor is how long a pod counts as warm after its warm-up: long
// enough for a run of measurements, short enough that a pod restarted under
// the same name and address is warmed again eventually.
const warmedFor = time.Hour

// NewWarmedPods returns an empty set.
func NewWarmedPods() *WarmedPods { return &WarmedPods{seen: map[string]time.Time{}} }

func podKey(t warmup.Target) string { return t.Name + "@" + t.URL }

// cold returns the targets not warmed within warmedFor.
func (w *WarmedPods) cold(ts []warmup.Target, now time.Time) []warmup.Target {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []warmup.Target
	for _, t := range ts {
		if at, ok := w.seen[podKey(t)]; !ok || now.Sub(at) > warmedFor {
			out = append(out, t)
		}
	}
	for k, at := range w.seen {
		if now.Sub(at) > warmedFor {
			delete(w.seen, k)
		}
	}
	return out
}

func (w *WarmedPods) mark(ts []warmup.Target, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range ts {
		w.seen[podKey(t)] = now
	}
}

// Load is the Source of source: load. It finds the pods, warms the cold
// ones, sends the measured load and returns every request's latency as an
// exact histogram. Fetch blocks for the whole measurement (up to
// load.deadline): callers that must not block run it in the background
// (the danki/latency plugin does: Run starts it, Resume polls it).
type Load struct {
	cfg    LoadConfig // defaulted
	kube   func() (kubernetes.Interface, error)
	warmed *WarmedPods
	log    *slog.Logger
	// policy is the operator's: the URLs and caps were checked against it
	// when the source was built, and a tenant's pods are looked up only
	// in the measurement's namespace (ForNamespace).
	policy policy.Policy
}

// NewLoad builds the load source for a validated Config, held to the
// policy of WithPolicy (default: the strictest: no explicit URL, the
// default caps).
func NewLoad(cfg Config, kube func() (kubernetes.Interface, error), warmed *WarmedPods, log *slog.Logger, opts ...Option) (*Load, error) {
	return newLoad(cfg, kube, warmed, log, options(opts).policy)
}

func newLoad(cfg Config, kube func() (kubernetes.Interface, error), warmed *WarmedPods, log *slog.Logger, pol policy.Policy) (*Load, error) {
	if cfg.Load == nil {
		return nil, errors.New("load: missing")
	}
	if warmed == nil {
		warmed = NewWarmedPods()
	}
	if log == nil {
		log = slog.Default()
	}
	c := cfg.Load.withDefaults()
	if err := c.checkPolicy(pol); err != nil {
		return nil, err
	}
	return &Load{cfg: c, kube: kube, warmed: warmed, log: log, policy: pol}, nil
}

// checkPolicy holds a defaulted load block to the operator's policy: the
// explicit URLs within --allow-target, every knob within the caps (which
// hold on the command line too: they catch typos).
func (c LoadConfig) checkPolicy(pol policy.Policy) error {
	var errs config.Errors
	for field, urls := range map[string][]string{"urls": c.URLs, "stableURLs": c.StableURLs} {
		for i, u := range urls {
			errs.Add("", pol.Network.CheckURL(fmt.Sprintf("load.%s[%d]", field, i), u))
		}
	}
	lim := pol.Limits.WithDefaults()
	over := func(field, why string) {
		if why != "" {
			errs.Addf(field, "%s", why)
		}
	}
	over("load.deadline", policy.Over(c.Deadline.D(), lim.Deadline, "--max-deadline"))
	over("load.duration", policy.Over(c.Duration.D(), lim.Deadline, "--max-deadline"))
	over("load.qps", policy.Over(float64(*c.QPS), lim.QPS, "--max-qps"))
	over("load.stableQPS", policy.Over(float64(*c.StableQPS), lim.QPS, "--max-qps"))
	over("load.connections", policy.Over(int(*c.Connections), lim.Connections, "--max-connections"))
	over("load.requestTimeout", policy.Over(c.RequestTimeout.D(), lim.Timeout, "--max-timeout"))
	if c.Count != nil {
		over("load.count", policy.Over(int64(*c.Count), lim.Requests, "--max-requests"))
	}
	return errs.Err()
}

// findsPods reports whether the load source looks pods up in the API
// (rather than only loading explicit URLs).
func (c LoadConfig) findsPods() bool {
	return c.Service != "" || c.Selector != "" || c.PodTemplateHash != "" ||
		c.StableService != "" || c.StableSelector != "" || c.StablePodTemplateHash != ""
}

// namespace is where the pods are looked up for a measurement on behalf
// of namespace ns (the AnalysisRun's; "" when the caller has none, the
// command line): ns itself, which load.namespace may only repeat — the
// plugin lists pods with the controller's rights, in every namespace.
func (l *Load) namespace(ns string) (string, error) {
	c := l.cfg
	switch {
	case ns != "" && c.Namespace != "" && c.Namespace != ns:
		return "", fmt.Errorf("load.namespace: %q is not the AnalysisRun's namespace %q: source: load loads only pods of the AnalysisRun's own namespace; remove load.namespace", c.Namespace, ns)
	case ns != "":
		return ns, nil
	case l.policy.Tenant() && c.findsPods():
		return "", errors.New("load.namespace: the measurement's namespace is unknown, and a Rollout's or AnalysisTemplate's load may only find pods in its own (the plugin passes the AnalysisRun's)")
	}
	return c.Namespace, nil
}

// engineConfig is the warm-up engine's config for one of this source's
// loads (the warm-up and the measured load): the one place the operator's
// policy joins it.
func (l *Load) engineConfig(w warmup.Config, guard func(netip.Addr) error) warmup.Config {
	w.Policy = &l.policy
	w.Guard = guard
	return w
}

// podGuard pins the measurement's pod targets (warmup.PodGuard): a pod
// deleted, terminating or replaced, or whose address another pod now has,
// gets no more of the load, however long it runs. Nil when every target
// is an explicit URL.
func (l *Load) podGuard(ctx context.Context, ns string, canary, stable []warmup.Target) (func(netip.Addr) error, error) {
	c := l.cfg
	var pods, urls []warmup.Target
	q := warmup.PodGuardQuery{Namespace: ns}
	if len(c.URLs) > 0 {
		urls = append(urls, canary...)
	} else {
		pods = append(pods, canary...)
		q.Selector = c.Selector
		if c.PodTemplateHash != "" {
			q.Hashes = []string{c.PodTemplateHash}
		}
	}
	if len(c.StableURLs) > 0 {
		urls = append(urls, stable...)
	} else if len(stable) > 0 {
		pods = append(pods, stable...)
		// Both sides' pods: the namespace's, each still pinned by name,
		// UID and address.
		q.Selector, q.Hashes = "", nil
	}
	if len(pods) == 0 || l.kube == nil {
		return nil, nil
	}
	kube, err := l.kube()
	if err != nil {
		return nil, err
	}
	g, err := warmup.NewPodGuard(ctx, kube, q, pods, urls, 0, l.log)
	if err != nil {
		return nil, err
	}
	return g.Check, nil
}

// Describe says where the load goes, for GetMetadata and errors.
func (l *Load) Describe() []string {
	c := l.cfg
	out := []string{"new pods: " + where(c.URLs, c.Service, c.Selector, c.PodTemplateHash, c.Namespace)}
	if c.hasStable() {
		out = append(out, "stable pods: "+where(c.StableURLs, c.StableService, c.StableSelector, c.StablePodTemplateHash, c.Namespace))
	}
	return out
}

func where(urls []string, service, selector, hash, ns string) string {
	var parts []string
	switch {
	case len(urls) > 0:
		return strings.Join(urls, ", ")
	case service != "":
		parts = append(parts, "Service "+service)
	case selector != "":
		parts = append(parts, "selector "+selector)
	}
	if hash != "" {
		parts = append(parts, "pod-template-hash "+hash)
	}
	if ns == "" {
		ns = "(the AnalysisRun's namespace)"
	}
	return strings.Join(parts, ", ") + " in namespace " + ns
}

type progressKey struct{}

// WithProgress returns a context under which the load source reports its
// progress ("warming 2 pods: 800 requests", "measuring: 400 of 1000") to
// report, from one goroutine at a time.
func WithProgress(ctx context.Context, report func(string)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

func progressOf(ctx context.Context) func(string) {
	if f, ok := ctx.Value(progressKey{}).(func(string)); ok {
		return f
	}
	return func(string) {}
}

// Fetch runs one measurement; the window does not apply (the measurement's
// own load is the sample).
func (l *Load) Fetch(ctx context.Context, _ time.Duration) (*Sample, error) {
	report := progressOf(ctx)
	c := l.cfg
	s := &Sample{Queries: l.Describe()}
	ns, err := l.namespace(NamespaceFrom(ctx))
	if err != nil {
		return s, err
	}
	report("finding the pods")
	canary, stable, err := warmup.FindTargets(ctx, l.query(ns))
	if err != nil {
		return s, fmt.Errorf("find the pods to load: %w", err)
	}
	if c.hasStable() && len(stable) == 0 {
		return s, fmt.Errorf("find the stable pods to load: none found (%s)", s.Queries[len(s.Queries)-1])
	}
	// The guard re-reads the pods until the measurement ends.
	ctx, stopGuard := context.WithCancel(ctx)
	defer stopGuard()
	guard, err := l.podGuard(ctx, ns, canary, stable)
	if err != nil {
		return s, fmt.Errorf("pin the pods to load: %w", err)
	}

	var note string
	if *c.WarmUp {
		note, err = l.warm(ctx, canary, stable, guard, report)
		if err != nil {
			return s, err
		}
	}

	// With only a duration: until it passes, or the operator's request cap
	// per pod (the engine refuses a count above it).
	count := l.policy.Limits.WithDefaults().Requests * int64(max(1, len(canary)))
	if c.Count != nil {
		count = int64(*c.Count)
	}
	perPod := (count + int64(len(canary)) - 1) / int64(len(canary))
	mcfg := l.engineConfig(c.warmupConfig(perPod, len(stable)), guard)
	total := perPod * int64(len(canary))
	res, err := warmup.Run(ctx, mcfg, canary, warmup.Options{Stable: stable, Logger: l.log, KeepLatencies: true, OnProgress: func(p warmup.Progress) {
		if p.Phase == warmup.PhaseLoad && !p.Stable && p.Target != "" {
			report(fmt.Sprintf("measuring: %d of %d requests to %s", p.Requests, total, pods(len(canary))))
		}
	}})
	if err != nil {
		return s, fmt.Errorf("measured load on %s: %w", pods(len(canary)), err)
	}
	s.Canary = exactSide("canary", res.Targets, loadFrom("new pods", canary, res, note))
	if res.Stable != nil {
		s.Stable = new(exactSide("stable", []warmup.TargetResult{*res.Stable}, loadFrom("stable pods", stable, nil, "")))
	}
	return s, nil
}

// warm brings the cold targets to their plateau; it fails only when they
// cannot be loaded at all (never healthy, ctx ended). A warm-up that ends
// without converging (its deadline, a version that never settles, one
// failing every request) leaves the verdict to the measurement, which
// judges exactly that latency and those errors; the note says so.
func (l *Load) warm(ctx context.Context, canary, stable []warmup.Target, guard func(netip.Addr) error, report func(string)) (string, error) {
	cold := l.warmed.cold(canary, time.Now())
	if len(cold) == 0 {
		return pods(len(canary)) + " already warmed by an earlier measurement", nil
	}
	w := l.engineConfig(l.cfg.baseConfig(l.cfg.Deadline/2, len(stable)), guard)
	res, err := warmup.Run(ctx, w, cold, warmup.Options{Stable: stable, Logger: l.log, OnProgress: func(p warmup.Progress) {
		if p.Phase == warmup.PhaseLoad && !p.Stable && p.Target != "" {
			report(fmt.Sprintf("warming %s: %d requests, %d converged", pods(p.Targets), p.Requests, p.ConvergedTargets))
		}
	}})
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("warm-up stopped: %w", ctx.Err())
	case err != nil && res != nil && res.Requests() == 0:
		return "", fmt.Errorf("warm-up of %s: %w", pods(len(cold)), err)
	case err != nil:
		l.log.Info("load source: warm-up ended without converging; measuring anyway", "error", err)
		return fmt.Sprintf("warm-up of %s did not converge (%s)", pods(len(cold)), res.Reason), nil
	}
	l.warmed.mark(cold, time.Now())
	return fmt.Sprintf("warm-up of %s: %s", pods(len(cold)), res.Summary()), nil
}

// query is where the pods are: in namespace ns (see namespace).
func (l *Load) query(ns string) warmup.TargetQuery {
	c := l.cfg
	source := func(field string, urls []string, service, selector, hash string) warmup.TargetSource {
		return warmup.TargetSource{URLs: urls, URLsField: "load." + field, Pods: warmup.KubeTargets{
			Namespace: ns, Service: service, Selector: selector, PodTemplateHash: hash, Port: c.Port,
		}}
	}
	return warmup.TargetQuery{
		Canary:          source("urls", c.URLs, c.Service, c.Selector, c.PodTemplateHash),
		Stable:          source("stableURLs", c.StableURLs, c.StableService, c.StableSelector, c.StablePodTemplateHash),
		CompareToStable: c.hasStable(),
		MinPods:         int(*c.MinPods),
		Timeout:         c.Deadline.D() / 2,
		Kube:            l.kube,
	}
}

func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// loadFrom names where a side's figures came from in the verdict.
func loadFrom(what string, ts []warmup.Target, res *warmup.Result, note string) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	s := fmt.Sprintf("load: %s %s", what, strings.Join(names, ", "))
	if res != nil {
		s += fmt.Sprintf(" (%s)", res.Reason)
	}
	if note != "" {
		s += "; " + note
	}
	return s
}

// exactSide pools the targets' requests into one side with an exact
// histogram: one bucket per distinct latency.
func exactSide(name string, ts []warmup.TargetResult, from string) Side {
	var lat []time.Duration
	var requests, errs int64
	for i := range ts {
		lat = append(lat, ts[i].Latencies()...)
		requests += ts[i].Requests
		errs += ts[i].Errors
	}
	return Side{
		Name: name, Latency: ExactHistogram(lat), LatencyFrom: from,
		Requests: Measured{From: from, Value: float64(requests), Found: true},
		Errors:   Measured{From: from, Value: float64(errs), Found: true},
	}
}

// ExactHistogram turns latencies into a Histogram that loses nothing: one
// cumulative bucket per distinct value (in milliseconds), with the raw
// minimum and maximum, so percentiles, max and the tail test see the exact
// requests. lat is sorted in place.
func ExactHistogram(lat []time.Duration) Histogram {
	if len(lat) == 0 {
		return Histogram{}
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	h := Histogram{HasRaw: true, Min: ms(lat[0]), Max: ms(lat[len(lat)-1])}
	for i, d := range lat {
		if i+1 < len(lat) && lat[i+1] == d {
			continue
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: ms(d), Count: float64(i + 1)})
	}
	return h
}
