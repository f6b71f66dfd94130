package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric of danki's.
const Namespace = "danki"

// Other is the label value recorded for a value outside its label's set.
const Other = "other"

// Warm-up outcomes: the outcome label of danki_gate_warmups_total and
// danki_plugin_warmups_total (warmup.OutcomeOf names the first five).
const (
	OutcomeWarm         = "warm"          // converged: warm
	OutcomeNotConverged = "not_converged" // deadline or maxRequests before the latency converged
	OutcomeRejected     = "rejected"      // plugin: slower than stable; gate: the pod's warm-up annotation was invalid or outside the policy
	OutcomeFailed       = "failed"        // any other failure (not healthy, failing requests, no pods, …)
	OutcomeStopped      = "stopped"       // plugin: stopped by the rollout (terminated, aborted, owner gone)
	OutcomeDeleted      = "deleted"       // gate: the pod was deleted while it warmed
	OutcomeRestarted    = "restarted"     // gate: a container restarted (not ready) while the pod warmed
)

var (
	gateOutcomes   = []string{OutcomeWarm, OutcomeNotConverged, OutcomeRejected, OutcomeFailed, OutcomeDeleted, OutcomeRestarted}
	pluginOutcomes = []string{OutcomeWarm, OutcomeNotConverged, OutcomeRejected, OutcomeFailed, OutcomeStopped}
	// Webhook admission results.
	admissionResults = []string{"gated", "passed", "error"}
	// Ramp actions (shift.Action, "-" as "_").
	rampActions = []string{"move", "hold", "back_off", "done", "fail", "abort"}
	// Causes of a ramp breach.
	breachCauses = []string{"slo", "no_verdict"}
	// Results of danki's abort of a rollout whose ramp failed.
	abortResults = []string{"aborted", "failed"}
	// Analysis measurement phases (Argo's, lower case).
	verdictPhases = []string{"successful", "failed", "inconclusive", "error"}
	// Prometheus query error kinds (analysis.QueryErrorKind).
	queryErrorKinds = []string{"bad_query", "server", "timeout", "tls", "unreachable", "credentials", "result"}
)

// Buckets: warm-ups take seconds to tens of minutes, and a few hundred to a
// few hundred thousand requests.
var (
	durationBuckets = []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800}
	requestBuckets  = []float64{100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000}
)

// bounded is v if it is one of set, else Other.
func bounded(v string, set []string) string {
	v = strings.ReplaceAll(strings.ToLower(v), "-", "_")
	for _, s := range set {
		if s == v {
			return v
		}
	}
	return Other
}

// counterVec is a counter with one label, every value of its set created at
// zero (so that rate() sees the first increment) plus Other.
func counterVec(name, help, label string, set []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, []string{label})
	for _, v := range append(set, Other) {
		c.WithLabelValues(v)
	}
	return c
}

// registerAll registers cs on reg; on an error it unregisters what it
// registered and returns the error.
func registerAll(reg prometheus.Registerer, cs []prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// Gate is the warm gate's metrics (pkg/gate records them). The zero of a
// nil *Gate records nothing.
type Gate struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	running, queued, slotsInUse, slots prometheus.Gauge
	duration, requests                 prometheus.Histogram
	outcomes, admissions               *prometheus.CounterVec
}

// NewGate registers the gate's metrics on reg (the gate: controller-runtime's
// metrics.Registry). Unregister takes them off again.
func NewGate(reg prometheus.Registerer) (*Gate, error) {
	g := &Gate{reg: reg,
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "gate_warmups_running",
			Help: "Warm-ups sending load to their pod now."}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "gate_warmups_queued",
			Help: "Warm-ups waiting for a slot (--max-concurrent, --max-per-namespace) or for their node (--max-per-node)."}),
		slotsInUse: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "gate_warmup_slots_in_use",
			Help: "Warm-up slots held: a warm-up holds one from before its pod's CPU request is lowered until its outcome is written."}),
		slots: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "gate_warmup_slots",
			Help: "Warm-up slots in all (--max-concurrent)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "gate_warmup_duration_seconds",
			Help: "Time from the start of a warm-up attempt to its pod's latency converged (warm attempts only).", Buckets: durationBuckets}),
		requests: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "gate_warmup_requests",
			Help: "Warm-up requests a pod took to converge (warm attempts only).", Buckets: requestBuckets}),
		outcomes: counterVec("gate_warmups_total",
			"Warm-up attempts ended, by outcome: warm, not_converged, rejected (invalid warm-up annotation), failed, deleted, restarted.", "outcome", gateOutcomes),
		admissions: counterVec("gate_webhook_admissions_total",
			"Pods the mutating webhook answered, by result: gated (readiness gate added or kept), passed (not opted in, unchanged), error.", "result", admissionResults),
	}
	g.collectors = []prometheus.Collector{g.running, g.queued, g.slotsInUse, g.slots, g.duration, g.requests, g.outcomes, g.admissions}
	if err := registerAll(reg, g.collectors); err != nil {
		return nil, fmt.Errorf("register the gate's metrics: %w", err)
	}
	// danki_build_info stays when the gate unregisters: it is the process's.
	if err := registerBuildInfo(reg); err != nil {
		g.Unregister()
		return nil, fmt.Errorf("register danki_build_info: %w", err)
	}
	return g, nil
}

// Unregister takes the gate's metrics off its registry (a gate that
// stopped: another may start in the same process).
func (g *Gate) Unregister() {
	if g == nil {
		return
	}
	for _, c := range g.collectors {
		g.reg.Unregister(c)
	}
}

// Slots sets the number of warm-up slots.
func (g *Gate) Slots(n int) {
	if g != nil {
		g.slots.Set(float64(n))
	}
}

// Queued counts a warm-up into (+1) or out of (-1) the queue.
func (g *Gate) Queued(delta int) {
	if g != nil {
		g.queued.Add(float64(delta))
	}
}

// SlotHeld counts a slot taken (+1) or given back (-1).
func (g *Gate) SlotHeld(delta int) {
	if g != nil {
		g.slotsInUse.Add(float64(delta))
	}
}

// Running counts a warm-up's load starting (+1) or ending (-1).
func (g *Gate) Running(delta int) {
	if g != nil {
		g.running.Add(float64(delta))
	}
}

// WarmupEnded counts an attempt's outcome; a warm one's duration and
// requests go into the histograms.
func (g *Gate) WarmupEnded(outcome string, elapsed time.Duration, requests int64) {
	if g == nil {
		return
	}
	outcome = bounded(outcome, gateOutcomes)
	g.outcomes.WithLabelValues(outcome).Inc()
	if outcome == OutcomeWarm {
		g.duration.Observe(elapsed.Seconds())
		g.requests.Observe(float64(requests))
	}
}

// Admission counts one webhook answer: "gated", "passed" or "error".
func (g *Gate) Admission(result string) {
	if g != nil {
		g.admissions.WithLabelValues(bounded(result, admissionResults)).Inc()
	}
}

// Plugin is the Argo Rollouts plugins' metrics. One plugin process serves
// one plugin kind, so each process shows the metrics of its kind move and
// the others' stay at zero. A nil *Plugin records nothing.
type Plugin struct {
	warmups        *prometheus.CounterVec
	warmupDuration prometheus.Histogram
	warmupRequests prometheus.Counter
	rampDecisions  *prometheus.CounterVec
	rampBreaches   *prometheus.CounterVec
	rampAborts     *prometheus.CounterVec
	verdicts       *prometheus.CounterVec
	queries        prometheus.Counter
	queryErrors    *prometheus.CounterVec
}

// NewPlugin registers the plugins' metrics on reg (the plugin process's
// own registry, served on --metrics-address).
func NewPlugin(reg prometheus.Registerer) (*Plugin, error) {
	p := &Plugin{
		warmups: counterVec("plugin_warmups_total",
			"danki/warmup step warm-ups ended, by outcome: warm, not_converged, rejected (slower than stable), failed, stopped.", "outcome", pluginOutcomes),
		warmupDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "plugin_warmup_duration_seconds",
			Help: "Time a danki/warmup step warm-up took to converge, in this plugin process (warm outcomes only).", Buckets: durationBuckets}),
		warmupRequests: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "plugin_warmup_requests_total",
			Help: "Warm-up requests the danki/warmup step sent to canary pods."}),
		rampDecisions: counterVec("plugin_ramp_decisions_total",
			"danki/istio ramp decisions (one per SetWeight call), by action: move, hold, back_off, done, fail, abort (weight 0 asked for).", "action", rampActions),
		rampBreaches: counterVec("plugin_ramp_breaches_total",
			"danki/istio gate breaches that sent the canary back to its last good weight (or failed the ramp), by cause: slo (the gate failed), no_verdict (none for maxHold).", "cause", breachCauses),
		rampAborts: counterVec("plugin_ramp_aborts_total",
			"Rollouts danki/istio aborted because their ramp failed, by result: aborted, failed (the abort itself failed).", "result", abortResults),
		verdicts: counterVec("plugin_analysis_verdicts_total",
			"danki/latency measurements finished, by phase: successful, failed, inconclusive, error.", "phase", verdictPhases),
		queries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "plugin_prometheus_queries_total",
			Help: "Prometheus queries the danki/latency analyses and danki/istio gates ran."}),
		queryErrors: counterVec("plugin_prometheus_query_errors_total",
			"Prometheus queries that failed, by kind: bad_query, server, timeout, tls, unreachable, credentials, result (not an instant vector).", "kind", queryErrorKinds),
	}
	if err := registerAll(reg, []prometheus.Collector{p.warmups, p.warmupDuration, p.warmupRequests, p.rampDecisions, p.rampBreaches,
		p.rampAborts, p.verdicts, p.queries, p.queryErrors}); err != nil {
		return nil, fmt.Errorf("register the plugin's metrics: %w", err)
	}
	if err := registerBuildInfo(reg); err != nil {
		return nil, fmt.Errorf("register danki_build_info: %w", err)
	}
	return p, nil
}

// WarmupEnded counts a step warm-up's outcome; a warm one's duration goes
// into the histogram (warmupstep.Observer).
func (p *Plugin) WarmupEnded(outcome string, elapsed time.Duration) {
	if p == nil {
		return
	}
	outcome = bounded(outcome, pluginOutcomes)
	p.warmups.WithLabelValues(outcome).Inc()
	if outcome == OutcomeWarm {
		p.warmupDuration.Observe(elapsed.Seconds())
	}
}

// WarmupRequests adds n requests sent (warmupstep.Observer).
func (p *Plugin) WarmupRequests(n int64) {
	if p != nil && n > 0 {
		p.warmupRequests.Add(float64(n))
	}
}

// RampDecision counts one ramp decision; breach, if not empty, is the
// cause of the breach it made ("slo", "no_verdict") (shift.Observer).
func (p *Plugin) RampDecision(action, breach string) {
	if p == nil {
		return
	}
	p.rampDecisions.WithLabelValues(bounded(action, rampActions)).Inc()
	if breach != "" {
		p.rampBreaches.WithLabelValues(bounded(breach, breachCauses)).Inc()
	}
}

// RampAbort counts danki's abort of a rollout whose ramp failed; err is the
// abort's own error (shift.Observer).
func (p *Plugin) RampAbort(err error) {
	if p == nil {
		return
	}
	result := "aborted"
	if err != nil {
		result = "failed"
	}
	p.rampAborts.WithLabelValues(result).Inc()
}

// AnalysisVerdict counts a finished measurement by its phase (Argo's:
// Successful, Failed, Inconclusive, Error).
func (p *Plugin) AnalysisVerdict(phase string) {
	if p != nil {
		p.verdicts.WithLabelValues(bounded(phase, verdictPhases)).Inc()
	}
}

// PrometheusQuery counts one query; errorKind is empty when it succeeded
// (analysis.QueryObserver).
func (p *Plugin) PrometheusQuery(errorKind string) {
	if p == nil {
		return
	}
	p.queries.Inc()
	if errorKind != "" {
		p.queryErrors.WithLabelValues(bounded(errorKind, queryErrorKinds)).Inc()
	}
}
