package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/policy"
)

// Analyzer runs one analysis: fetch a sample from the configured Source and
// judge it under the SLOs. It is safe for concurrent use.
type Analyzer struct {
	rules  *Rules
	source Source
	now    func() time.Time
	logger *slog.Logger
	kind   string
	kube   func() (kubernetes.Interface, error)
	warmed *WarmedPods
	// policy is the operator's (WithPolicy); the zero Policy is the
	// strictest.
	policy policy.Policy
	// queries counts the Prometheus source's queries (WithQueryObserver).
	queries QueryObserver
}

// options applies opts to a bare Analyzer: the settings of the sources
// built without one (NewPrometheus, NewStableTail, NewFortio).
func options(opts []Option) *Analyzer {
	a := &Analyzer{now: time.Now, logger: slog.Default()}
	for _, o := range opts {
		o(a)
	}
	if a.logger == nil {
		a.logger = slog.Default()
	}
	return a
}

// Option customises an Analyzer.
type Option func(*Analyzer)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(a *Analyzer) { a.logger = l } }

// WithSource replaces the Source the Config would build (tests, embedding).
func WithSource(s Source) Option { return func(a *Analyzer) { a.source = s } }

// WithKube gives the sources their Kubernetes client: the load source finds
// pods by Service, selector or pod-template hash with it, the Prometheus
// source reads prometheus.bearerTokenSecret.
func WithKube(kube func() (kubernetes.Interface, error)) Option {
	return func(a *Analyzer) { a.kube = kube }
}

// WithWarmedPods shares the set of pods the load source has warmed between
// analyzers (one per process), so that later measurements skip the warm-up.
func WithWarmedPods(w *WarmedPods) Option { return func(a *Analyzer) { a.warmed = w } }

// WithClock sets the clock used for cumulative windows.
func WithClock(now func() time.Time) Option { return func(a *Analyzer) { a.now = now } }

// NewAnalyzer compiles cfg (its defaults applied, validated; cfg itself is
// not changed) and builds its Source, held to the policy of WithPolicy
// (default: the zero Policy, the strictest; the command line passes
// policy.Local()). Building makes no network calls: an unreachable
// Prometheus shows up as an Error verdict later.
func NewAnalyzer(cfg Config, opts ...Option) (*Analyzer, error) {
	rules, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	a := &Analyzer{rules: rules, now: time.Now, logger: slog.Default(), kind: cfg.Source}
	for _, o := range opts {
		o(a)
	}
	if a.source != nil {
		return a, nil
	}
	switch cfg.Source {
	case SourceFortio:
		f, err := newFortio(cfg, a.policy)
		if err != nil {
			return nil, err
		}
		a.source = f
	case SourceLoad:
		l, err := newLoad(cfg, a.kube, a.warmed, a.logger, a.policy)
		if err != nil {
			return nil, err
		}
		a.source = l
	default:
		p, err := newPrometheusWithRules(cfg, rules, a)
		if err != nil {
			return nil, err
		}
		p.now = a.now
		a.source = p
	}
	return a, nil
}

// Analyze fetches and judges one window. since is when the analysis started;
// it is only used (and required) with window: cumulative, where the window
// runs from since to now.
func (a *Analyzer) Analyze(ctx context.Context, since time.Time) Verdict {
	window, label, err := a.window(since)
	if err != nil {
		return errorVerdict(err, label, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, a.rules.timeout)
	defer cancel()
	sample, err := a.source.Fetch(ctx, window)
	if err != nil {
		var queries []string
		if sample != nil {
			queries = sample.Queries
		}
		a.logger.Warn("latency analysis could not fetch its data", "window", label, "error", err)
		return errorVerdict(err, label, queries)
	}
	v := evaluate(a.rules, sample, label)
	a.logger.Debug("latency analysis", "phase", v.Phase, "summary", v.Summary)
	return v
}

// Evaluate judges an already fetched sample (benchmarks, custom sources).
func (a *Analyzer) Evaluate(s *Sample, window string) Verdict {
	return evaluate(a.rules, s, window)
}

// Queries renders the PromQL the analysis runs (the fortio files for
// fortio), for display. With window: cumulative the range shows as <window>.
func (a *Analyzer) Queries() []string {
	window := time.Duration(0)
	if !a.rules.cumulative {
		window = a.rules.window
	}
	if p, ok := a.source.(*Prometheus); ok {
		return p.Queries(window)
	}
	if f, ok := a.source.(*Fortio); ok {
		out := []string{f.canary}
		if f.stable != "" {
			out = append(out, f.stable)
		}
		return out
	}
	if l, ok := a.source.(*Load); ok {
		return l.Describe()
	}
	return nil
}

// windowLoad labels the window of source: load.
const windowLoad = "this measurement's load"

// Source is the configured source name (istio, envoy, promql, fortio).
func (a *Analyzer) Source() string { return a.kind }

// Window describes the configured window: a duration or "cumulative".
func (a *Analyzer) Window() string {
	switch {
	case a.kind == SourceFortio:
		return "whole fortio run"
	case a.kind == SourceLoad:
		return windowLoad
	case a.rules.cumulative:
		return WindowCumulative
	}
	return promRange(a.rules.window)
}

// window resolves the configured window at this moment.
func (a *Analyzer) window(since time.Time) (time.Duration, string, error) {
	if a.kind == SourceFortio {
		return 0, "whole fortio run", nil
	}
	if a.kind == SourceLoad {
		return 0, windowLoad, nil
	}
	if !a.rules.cumulative {
		return a.rules.window, promRange(a.rules.window), nil
	}
	if since.IsZero() {
		return 0, WindowCumulative, errors.New(`window: "cumulative" needs the time the analysis started; pass it, or set a fixed window such as "5m"`)
	}
	w := a.now().Sub(since)
	if w < time.Second {
		w = time.Second
	}
	if w > maxWindow {
		// A start long past (a zero or forged gateSince: 1970) would query
		// decades of every series: the range is bounded like a fixed
		// window's.
		return maxWindow, fmt.Sprintf("%s (cumulative, clamped from %s to the longest window)", promRange(maxWindow), promRange(w)), nil
	}
	return w, fmt.Sprintf("%s (cumulative)", promRange(w)), nil
}

// CheckNamespace reports whether the analysis may run for namespace ns
// (the AnalysisRun's): source: load only loads pods of ns, so a
// load.namespace naming another is an error. Other sources always may.
func (a *Analyzer) CheckNamespace(ns string) error {
	if l, ok := a.source.(*Load); ok {
		_, err := l.namespace(ns)
		return err
	}
	return nil
}
