package analysis

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
)

func TestPrometheusEnvoyQueries(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	c := sampleHistogram(rng, typical, 1000)
	const canary, stable = "outbound|8080||app-canary.default.svc.cluster.local", "outbound|8080||app-stable.default.svc.cluster.local"
	fake := testutil.NewPrometheus(t)
	addHistogram(fake, "envoy_cluster_upstream_rq_time", map[string]string{"cluster_name": canary}, c, 1)
	addHistogram(fake, "envoy_cluster_upstream_rq_time", map[string]string{"cluster_name": stable}, c, 1)
	for _, cl := range []string{canary, stable} {
		fake.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cl, "response_code": "200"}, 1000)
		fake.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cl, "response_code_class": "2xx"}, 1000)
	}
	cfg := Config{
		Source:     SourceEnvoy,
		Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy:      &EnvoyConfig{CanaryCluster: canary, StableCluster: stable},
		Window:     window("90s"),
		SLO:        SLO{P99: dur("1s"), MaxErrorRate: number("1%")},
	}
	v := analyze(t, cfg)
	if v.Phase != Pass {
		t.Fatalf("phase %s: %s", v.Phase, v.Summary)
	}
	for _, w := range []string{
		`sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{cluster_name="` + canary + `"}[1m30s]))`,
		`sum(increase(envoy_cluster_upstream_rq{cluster_name="` + canary + `",response_code!=""}[1m30s]))`,
		`sum(increase(envoy_cluster_upstream_rq{cluster_name="` + canary + `",response_code=~"5.."}[1m30s]))`,
		`sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{cluster_name="` + stable + `"}[1m30s]))`,
	} {
		if !containsString(fake.Queries(), w) {
			t.Errorf("query not sent: %s\nsent: %q", w, fake.Queries())
		}
	}
	// No errors series at all means zero errors, not missing data.
	if v.Canary.ErrorRate == nil || *v.Canary.ErrorRate != 0 {
		t.Errorf("error rate %v, want 0 when the errors query is empty", v.Canary.ErrorRate)
	}
}

// TestEnvoyRequestsCountedOnce: Istio's Envoy exports envoy_cluster_upstream_rq
// per response_code and per response_code_class; summing both halved the
// error rate (1.5 % read as 0.75 % and passed a 1 % SLO).
func TestEnvoyRequestsCountedOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	const canary = "outbound|8080||app-canary.default.svc.cluster.local"
	fake := testutil.NewPrometheus(t)
	addEnvoy(fake, canary, sampleHistogram(rng, typical, 2000), 2000, 30)
	cfg := Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy: &EnvoyConfig{CanaryCluster: canary}, Window: window("5m"), SLO: SLO{MaxErrorRate: number("1%")}}
	v := analyze(t, cfg)
	if v.Phase != Fail || v.Canary.ErrorRate == nil || math.Abs(*v.Canary.ErrorRate-0.015) > 1e-12 || !strings.Contains(v.Summary, "error rate 1.50% > 1.00% SLO (30 of 2000)") {
		t.Fatalf("%s %q (error rate %v), want Fail at 1.50%% (30 of 2000)", v.Phase, v.Summary, v.Canary.ErrorRate)
	}
}

// TestEnvoyPlainLabels: plain Envoy names its labels envoy_cluster_name and
// envoy_response_code.
func TestEnvoyPlainLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	const canary = "app-canary"
	fake := testutil.NewPrometheus(t)
	addHistogram(fake, "envoy_cluster_upstream_rq_time", map[string]string{"envoy_cluster_name": canary}, sampleHistogram(rng, typical, 1000), 1)
	fake.Add("envoy_cluster_upstream_rq", map[string]string{"envoy_cluster_name": canary, "envoy_response_code": "200"}, 995)
	fake.Add("envoy_cluster_upstream_rq", map[string]string{"envoy_cluster_name": canary, "envoy_response_code": "503"}, 5)
	cfg := Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy:  &EnvoyConfig{CanaryCluster: canary, ClusterLabel: "envoy_cluster_name", ResponseCodeLabel: "envoy_response_code"},
		Window: window("5m"), SLO: SLO{P99: dur("1s"), MaxErrorRate: number("1%")}}
	v := analyze(t, cfg)
	if v.Phase != Pass || v.Canary.ErrorRate == nil || *v.Canary.ErrorRate != 0.005 {
		t.Fatalf("%s %q, want Pass at 0.50%% errors", v.Phase, v.Summary)
	}
	if !containsString(fake.Queries(), `sum(increase(envoy_cluster_upstream_rq{envoy_cluster_name="app-canary",envoy_response_code!=""}[5m]))`) {
		t.Errorf("queries %q do not use the configured labels", fake.Queries())
	}
}
