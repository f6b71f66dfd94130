package rollouts

import (
	"fmt"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
)

// pluginMetrics is a plugin process's metrics on their own registry,
// served on 127.0.0.1 as `danki plugin --metrics-address` serves them; url
// is the endpoint.
func pluginMetrics(t *testing.T) (m *metrics.Plugin, url string) {
	t.Helper()
	reg, m, err := metrics.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metrics.Serve("127.0.0.1:0", reg, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return m, "http://" + srv.Addr + metrics.Path
}

// waitForMetric scrapes url until the series' value reaches want (a run's
// outcome is counted as its background job ends, just after the status
// says so) and returns the last scrape.
func waitForMetric(t *testing.T, url string, want float64, name string, labels ...string) testutil.Scrape {
	t.Helper()
	var m testutil.Scrape
	deadline := time.Now().Add(10 * time.Second)
	for {
		m = testutil.ScrapeMetrics(t, url)
		if v, _ := m.Value(name, labels...); v >= want || time.Now().After(deadline) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The danki/warmup step's warm-ups, through the real RPC plumbing, show on
// the plugin's endpoint: one warm and one not converged, their requests,
// the warm one's duration.
func TestMetricsOfTheWarmupStep(t *testing.T) {
	m, url := pluginMetrics(t)
	p := warmupStepClient(t, newTestWarmupStep(t).observe(m))

	warm := newStepLoadServer(t, stepDecay)
	res, seen := runStepUntilDone(t, p, stepRollout("cart", "h1", 0), warmupConfigJSON(t, []string{warm.URL}, nil), nil, 30*time.Second)
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("warm-up: %s %s", res.Phase, res.Message)
	}
	warmRequests := seen[len(seen)-1].Requests

	cold := newStepLoadServer(t, testutil.NeverSettling)
	res, _ = runStepUntilDone(t, p, stepRollout("shop", "h2", 0),
		warmupConfigJSON(t, []string{cold.URL}, map[string]any{"connections": 1, "maxRequests": 200, "tolerance": 0.2}), nil, 30*time.Second)
	if res.Phase != types.PhaseFailed {
		t.Fatalf("never-settling warm-up: %s %s", res.Phase, res.Message)
	}

	s := waitForMetric(t, url, 1, "danki_plugin_warmups_total", "outcome", "not_converged")
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"warm", 1}, {"not_converged", 1}, {"failed", 0}, {"stopped", 0}, {"rejected", 0}} {
		if got := s.MustValue(t, "danki_plugin_warmups_total", "outcome", c.outcome); got != c.want {
			t.Errorf("danki_plugin_warmups_total{outcome=%q} = %v, want %v", c.outcome, got, c.want)
		}
	}
	if n := s.MustValue(t, "danki_plugin_warmup_duration_seconds"); n != 1 {
		t.Errorf("danki_plugin_warmup_duration_seconds has %v observations, want 1 (the warm run)", n)
	}
	if sum, _ := s.HistogramSum("danki_plugin_warmup_duration_seconds"); sum <= 0 || sum > 30 {
		t.Errorf("the warm run took %v s by the histogram; want (0, 30]", sum)
	}
	// Every request the servers answered was sent by a warm-up; the
	// counter has at least what the warm run's status counted and the
	// 200 of the capped one.
	sent := s.MustValue(t, "danki_plugin_warmup_requests_total")
	if sent < float64(warmRequests)+200 || sent > float64(warm.Load()+cold.Load()) {
		t.Errorf("danki_plugin_warmup_requests_total = %v; want between %d (statuses) and %d (answered by the servers)",
			sent, warmRequests+200, warm.Load()+cold.Load())
	}
}

// The danki/istio router's moves, holds, breach and abort, with its gate
// reading a (fake) Prometheus, show on the plugin's endpoint.
func TestMetricsOfTheTrafficRouter(t *testing.T) {
	m, url := pluginMetrics(t)
	prom := latencyProm(t)
	f := newTRFixture(t, hostVS())
	f.impl.observe(m)
	config := func(canary string) string {
		return fmt.Sprintf(`{"virtualService": {"name": "reviews"}, "ramp": {"step": 20, "interval": "1s", "maxBreaches": 1}, "gate": %s}`,
			istioPluginConfig(prom.URL, canary))
	}
	ro := trRollout(config("app-canary"))
	if err := f.argo.Tracker().Add(ro); err != nil {
		t.Fatal(err)
	}
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // 0 → 20: move (0 is known good)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // at 20, gate passes, interval not over: hold
	// The canary turns slow: the gate fails at 20, and with maxBreaches 1
	// the ramp fails; VerifyWeight aborts the rollout.
	slow := trRollout(config("app-slow"))
	f.clock.Add(time.Second)
	mustOK(t, "SetWeight", f.plugin.SetWeight(slow, 60, nil))
	if v, err := f.plugin.VerifyWeight(slow, 60, nil); v != types.NotVerified || err.HasError() {
		t.Fatalf("VerifyWeight after the breach = %v %q", v, err.Error())
	}
	if !abortPatched(f) {
		t.Fatal("the failed ramp did not abort the rollout")
	}

	s := testutil.ScrapeMetrics(t, url)
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"danki_plugin_ramp_decisions_total", "action", "move", 1},
		{"danki_plugin_ramp_decisions_total", "action", "hold", 1},
		{"danki_plugin_ramp_decisions_total", "action", "fail", 1},
		{"danki_plugin_ramp_decisions_total", "action", "back_off", 0},
		{"danki_plugin_ramp_breaches_total", "cause", "slo", 1},
		{"danki_plugin_ramp_breaches_total", "cause", "no_verdict", 0},
		{"danki_plugin_ramp_aborts_total", "result", "aborted", 1},
		{"danki_plugin_prometheus_query_errors_total", "kind", "bad_query", 0},
	} {
		if got := s.MustValue(t, c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	if got, want := s.MustValue(t, "danki_plugin_prometheus_queries_total"), float64(len(prom.Queries())); got != want || want == 0 {
		t.Errorf("danki_plugin_prometheus_queries_total = %v; the fake Prometheus answered %v", got, want)
	}
}

// The danki/latency provider's verdicts, by phase, and the queries its
// analyses ran (one rejected by Prometheus) show on the plugin's endpoint.
func TestMetricsOfTheLatencyProvider(t *testing.T) {
	m, url := pluginMetrics(t)
	fake := latencyProm(t)
	bad := rejectingProm(t)
	f := factories[KindMetricProvider]
	plugin := f.build(quietLog, policy.Local(), m)
	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{f.mapKey: plugin}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(f.mapKey)
	if err != nil {
		t.Fatal(err)
	}
	mp := raw.(rpc.MetricProviderPlugin)
	started := metav1.NewTime(time.Now().Add(-5 * time.Minute))
	run := &v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Name: "app-7d9f-2", Namespace: "default"},
		Status: v1alpha1.AnalysisRunStatus{StartedAt: &started}}
	badPromQL := `{"source":"promql","prometheus":{"address":"` + bad.URL + `"},"promql":{"canary":"a=\"b\"","histogram":"BAD{<<.Selector>>}","requests":"BAD_requests{<<.Selector>>}","errors":"BAD_errors{<<.Selector>>}"},"slo":{"p99":"1s"}}`
	for config, want := range map[string]v1alpha1.AnalysisPhase{
		istioPluginConfig(fake.URL, "app-canary"): v1alpha1.AnalysisPhaseSuccessful,
		istioPluginConfig(fake.URL, "app-slow"):   v1alpha1.AnalysisPhaseFailed,
		istioPluginConfig(fake.URL, "app-empty"):  v1alpha1.AnalysisPhaseInconclusive,
		badPromQL:                                 v1alpha1.AnalysisPhaseError,
	} {
		if got := mp.Run(run, latencyMetric("latency", config)); got.Phase != want {
			t.Fatalf("phase %s, want %s: %s", got.Phase, want, got.Message)
		}
	}

	s := testutil.ScrapeMetrics(t, url)
	for _, phase := range []string{"successful", "failed", "inconclusive", "error"} {
		if got := s.MustValue(t, "danki_plugin_analysis_verdicts_total", "phase", phase); got != 1 {
			t.Errorf("danki_plugin_analysis_verdicts_total{phase=%q} = %v, want 1", phase, got)
		}
	}
	answered := float64(len(fake.Queries()) + len(bad.Queries()))
	if got := s.MustValue(t, "danki_plugin_prometheus_queries_total"); got != answered {
		t.Errorf("danki_plugin_prometheus_queries_total = %v; the Prometheus servers got %v", got, answered)
	}
	if got, want := s.MustValue(t, "danki_plugin_prometheus_query_errors_total", "kind", "bad_query"), float64(len(bad.Queries())); got != want || want == 0 {
		t.Errorf("danki_plugin_prometheus_query_errors_total{kind=bad_query} = %v; the rejecting Prometheus got %v queries", got, want)
	}
	// Nothing here ran a warm-up or a ramp: their series stay at zero.
	if got := s.MustValue(t, "danki_plugin_warmups_total", "outcome", "warm"); got != 0 {
		t.Errorf("danki_plugin_warmups_total{outcome=warm} = %v in a metric provider", got)
	}
}
