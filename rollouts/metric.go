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
	"github.com/danki-dev/danki/pkg/jobs"
	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LatencyPluginName is the metric provider's name in AnalysisTemplates:
// spec.metrics[].provider.plugin["danki/latency"].
const LatencyPluginName = "danki/latency"

func init() {
	register(KindMetricProvider, "RpcMetricProviderPlugin", func(l *slog.Logger, pol policy.Policy, m *metrics.Plugin) goplugin.Plugin {
		return &rpc.RpcMetricProviderPlugin{Impl: newLatencyProvider(l, pol).observe(m)}
	})
}

// latencyProvider is the danki/latency metric provider: an adapter from
// Argo's metric RPC calls to pkg/analysis. A measurement that reads data
// (Prometheus, fortio files) is one complete analysis, bounded by the
// config's timeout: Run returns it finished. A measurement that sends its
// own load (source: load) is asynchronous, like Argo's Job provider: Run
// starts the load and returns Running with a ResumeAt, Resume polls it,
// Terminate and GarbageCollect stop it.
type latencyProvider struct {
	log *slog.Logger
	// policy is the operator's (the plugin's args): what tenant metric
	// configs may ask for.
	policy policy.Policy
	now    func() time.Time
	// analyzers are kept by raw plugin config; tests replace it (a clock).
	analyzers *analysis.Analyzers
	// kube is the plugin's Kubernetes client (built on first use); tests
	// replace it.
	kube  func() (kubernetes.Interface, error)
	loads *loadRuns
	// loadPoll is how soon Argo is asked to resume a running load test.
	loadPoll time.Duration
	// metrics counts the verdicts and Prometheus queries (nil: none;
	// observe).
	metrics *metrics.Plugin
}

// loadPollInterval: a load measurement's progress shows in its message
// this often; its verdict lands at most this long after the load ends.
const loadPollInterval = 5 * time.Second

// terminateWait bounds how long Terminate waits for a load to stop.
const terminateWait = time.Second

var _ rpc.MetricProviderPlugin = (*latencyProvider)(nil)

func newLatencyProvider(l *slog.Logger, pol policy.Policy) *latencyProvider {
	if l == nil {
		l = slog.Default()
	}
	p := &latencyProvider{log: l, policy: pol, now: time.Now, kube: (&lazyKube{}).get, loads: newLoadRuns(), loadPoll: loadPollInterval}
	p.analyzers = analysis.NewAnalyzers(p.analyzerOptions()...)
	return p
}

func (p *latencyProvider) analyzerOptions() []analysis.Option {
	opts := []analysis.Option{analysis.WithLogger(p.log), analysis.WithPolicy(p.policy),
		analysis.WithKube(func() (kubernetes.Interface, error) { return p.kube() }), analysis.WithWarmedPods(analysis.NewWarmedPods())}
	if p.metrics != nil {
		opts = append(opts, analysis.WithQueryObserver(p.metrics))
	}
	return opts
}

// observe counts the measurements' verdicts and Prometheus queries in m
// (nil: not counted). Call it before the first measurement: it builds the
// analyzers afresh.
func (p *latencyProvider) observe(m *metrics.Plugin) *latencyProvider {
	if m != nil {
		p.metrics = m
		p.analyzers = analysis.NewAnalyzers(p.analyzerOptions()...)
	}
	return p
}

// InitPlugin has nothing to set up: clients are built per configuration.
func (p *latencyProvider) InitPlugin() types.RpcError { return types.RpcError{} }

// Run measures once: fetch canary and stable latency over the window, judge
// the SLOs, and map the verdict onto the measurement phase. With source:
// load it starts the measurement's load and returns it Running.
func (p *latencyProvider) Run(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) v1alpha1.Measurement {
	started := metav1.NewTime(p.now())
	m := v1alpha1.Measurement{StartedAt: &started}
	a, err := p.analyzerFor(run, metric)
	if err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, oneLineError(err), nil)
	}
	if a.Source() != analysis.SourceLoad {
		return p.measure(run, metric, a, m)
	}
	if err := a.CheckNamespace(runNamespace(run)); err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, fmt.Sprintf("metric %q: %s", metric.Name, oneLineError(err)), nil)
	}
	since, ns := analysisStart(run), runNamespace(run)
	p.loads.start(p.logFor(run, metric), run, loadID(run, metric), func(ctx context.Context) analysis.Verdict {
		return a.Analyze(analysis.ForNamespace(ctx, ns), since)
	})
	p.logFor(run, metric).Info("danki/latency load test started", "load", strings.Join(a.Queries(), "; "))
	m.Phase = v1alpha1.AnalysisPhaseRunning
	m.Message = "load test started: " + strings.Join(a.Queries(), "; ")
	return p.resumeLater(m)
}

// Resume returns a completed measurement unchanged. A load test still
// running says how far it got; a finished one becomes the measurement. A
// load test this process does not know was lost with a plugin restart: an
// Error (Argo retries the measurement), never a hang. Other sources always
// complete in Run, so an incomplete one comes from an interrupted call:
// measure again.
func (p *latencyProvider) Resume(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	if m.Phase.Completed() {
		return m
	}
	if m.StartedAt == nil {
		started := metav1.NewTime(p.now())
		m.StartedAt = &started
	}
	a, err := p.analyzerFor(run, metric)
	if err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, oneLineError(err), nil)
	}
	if a.Source() != analysis.SourceLoad {
		return p.measure(run, metric, a, m)
	}
	id := loadID(run, metric)
	r, ok := p.loads.Get(id)
	if !ok {
		return p.finish(m, v1alpha1.AnalysisPhaseError, "the load test of this measurement is gone: the danki plugin process restarted while it ran, and its load stopped with it; the next measurement starts a new one", nil)
	}
	v, done := jobs.Result(r)
	if !done {
		m.Message = "load test running: " + r.Value.Message()
		return p.resumeLater(m)
	}
	p.loads.Forget(id, r)
	p.logFor(run, metric).Info("danki/latency measurement", "phase", v.Phase, "summary", v.Summary)
	return p.finish(m, phaseOf(v.Phase), v.Summary, &v)
}

func (p *latencyProvider) resumeLater(m v1alpha1.Measurement) v1alpha1.Measurement {
	at := metav1.NewTime(p.now().Add(p.loadPoll))
	m.ResumeAt = &at
	return m
}

// loadID names a metric's in-progress measurement: Argo runs at most one
// at a time per metric of an AnalysisRun.
func loadID(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) string {
	return runPrefix(run) + metric.Name
}

func runPrefix(run *v1alpha1.AnalysisRun) string {
	if run == nil {
		return "/"
	}
	return string(run.UID) + "/" + run.Namespace + "/" + run.Name + "/"
}

// Terminate ends an in-progress measurement without a verdict: that is
// Inconclusive, never a pass (as Argo's job provider does). A load test's
// load stops at once (Terminate waits up to a second for it).
func (p *latencyProvider) Terminate(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	if n := p.loads.Stop(loadID(run, metric), terminateWait); n > 0 {
		p.logFor(run, metric).Info("danki/latency load test stopped: measurement terminated")
	}
	if m.Phase.Completed() {
		return m
	}
	finished := metav1.NewTime(p.now())
	m.FinishedAt = &finished
	m.Phase = v1alpha1.AnalysisPhaseInconclusive
	m.Message = "terminated before a latency verdict"
	return m
}

// GarbageCollect stops the load tests of an AnalysisRun that is over or
// terminating (Argo trims old measurements while a run goes on, too: a
// running one's load is left alone then). Measurements create no objects.
func (p *latencyProvider) GarbageCollect(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, _ int) types.RpcError {
	if run != nil && (run.Status.Phase.Completed() || run.Spec.Terminate) {
		if n := p.loads.Stop(runPrefix(run), terminateWait); n > 0 {
			p.logFor(run, metric).Info("danki/latency load tests stopped: AnalysisRun over", "stopped", n)
		}
	}
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

func (p *latencyProvider) measure(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, a *analysis.Analyzer, m v1alpha1.Measurement) v1alpha1.Measurement {
	v := a.Analyze(analysis.ForNamespace(context.Background(), runNamespace(run)), analysisStart(run))
	p.logFor(run, metric).Info("danki/latency measurement", "phase", v.Phase, "summary", v.Summary)
	return p.finish(m, phaseOf(v.Phase), v.Summary, &v)
}

func (p *latencyProvider) logFor(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) *slog.Logger {
	log := p.log.With("metric", metric.Name)
	if run != nil {
		log = log.With("analysisrun", run.Namespace+"/"+run.Name)
	}
	return log
}

func (p *latencyProvider) finish(m v1alpha1.Measurement, phase v1alpha1.AnalysisPhase, message string, v *analysis.Verdict) v1alpha1.Measurement {
	finished := metav1.NewTime(p.now())
	m.FinishedAt = &finished
	m.Phase, m.Message, m.Metadata = phase, message, map[string]string{"summary": message}
	p.metrics.AnalysisVerdict(string(phase))
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

// analyzerFor is the analyzer of the metric's configuration, for a
// measurement of run. One analyzer serves every AnalysisRun with the same
// configuration: what depends on the run's namespace (the pods source:
// load finds, the Secret of prometheus.bearerTokenSecret) comes with each
// measurement's context (analysis.ForNamespace).
func (p *latencyProvider) analyzerFor(_ *v1alpha1.AnalysisRun, metric v1alpha1.Metric) (*analysis.Analyzer, error) {
	return p.analyzer(metric)
}

// runNamespace is the namespace a measurement is made on behalf of: the
// AnalysisRun's.
func runNamespace(run *v1alpha1.AnalysisRun) string {
	if run == nil {
		return ""
	}
	return run.Namespace
}
