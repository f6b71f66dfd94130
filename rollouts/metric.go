package rollouts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// Argo's metric RPC calls to pkg/analysis. Every measurement runs in the
// background, so no call holds one of Argo's reconcile workers longer than
// answerWithin whatever a tenant's config asks for: a measurement that reads
// data (Prometheus, fortio files) usually ends within it and Run returns it
// finished; one that takes longer (a slow query, up to the config's timeout)
// or sends its own load (source: load) is returned Running with a ResumeAt,
// Resume polls it, Terminate and GarbageCollect stop it (as Argo's Job
// provider does).
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

// answerWithin bounds how long Run and Resume wait for a measurement that
// reads data before they answer Running: a tenant's slow query (its
// timeout may be minutes) must not hold a controller worker that long.
const answerWithin = 3 * time.Second

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
// the SLOs, and map the verdict onto the measurement phase. The measurement
// runs in the background: Run returns it finished when it ends within
// answerWithin, else Running with a ResumeAt (a source: load measurement
// always: its load runs for its duration).
func (p *latencyProvider) Run(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) v1alpha1.Measurement {
	started := metav1.NewTime(p.now())
	m := v1alpha1.Measurement{StartedAt: &started}
	a, err := p.analyzerFor(run, metric)
	if err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, oneLineError(err), nil)
	}
	if a.Source() != analysis.SourceLoad {
		return p.collect(run, metric, p.measurement(run, metric, a), m, answerWithin)
	}
	if err := a.CheckNamespace(runNamespace(run)); err != nil {
		return p.finish(m, v1alpha1.AnalysisPhaseError, fmt.Sprintf("metric %q: %s", metric.Name, oneLineError(err)), nil)
	}
	p.measurement(run, metric, a)
	p.logFor(run, metric).Info("danki/latency load test started", "load", strings.Join(a.Queries(), "; "))
	m.Phase = v1alpha1.AnalysisPhaseRunning
	m.Message = "load test started: " + strings.Join(a.Queries(), "; ")
	return p.resumeLater(m)
}

// measurement returns the metric's measurement running in the
// background: a load test started anew (replacing an earlier one of the
// same measurement), or one that reads data joined while it runs (a Run
// repeated before the first answered) and else started.
func (p *latencyProvider) measurement(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, a *analysis.Analyzer) *loadJob {
	if a.Source() != analysis.SourceLoad {
		if j, ok := p.loads.Get(measurementID(run, metric)); ok && !j.Finished() {
			return j
		}
	}
	since, ns := analysisStart(run), runNamespace(run)
	return p.loads.start(p.logFor(run, metric), run, measurementID(run, metric), func(ctx context.Context) analysis.Verdict {
		return a.Analyze(analysis.ForNamespace(ctx, ns), since)
	})
}

// collect waits up to wait for j and returns its verdict as the finished
// measurement, or m Running with its progress and a ResumeAt.
func (p *latencyProvider) collect(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, j *loadJob, m v1alpha1.Measurement, wait time.Duration) v1alpha1.Measurement {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-j.Done():
		case <-t.C:
		}
		t.Stop()
	}
	v, done := jobs.Result(j)
	if !done {
		m.Phase = v1alpha1.AnalysisPhaseRunning
		m.Message = "measurement running: " + j.Value.Message()
		return p.resumeLater(m)
	}
	p.loads.Forget(measurementID(run, metric), j)
	p.logFor(run, metric).Info("danki/latency measurement", "phase", v.Phase, "summary", v.Summary)
	return p.finish(m, phaseOf(v.Phase), v.Summary, &v)
}

// Resume returns a completed measurement unchanged, and a running one's
// progress or, once it ended, its verdict. A load test this process does
// not know was lost with a plugin restart: an Error (Argo retries the
// measurement), never a hang. A measurement that reads data and is not
// known (a restart, or a Run interrupted before it answered) is started
// again.
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
	j, ok := p.loads.Get(measurementID(run, metric))
	switch {
	case ok && a.Source() == analysis.SourceLoad:
		return p.collect(run, metric, j, m, 0)
	case ok:
		return p.collect(run, metric, j, m, answerWithin)
	case a.Source() == analysis.SourceLoad:
		return p.finish(m, v1alpha1.AnalysisPhaseError, "the load test of this measurement is gone: the danki plugin process restarted while it ran, and its load stopped with it; the next measurement starts a new one", nil)
	}
	return p.collect(run, metric, p.measurement(run, metric, a), m, answerWithin)
}

func (p *latencyProvider) resumeLater(m v1alpha1.Measurement) v1alpha1.Measurement {
	at := metav1.NewTime(p.now().Add(p.loadPoll))
	m.ResumeAt = &at
	return m
}

// measurementID names a metric's in-progress measurement: Argo runs at most
// one at a time per metric of an AnalysisRun. The configuration's digest
// keeps apart two metrics of one name whose configurations differ (a run
// without a name, as the CLI's and tests' are).
func measurementID(run *v1alpha1.AnalysisRun, metric v1alpha1.Metric) string {
	sum := sha256.Sum256(metric.Provider.Plugin[LatencyPluginName])
	return loadID(run, metric) + "#" + hex.EncodeToString(sum[:8])
}

// loadID names a metric's measurements under their AnalysisRun (Terminate
// stops them by this prefix).
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
	if n := p.loads.Stop(loadID(run, metric)+"#", terminateWait); n > 0 {
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
