package rollouts

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

func init() {
	register(KindMetricProvider, "RpcMetricProviderPlugin", func(l *slog.Logger) goplugin.Plugin {
		return &rpc.RpcMetricProviderPlugin{Impl: newLatencyProvider(l)}
	})
}

// latencyProvider is the danki/latency metric provider: an adapter from
// Argo's metric RPC calls to pkg/analysis. Every measurement is one complete
// analysis (bounded by the config's timeout), so Run never returns Running
// and Resume and Terminate only tidy up.
type latencyProvider struct {
	log *slog.Logger
	now func() time.Time
	// analyzers are kept by raw plugin config; tests replace it (a clock).
	analyzers *analysis.Analyzers
}

var _ rpc.MetricProviderPlugin = (*latencyProvider)(nil)

func newLatencyProvider(l *slog.Logger) *latencyProvider {
	if l == nil {
		l = slog.Default()
	}
	return &latencyProvider{log: l, now: time.Now, analyzers: analysis.NewAnalyzers(analysis.WithLogger(l))}
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
	return a.Describe()
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
	m.Phase, m.Message, m.Metadata = phase, message, map[string]string{"summary": message}
	if v != nil {
		f := v.Figures()
		m.Value, m.Metadata = f.Value, f.Metadata
	}
	return m
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

// analyzer returns the analyzer for the metric's configuration.
func (p *latencyProvider) analyzer(metric v1alpha1.Metric) (*analysis.Analyzer, error) {
	raw, ok := metric.Provider.Plugin[LatencyPluginName]
	if !ok {
		return nil, fmt.Errorf("metric %q has no provider.plugin[%q] configuration; see docs/latency.md", metric.Name, LatencyPluginName)
	}
	a, err := p.analyzers.Get(raw)
	if err != nil {
		return nil, fmt.Errorf("metric %q: %w", metric.Name, err)
	}
	return a, nil
}
