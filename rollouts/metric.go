package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/danki-dev/danki/pkg/analysis"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LatencyPluginName is the metric provider's name in AnalysisTemplates:
// spec.metrics[].provider.plugin["danki/latency"].
const LatencyPluginName = "danki/latency"

// latencyAnalyzerCacheSize bounds the analyzers kept between measurements.
// Each AnalysisRun has its own (templated) configuration; keeping its
// analyzer reuses the Prometheus HTTP connections from one interval to the
// next.
const latencyAnalyzerCacheSize = 64

func init() {
	register(KindMetricProvider, "RpcMetricProviderPlugin", func(l *slog.Logger) goplugin.Plugin {
		return &rpc.RpcMetricProviderPlugin{Impl: newLatencyProvider(l)}
	})
}

// latencyProvider is the danki/latency metric provider: an adapter from
// Argo's metric RPC calls to pkg/analysis. Every measurement is one complete
// analysis (bounded by the config's timeout), so Run never returns Running
// and Resume and Terminate only tidy up. Safe for concurrent use: the
// controller calls it from several reconcile workers.
type latencyProvider struct {
	log *slog.Logger
	now func() time.Time
	// options are passed to every analyzer (tests inject a clock).
	options []analysis.Option

	mu        sync.Mutex
	analyzers map[string]*analysis.Analyzer // by raw plugin config
}

var _ rpc.MetricProviderPlugin = (*latencyProvider)(nil)

func newLatencyProvider(l *slog.Logger) *latencyProvider {
	if l == nil {
		l = slog.Default()
	}
	return &latencyProvider{log: l, now: time.Now, analyzers: map[string]*analysis.Analyzer{}}
}

// InitPlugin has nothing to set up: clients are built per configuration.
func (p *latencyProvider) InitPlugin() types.RpcError { return types.RpcError{} }

// Run measures once: fetch canary and stable latency over the window, judge
// the SLOs, and map the verdict onto the measurement phase.
func (p *latencyProvider) Run(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) v1alpha1.Measurement {
	started := metav1.NewTime(p.now())
	return p.measure(run, metric, v1alpha1.Measurement{StartedAt: &started})
}

// Resume returns a completed measurement unchanged. Run always completes, so
// an incomplete one can only come from an interrupted call: measure again.
func (p *latencyProvider) Resume(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	if m.Phase.Completed() {
		return m
	}
	if m.StartedAt == nil {
		started := metav1.NewTime(p.now())
		m.StartedAt = &started
	}
	return p.measure(run, metric, m)
}

// Terminate ends an in-progress measurement without a verdict: that is
// Inconclusive, never a pass (as Argo's job provider does).
func (p *latencyProvider) Terminate(_ *v1alpha1.AnalysisRun, _ v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	if m.Phase.Completed() {
		return m
	}
	finished := metav1.NewTime(p.now())
	m.FinishedAt = &finished
	m.Phase = v1alpha1.AnalysisPhaseInconclusive
	m.Message = "terminated before a latency verdict"
	return m
}

// GarbageCollect has nothing to collect: measurements create no objects.
func (p *latencyProvider) GarbageCollect(*v1alpha1.AnalysisRun, v1alpha1.Metric, int) types.RpcError {
	return types.RpcError{}
}

// Type is the provider type shown by Argo.
func (p *latencyProvider) Type() string { return LatencyPluginName }

// GetMetadata returns what the measurement will query (like Argo's
// Prometheus provider's ResolvedPrometheusQuery), or "error" when the
// configuration is invalid.
func (p *latencyProvider) GetMetadata(metric v1alpha1.Metric) map[string]string {
	a, err := p.analyzer(metric)
	if err != nil {
		return map[string]string{"error": oneLineError(err)}
	}
	md := map[string]string{"source": a.Source(), "window": a.Window()}
	if q := a.Queries(); len(q) > 0 {
		md["queries"] = strings.Join(q, "\n")
	}
	return md
}

func (p *latencyProvider) measure(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	a, err := p.analyzer(metric)
	if err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, oneLineError(err), nil)
	}
	since := analysisStart(run)
	v := a.Analyze(context.Background(), since)
	log := p.log.With("metric", metric.Name, "phase", v.Phase, "summary", v.Summary)
	if run != nil {
		log = log.With("analysisrun", run.Namespace+"/"+run.Name)
	}
	log.Info("danki/latency measurement")
	return p.finish(m, phaseOf(v.Phase), v.Summary, &v)
}

func (p *latencyProvider) finish(m v1alpha1.Measurement, phase v1alpha1.AnalysisPhase, message string, v *analysis.Verdict) v1alpha1.Measurement {
	finished := metav1.NewTime(p.now())
	m.FinishedAt = &finished
	m.Phase = phase
	m.Message = message
	m.Metadata = map[string]string{"summary": message}
	if v == nil {
		return m
	}
	value, err := json.Marshal(measuredValue{Phase: v.Phase, Window: v.Window, Canary: v.Canary, Stable: v.Stable, Checks: v.Checks, Tail: v.Tail})
	if err != nil {
		m.Value = fmt.Sprintf(`{"error":%q}`, err.Error())
	} else {
		m.Value = string(value)
	}
	for k, val := range keyNumbers(v) {
		m.Metadata[k] = val
	}
	return m
}

// measuredValue is what goes into Measurement.Value: every measured number,
// without the queries (those are in the metric's metadata).
type measuredValue struct {
	Phase  analysis.Phase      `json:"phase"`
	Window string              `json:"window"`
	Canary *analysis.SideStats `json:"canary,omitempty"`
	Stable *analysis.SideStats `json:"stable,omitempty"`
	Checks []analysis.Check    `json:"checks,omitempty"`
	Tail   *analysis.TailTest  `json:"tailTest,omitempty"`
}

// keyNumbers are the few numbers worth seeing next to the summary.
func keyNumbers(v *analysis.Verdict) map[string]string {
	out := map[string]string{"window": v.Window}
	put := func(key string, f *float64) {
		if f != nil {
			out[key] = strconv.FormatFloat(*f, 'g', 6, 64)
		}
	}
	for _, s := range []struct {
		name  string
		stats *analysis.SideStats
	}{{"canary", v.Canary}, {"stable", v.Stable}} {
		if s.stats == nil {
			continue
		}
		count := s.stats.Count
		put(s.name+"Count", &count)
		put(s.name+"P99Ms", s.stats.P99)
		put(s.name+"P999Ms", s.stats.P999)
		put(s.name+"ErrorRate", s.stats.ErrorRate)
	}
	if v.Tail != nil {
		put("tailEValue", &v.Tail.EValue)
		put("tailThresholdMs", &v.Tail.ThresholdMs)
	}
	return out
}

// oneLineError writes an error on one line for a measurement message:
// configuration errors list one problem per line (errors.Join).
func oneLineError(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// phaseOf maps a verdict onto Argo's measurement phases.
func phaseOf(p analysis.Phase) v1alpha1.AnalysisPhase {
	switch p {
	case analysis.Pass:
		return v1alpha1.AnalysisPhaseSuccessful
	case analysis.Fail:
		return v1alpha1.AnalysisPhaseFailed
	case analysis.Inconclusive:
		return v1alpha1.AnalysisPhaseInconclusive
	}
	return v1alpha1.AnalysisPhaseError
}

// analysisStart is where a cumulative window begins: when the AnalysisRun
// started (its creation as a fallback).
func analysisStart(run *v1alpha1.AnalysisRun) time.Time {
	if run == nil {
		return time.Time{}
	}
	if run.Status.StartedAt != nil {
		return run.Status.StartedAt.Time
	}
	return run.CreationTimestamp.Time
}

// analyzer returns the analyzer for the metric's configuration, building and
// caching it on first use.
func (p *latencyProvider) analyzer(metric v1alpha1.Metric) (*analysis.Analyzer, error) {
	raw, ok := metric.Provider.Plugin[LatencyPluginName]
	if !ok {
		return nil, fmt.Errorf("metric %q has no provider.plugin[%q] configuration; see docs/latency.md", metric.Name, LatencyPluginName)
	}
	key := string(raw)
	p.mu.Lock()
	a, ok := p.analyzers[key]
	p.mu.Unlock()
	if ok {
		return a, nil
	}
	cfg, err := analysis.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("metric %q: %w", metric.Name, err)
	}
	opts := append([]analysis.Option{analysis.WithLogger(p.log)}, p.options...)
	a, err = analysis.NewAnalyzer(cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("metric %q: %w", metric.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if existing, ok := p.analyzers[key]; ok {
		return existing, nil
	}
	if len(p.analyzers) >= latencyAnalyzerCacheSize {
		clear(p.analyzers) // old AnalysisRuns' configurations; rebuilt if needed
	}
	p.analyzers[key] = a
	return a, nil
}
