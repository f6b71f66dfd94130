package rollouts

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/policy"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var quietLog = slog.New(slog.DiscardHandler)

// Istio's default bucket bounds (ms) and per-bucket counts (the last is +Inf).
var (
	testBounds = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000}
	// stable: 10,000 requests, p99 in (50, 100] ms, 0.5 % above 100 ms.
	stableCounts = []float64{0, 0, 100, 2000, 4000, 2500, 1350, 45, 5, 0, 0}
	// healthy canary: the same shape, 1,000 requests.
	healthyCounts = []float64{0, 0, 10, 200, 400, 250, 135, 4, 1, 0, 0}
	// slow canary: 15 % above 100 ms, p99 ≈ 420 ms.
	slowCounts = []float64{0, 0, 0, 50, 200, 300, 300, 120, 30, 0, 0}
)

// latencyProm is a fake Prometheus holding the Istio standard metrics the
// gateway reports (reporter="source") for services app-canary (healthy),
// app-slow and app-stable; app-empty has no series. More versions are
// added with addIstioVersion.
func latencyProm(t *testing.T) *testutil.Prometheus {
	t.Helper()
	p := testutil.NewPrometheus(t)
	addIstioVersion(p, "app-canary", testBounds, healthyCounts, 0)
	addIstioVersion(p, "app-slow", testBounds, slowCounts, 0)
	addIstioVersion(p, "app-stable", testBounds, stableCounts, 0)
	return p
}

// addIstioVersion adds one Service's latency histogram (per-bucket counts,
// the last is +Inf) and its requests, errors of them answered 503.
func addIstioVersion(p *testutil.Prometheus, service string, bounds, counts []float64, errors float64) {
	labels := map[string]string{"reporter": "source", "destination_service": service + ".default.svc.cluster.local"}
	les := append(append([]float64(nil), bounds...), math.Inf(+1))
	cum, total := make([]float64, len(counts)), 0.0
	for i, c := range counts {
		total += c
		cum[i] = total
	}
	p.AddHistogram("istio_request_duration_milliseconds", labels, les, cum)
	code := func(c string) map[string]string {
		return map[string]string{"reporter": "source", "destination_service": labels["destination_service"], "response_code": c}
	}
	p.Add("istio_requests_total", code("200"), total-errors)
	p.Add("istio_requests_total", code("503"), errors)
}

// rejectingProm answers every query with Prometheus' 400 bad_data.
func rejectingProm(t *testing.T) *testutil.Prometheus {
	t.Helper()
	p := testutil.NewPrometheus(t)
	p.Respond(func(q string) (int, string) {
		return http.StatusBadRequest, fmt.Sprintf(`{"status":"error","errorType":"bad_data","error":%q}`, "1:1: parse error: unexpected identifier in "+q)
	})
	return p
}

// dispenseLatency serves the registered metric-provider plugin over
// go-plugin's real net/rpc connection and returns the controller's side of
// it, the same client Argo Rollouts uses.
func dispenseLatency(t *testing.T, now time.Time) (rpc.MetricProviderPlugin, *latencyProvider) {
	t.Helper()
	f, ok := factories[KindMetricProvider]
	if !ok || f.mapKey != "RpcMetricProviderPlugin" {
		t.Fatalf("metric provider registered as %+v, want kind %q with map key RpcMetricProviderPlugin", f, KindMetricProvider)
	}
	plugin := f.build(quietLog, policy.Local(), nil)
	impl := plugin.(*rpc.RpcMetricProviderPlugin).Impl.(*latencyProvider)
	impl.now = func() time.Time { return now }
	impl.analyzers = analysis.NewAnalyzers(analysis.WithLogger(quietLog), analysis.WithPolicy(impl.policy), analysis.WithClock(func() time.Time { return now }))

	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{f.mapKey: plugin}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(f.mapKey)
	if err != nil {
		t.Fatal(err)
	}
	mp, ok := raw.(rpc.MetricProviderPlugin)
	if !ok {
		t.Fatalf("dispensed %T, want rpc.MetricProviderPlugin", raw)
	}
	if e := mp.InitPlugin(); e.HasError() {
		t.Fatalf("InitPlugin: %v", e)
	}
	return mp, impl
}

func latencyMetric(name, config string) v1alpha1.Metric {
	return v1alpha1.Metric{
		Name:     name,
		Interval: "1m",
		Provider: v1alpha1.MetricProvider{Plugin: map[string]json.RawMessage{LatencyPluginName: json.RawMessage(config)}},
	}
}

func istioPluginConfig(address, canaryService string) string {
	return fmt.Sprintf(`{
	  "source": "istio",
	  "prometheus": {"address": %q},
	  "istio": {
	    "canary": {"service": "%s.default.svc.cluster.local"},
	    "stable": {"service": "app-stable.default.svc.cluster.local"}
	  },
	  "slo": {"p99": "250ms", "maxErrorRate": "1%%", "ratio": {"p99": "1.5"}},
	  "tailTest": {}
	}`, address, canaryService)
}

func TestLatencyMetricPhasesThroughRPC(t *testing.T) {
	fake := latencyProm(t)
	bad := rejectingProm(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	mp, _ := dispenseLatency(t, now)
	started := metav1.NewTime(now.Add(-5 * time.Minute))
	run := &v1alpha1.AnalysisRun{
		ObjectMeta: metav1.ObjectMeta{Name: "app-7d9f-2", Namespace: "default"},
		Status:     v1alpha1.AnalysisRunStatus{StartedAt: &started},
	}

	for _, tc := range []struct {
		name     string
		config   string
		phase    v1alpha1.AnalysisPhase
		message  []string
		hasValue bool
	}{
		{"healthy canary", istioPluginConfig(fake.URL, "app-canary"), v1alpha1.AnalysisPhaseSuccessful,
			[]string{"Pass: all SLOs hold", "window 5m (cumulative)"}, true},
		{"slow canary", istioPluginConfig(fake.URL, "app-slow"), v1alpha1.AnalysisPhaseFailed,
			[]string{"Fail:", "p99 ", "> 250ms SLO", "canary's tail is heavier"}, true},
		{"no canary data", istioPluginConfig(fake.URL, "app-empty"), v1alpha1.AnalysisPhaseInconclusive,
			[]string{"Inconclusive:", `no data, query returned no series: sum by (le) (increase(istio_request_duration_milliseconds_bucket{destination_service="app-empty.default.svc.cluster.local",reporter="source"}[5m]))`}, true},
		{"bad PromQL", `{"source":"promql","prometheus":{"address":"` + bad.URL + `"},"promql":{"canary":"a=\"b\"","histogram":"BAD{<<.Selector>>}","requests":"BAD_requests{<<.Selector>>}","errors":"BAD_errors{<<.Selector>>}"},"slo":{"p99":"1s"}}`,
			v1alpha1.AnalysisPhaseError, []string{"failed to run via plugin:", "prometheus rejected query BAD", "fix the PromQL"}, false},
		{"invalid config", `{"source":"istio","slo":{"p99":"-1s"}}`, v1alpha1.AnalysisPhaseError,
			[]string{`metric "latency"`, "prometheus.address: missing", "istio: missing", `slo.p99: -1s must be positive`}, false},
		{"not a duration", `{"source":"istio","slo":{"p99":"fast"}}`, v1alpha1.AnalysisPhaseError,
			[]string{`metric "latency"`, `slo.p99: want a duration, got "fast"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mp.Run(run, latencyMetric("latency", tc.config))
			if m.Phase != tc.phase {
				t.Fatalf("phase %s, want %s: %s", m.Phase, tc.phase, m.Message)
			}
			for _, w := range tc.message {
				if !strings.Contains(m.Message, w) {
					t.Errorf("message %q does not contain %q", m.Message, w)
				}
			}
			if m.StartedAt == nil || m.FinishedAt == nil || !m.StartedAt.Time.Equal(now) || !m.FinishedAt.Time.Equal(now) {
				t.Errorf("startedAt %v finishedAt %v, want both %v", m.StartedAt, m.FinishedAt, now)
			}
			if m.Metadata["summary"] == "" {
				t.Errorf("metadata %v has no summary", m.Metadata)
			}
			if !tc.hasValue {
				return
			}
			var value struct {
				Phase  string             `json:"phase"`
				Window string             `json:"window"`
				Canary analysis.SideStats `json:"canary"`
				Stable analysis.SideStats `json:"stable"`
				Checks []analysis.Check   `json:"checks"`
			}
			if err := json.Unmarshal([]byte(m.Value), &value); err != nil {
				t.Fatalf("value is not JSON: %v: %s", err, m.Value)
			}
			if value.Window != "5m (cumulative)" || len(value.Checks) != 4 {
				t.Errorf("value window %q with %d checks, want 5m (cumulative) and 4: %s", value.Window, len(value.Checks), m.Value)
			}
			if tc.phase != v1alpha1.AnalysisPhaseInconclusive {
				if value.Canary.Count != 1000 || value.Stable.Count != 10000 || value.Canary.P99 == nil || m.Metadata["canaryP99Ms"] == "" || m.Metadata["tailEValue"] == "" {
					t.Errorf("value/metadata lack the numbers: %s %v", m.Value, m.Metadata)
				}
			}
		})
	}
	// The cumulative window came from the AnalysisRun's startedAt, through gob.
	for _, q := range fake.Queries() {
		if !strings.Contains(q, "[5m]") {
			t.Errorf("query %q does not use the 5m since the AnalysisRun started", q)
		}
	}
}

func TestLatencyMetricMissingConfig(t *testing.T) {
	mp, _ := dispenseLatency(t, time.Now())
	m := mp.Run(&v1alpha1.AnalysisRun{}, v1alpha1.Metric{Name: "p99", Provider: v1alpha1.MetricProvider{Plugin: map[string]json.RawMessage{"other/plugin": json.RawMessage(`{}`)}}})
	if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, `metric "p99" has no provider.plugin["danki/latency"]`) {
		t.Fatalf("phase %s message %q", m.Phase, m.Message)
	}
}

func TestLatencyMetricLifecycleThroughRPC(t *testing.T) {
	fake := latencyProm(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	mp, _ := dispenseLatency(t, now)
	metric := latencyMetric("latency", istioPluginConfig(fake.URL, "app-canary"))
	run := &v1alpha1.AnalysisRun{Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: now.Add(-time.Minute)}}}

	if got := mp.Type(); got != "danki/latency" {
		t.Errorf("Type() = %q", got)
	}
	md := mp.GetMetadata(metric)
	if md["source"] != "istio" || md["window"] != "cumulative" || !strings.Contains(md["queries"], "istio_request_duration_milliseconds_bucket{destination_service=\"app-canary.default.svc.cluster.local\",reporter=\"source\"}[<window>]") {
		t.Errorf("GetMetadata = %v", md)
	}
	if md := mp.GetMetadata(latencyMetric("latency", `{"source":"x"}`)); !strings.Contains(md["error"], `source: "x" is not a source`) {
		t.Errorf("GetMetadata for a bad config = %v, want an error naming source", md)
	}

	done := mp.Run(run, metric)
	if done.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("Run: %s %s", done.Phase, done.Message)
	}
	if again := mp.Resume(run, metric, done); again.Phase != done.Phase || again.Value != done.Value {
		t.Errorf("Resume changed a completed measurement: %+v", again)
	}
	if again := mp.Terminate(run, metric, done); again.Phase != done.Phase {
		t.Errorf("Terminate changed a completed measurement: %+v", again)
	}
	running := v1alpha1.Measurement{Phase: v1alpha1.AnalysisPhaseRunning, StartedAt: &metav1.Time{Time: now}}
	if resumed := mp.Resume(run, metric, running); resumed.Phase != v1alpha1.AnalysisPhaseSuccessful || resumed.FinishedAt == nil {
		t.Errorf("Resume of a running measurement: %s %s", resumed.Phase, resumed.Message)
	}
	terminated := mp.Terminate(run, metric, running)
	if terminated.Phase != v1alpha1.AnalysisPhaseInconclusive || terminated.FinishedAt == nil {
		t.Errorf("Terminate of a running measurement: %+v, want Inconclusive (never a pass)", terminated)
	}
	if e := mp.GarbageCollect(run, metric, 10); e.HasError() {
		t.Errorf("GarbageCollect: %v", e)
	}
}

func TestLatencyMetricConcurrentRuns(t *testing.T) {
	fake := latencyProm(t)
	now := time.Now()
	mp, impl := dispenseLatency(t, now)
	run := &v1alpha1.AnalysisRun{Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: now.Add(-time.Minute)}}}
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 40 {
		wg.Go(func() {
			svc, want := "app-canary", v1alpha1.AnalysisPhaseSuccessful
			if i%2 == 1 {
				svc, want = "app-slow", v1alpha1.AnalysisPhaseFailed
			}
			if m := mp.Run(run, latencyMetric("latency", istioPluginConfig(fake.URL, svc))); m.Phase != want {
				errs <- fmt.Sprintf("run %d (%s): %s, want %s: %s", i, svc, m.Phase, want, m.Message)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := impl.analyzers.Len(); n != 2 {
		t.Errorf("%d cached analyzers, want 2 (one per configuration)", n)
	}
}

// TestLatencyMetricRefusesBadCanariesThroughRPC drives issue #12's cases
// through the real plugin RPC and checks Argo's measurement phase and
// message: each of them used to end Successful.
func TestLatencyMetricRefusesBadCanariesThroughRPC(t *testing.T) {
	fake := latencyProm(t)
	// 10,000 requests, 30 taking 5 s: p99.9 above the top bound 1000 ms
	// of the finer buckets the docs recommend.
	customBounds := []float64{1, 2, 5, 10, 15, 20, 25, 35, 50, 75, 100, 150, 250, 500, 1000}
	topTail := make([]float64, len(customBounds)+1)
	topTail[6], topTail[len(topTail)-1] = 9970, 30
	addIstioVersion(fake, "app-toptail", customBounds, topTail, 0)
	// Healthy latency, but 5 % of requests failed fast.
	addIstioVersion(fake, "app-fastfail", testBounds, healthyCounts, 50)
	// A slow canary at low weight: 300 requests, under the 500 the tail
	// test needs at p99.
	lowWeight := make([]float64, len(slowCounts))
	for i, c := range slowCounts {
		lowWeight[i] = c * 0.3
	}
	addIstioVersion(fake, "app-lowweight", testBounds, lowWeight, 0)
	// Broken data: +Inf and NaN bucket counts.
	broken := map[string]string{"reporter": "source", "destination_service": "app-inf.default.svc.cluster.local"}
	fake.AddHistogram("istio_request_duration_milliseconds", broken, []float64{100, math.Inf(+1)}, []float64{math.NaN(), math.Inf(+1)})
	fake.Add("istio_requests_total", map[string]string{"reporter": "source", "destination_service": "app-inf.default.svc.cluster.local", "response_code": "200"}, 1000)
	// Envoy with Istio's stats tags: every request under response_code and
	// again under response_code_class; 1.5 % failed.
	const cluster = "outbound|8080||app-envoy.default.svc.cluster.local"
	les := append(append([]float64(nil), testBounds...), math.Inf(+1))
	cum, total := make([]float64, len(healthyCounts)), 0.0
	for i, c := range healthyCounts {
		total += 2 * c
		cum[i] = total
	}
	fake.AddHistogram("envoy_cluster_upstream_rq_time", map[string]string{"cluster_name": cluster}, les, cum)
	for label, values := range map[string][2]string{"response_code": {"200", "503"}, "response_code_class": {"2xx", "5xx"}} {
		fake.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cluster, label: values[0]}, 1970)
		fake.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cluster, label: values[1]}, 30)
	}

	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	mp, _ := dispenseLatency(t, now)
	run := &v1alpha1.AnalysisRun{Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: now.Add(-5 * time.Minute)}}}
	istio := func(canary, slo string, extra string) string {
		return `{"source":"istio","prometheus":{"address":"` + fake.URL + `"},"istio":{"canary":{"service":"` + canary +
			`.default.svc.cluster.local"},"stable":{"service":"app-stable.default.svc.cluster.local"}},"slo":` + slo + extra + `}`
	}
	for _, tc := range []struct {
		name, config string
		phase        v1alpha1.AnalysisPhase
		message      []string
	}{
		{"p99.9 in the +Inf bucket", istio("app-toptail", `{"p999":"1s"}`, ""), v1alpha1.AnalysisPhaseFailed,
			[]string{"Fail: p99.9 above 1.00s (in the +Inf bucket, above the top bucket bound) > 1.00s SLO", "canary p99.9 >1.00s"}},
		{"p99.9 in the +Inf bucket, limit above the top", istio("app-toptail", `{"p999":"2s"}`, ""), v1alpha1.AnalysisPhaseInconclusive,
			[]string{"Inconclusive:", "add buckets above 1.00s"}},
		{"non-finite bucket counts", istio("app-inf", `{"p99":"250ms"}`, ""), v1alpha1.AnalysisPhaseError,
			[]string{"Error:", "returned the non-finite count", "istio_request_duration_milliseconds_bucket"}},
		{"fast failures", istio("app-fastfail", `{"p99":"250ms"}`, ""), v1alpha1.AnalysisPhaseFailed,
			[]string{"Fail: error rate 5.00% > 1.00% SLO (50 of 1000, default limit", "canary p99 ", "errors 5.00%"}},
		{"tail test at low weight", istio("app-lowweight", `{}`, `,"tailTest":{}`), v1alpha1.AnalysisPhaseInconclusive,
			[]string{"tail test: canary has 300 requests in the window, needs 500 (minTailCount 5 ÷ (1−0.99))"}},
		{"ratio limit below 1", istio("app-canary", `{"ratio":{"p99":"0.8"}}`, ""), v1alpha1.AnalysisPhaseError,
			[]string{`metric "latency": invalid danki/latency config: slo.ratio.p99: 0.8 is below 1`}},
		{"object-valued duration", istio("app-canary", `{"p99":{"ms":250}}`, ""), v1alpha1.AnalysisPhaseError,
			[]string{"slo.p99: want a duration, got an object"}},
		{"text after the object", istio("app-canary", `{"p99":"250ms"}`, "} {"), v1alpha1.AnalysisPhaseError,
			[]string{"not valid JSON"}},
		{"envoy counts each request once", `{"source":"envoy","prometheus":{"address":"` + fake.URL + `"},"envoy":{"canaryCluster":"` + cluster + `"},"slo":{"maxErrorRate":"1%"}}`,
			v1alpha1.AnalysisPhaseFailed, []string{"Fail: error rate 1.50% > 1.00% SLO (30 of 2000)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mp.Run(run, latencyMetric("latency", tc.config))
			if m.Phase != tc.phase {
				t.Fatalf("phase %s, want %s: %s", m.Phase, tc.phase, m.Message)
			}
			for _, w := range tc.message {
				if !strings.Contains(m.Message, w) {
					t.Errorf("message %q does not contain %q", m.Message, w)
				}
			}
			if strings.Contains(m.Message, "\n") {
				t.Errorf("message %q is not one line", m.Message)
			}
		})
	}
}
