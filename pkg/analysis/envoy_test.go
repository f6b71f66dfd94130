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

// addInboundPod adds one pod sidecar's inbound-cluster series as the lab's
// and Istio's Prometheus store them: Envoy's labels (cluster_name,
// response_code / response_code_class) plus the target labels service
// discovery gives the pod (namespace, pod, rollouts_pod_template_hash).
func addInboundPod(p *testutil.Prometheus, pod, hash string, h Histogram, requests, errors float64) {
	target := map[string]string{"namespace": "default", "pod": pod, "rollouts_pod_template_hash": hash, "job": "envoy-stats"}
	with := func(extra map[string]string) map[string]string {
		l := map[string]string{"cluster_name": "inbound|8080||"}
		for _, m := range []map[string]string{target, extra} {
			for k, v := range m {
				l[k] = v
			}
		}
		return l
	}
	addHistogram(p, "envoy_cluster_upstream_rq_time", with(nil), h, 1)
	for _, s := range []struct {
		label, value string
		n            float64
	}{
		{"response_code", "200", requests - errors}, {"response_code", "503", errors},
		{"response_code_class", "2xx", requests - errors}, {"response_code_class", "5xx", errors},
	} {
		p.Add("envoy_cluster_upstream_rq", with(map[string]string{s.label: s.value}), s.n)
	}
}

// TestEnvoyInboundPerPod: every sidecar has the same inbound cluster
// (inbound|8080||), so the canary's and stable's server-side latency are
// told apart by the pods' hash labels. Two canary pods, 2× slower, and
// three stable pods: each side sums its own pods only, and the slow canary
// fails the ratio that the gateway's one merged series would have hidden.
func TestEnvoyInboundPerPod(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	slow := typical
	slow.scale = 2
	fake := testutil.NewPrometheus(t)
	var canaryHist, stableHist Histogram
	for i, pod := range []string{"app-c4n-1", "app-c4n-2"} {
		h := sampleHistogram(rng, slow, 600)
		addInboundPod(fake, pod, "c4n", h, 600, float64(i)) // 1 error in 1,200
		canaryHist = addHistograms(canaryHist, h)
	}
	for _, pod := range []string{"app-st4-1", "app-st4-2", "app-st4-3"} {
		h := sampleHistogram(rng, typical, 1000)
		addInboundPod(fake, pod, "st4", h, 1000, 0)
		stableHist = addHistograms(stableHist, h)
	}
	cfg := Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy: &EnvoyConfig{Cluster: "inbound|8080||", Labels: map[string]string{"namespace": "default"},
			CanaryLabels: map[string]string{"rollouts_pod_template_hash": "c4n"},
			StableLabels: map[string]string{"rollouts_pod_template_hash": "st4"}},
		Window: window("5m"), SLO: SLO{Ratio: RatioSLO{P99: number("1.5")}, MaxErrorRate: number("1%")}}
	v := analyze(t, cfg)
	if v.Phase != Fail || !strings.Contains(v.Summary, "p99 canary/stable") {
		t.Fatalf("%s %q, want Fail on the 2× slower canary's p99 ratio", v.Phase, v.Summary)
	}
	if v.Canary.Count != 1200 || v.Stable == nil || v.Stable.Count != 3000 {
		t.Fatalf("counts canary %v stable %v, want 1200 (2 canary pods) and 3000 (3 stable pods)", v.Canary.Count, v.Stable)
	}
	if v.Canary.ErrorRate == nil || math.Abs(*v.Canary.ErrorRate-1.0/1200) > 1e-12 {
		t.Errorf("canary error rate %v, want 1/1200 (each request counted once)", v.Canary.ErrorRate)
	}
	for name, got := range map[string]struct {
		side *float64
		want float64
	}{
		"canary p99": {v.Canary.Percentile("p99"), canaryHist.Quantile(0.99)},
		"stable p99": {v.Stable.Percentile("p99"), stableHist.Quantile(0.99)},
	} {
		if got.side == nil || math.Abs(*got.side-got.want) > 1e-9*got.want {
			t.Errorf("%s = %v, want %.4f ms (that side's pods' buckets summed)", name, got.side, got.want)
		}
	}
	for _, w := range []string{
		`sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{cluster_name="inbound|8080||",namespace="default",rollouts_pod_template_hash="c4n"}[5m]))`,
		`sum(increase(envoy_cluster_upstream_rq{cluster_name="inbound|8080||",namespace="default",rollouts_pod_template_hash="st4",response_code!=""}[5m]))`,
	} {
		if !containsString(fake.Queries(), w) {
			t.Errorf("query not sent: %s\nsent: %q", w, fake.Queries())
		}
	}

	// The same pods selected by the cluster alone (what one Service-level
	// series is): both versions merged, 4,200 requests, no side to compare.
	merged := analyze(t, Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy: &EnvoyConfig{CanaryCluster: "inbound|8080||"}, Window: window("5m"), SLO: SLO{MaxErrorRate: number("1%")}})
	if merged.Canary.Count != 4200 {
		t.Errorf("by cluster alone: %v requests, want all 5 pods' 4200", merged.Canary.Count)
	}
}

// TestEnvoyStableLabelsWithStableCluster: per-side labels also add to
// separate clusters (e.g. two gateways' clusters told apart by job).
func TestEnvoyStableLabelsWithStableCluster(t *testing.T) {
	q := EnvoyConfig{CanaryCluster: "c", StableCluster: "s", CanaryLabels: map[string]string{"job": "a"}, StableLabels: map[string]string{"job": "b"}}.withDefaults().queries()
	if q.canary != `cluster_name="c",job="a"` || q.stable != `cluster_name="s",job="b"` || !q.hasStable {
		t.Fatalf("selectors %q / %q (stable %v)", q.canary, q.stable, q.hasStable)
	}
	// StableLabels alone (with cluster) make a stable side.
	if q := (EnvoyConfig{Cluster: "inbound|8080||", CanaryLabels: map[string]string{"h": "1"}, StableLabels: map[string]string{"h": "2"}}).withDefaults().queries(); !q.hasStable || q.stable != `cluster_name="inbound|8080||",h="2"` {
		t.Fatalf("stable %q (%v)", q.stable, q.hasStable)
	}
}

// TestEnvoyConfigErrors: every mistake in the per-side selection names its
// field and the fix; the configs that were valid stay valid.
func TestEnvoyConfigErrors(t *testing.T) {
	const prom = `"prometheus":{"address":"http://p:9090"}`
	mk := func(envoy string) string {
		return `{"source":"envoy",` + prom + `,"envoy":` + envoy + `,"slo":{"p99":"1s"}}`
	}
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"nothing", mk(`{}`), []string{"envoy.canaryCluster: missing", `cluster: "inbound|8080||"`}},
		{"cluster and canaryCluster", mk(`{"cluster":"inbound|8080||","canaryCluster":"c","canaryLabels":{"h":"1"}}`), []string{"envoy.cluster: set together with canaryCluster/stableCluster"}},
		{"cluster without canary labels", mk(`{"cluster":"inbound|8080||"}`), []string{"envoy.canaryLabels: missing", "podTemplateHashValue: Latest"}},
		{"stable labels without a stable cluster", mk(`{"canaryCluster":"c","stableLabels":{"h":"2"}}`), []string{"envoy.stableLabels: set without a cluster for stable", "envoy.stableCluster"}},
		{"empty hash", mk(`{"cluster":"inbound|8080||","canaryLabels":{"rollouts_pod_template_hash":""},"stableLabels":{"rollouts_pod_template_hash":"b"}}`), []string{"envoy.canaryLabels: rollouts_pod_template_hash is empty", "every series without"}},
		{"cluster label as side label", mk(`{"cluster":"inbound|8080||","canaryLabels":{"cluster_name":"x"}}`), []string{"envoy.canaryLabels: cluster_name is the cluster label"}},
		{"label twice", mk(`{"cluster":"inbound|8080||","labels":{"h":"1"},"canaryLabels":{"h":"2"}}`), []string{"envoy.canaryLabels: h is also in envoy.labels"}},
		{"bad label name", mk(`{"cluster":"inbound|8080||","canaryLabels":{"rollouts-pod-template-hash":"a"}}`), []string{"envoy.canaryLabels", `"rollouts-pod-template-hash" is not a Prometheus label name`}},
		{"ratio without stable", `{"source":"envoy",` + prom + `,"envoy":{"cluster":"inbound|8080||","canaryLabels":{"h":"1"}},"slo":{"ratio":{"p99":1.2}}}`, []string{"slo.ratio.p99", "envoy.stableCluster (or stableLabels with envoy.cluster)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			if err == nil {
				t.Fatalf("accepted %s", tc.config)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
	for _, ok := range []string{
		mk(`{"canaryCluster":"c"}`),
		mk(`{"canaryCluster":"c","stableCluster":"s","labels":{"job":"gw"}}`),
		mk(`{"canaryCluster":"c","stableCluster":"c","canaryLabels":{"h":"1"},"stableLabels":{"h":"2"}}`),
		mk(`{"cluster":"inbound|8080||","canaryLabels":{"rollouts_pod_template_hash":"a"},"stableLabels":{"rollouts_pod_template_hash":"b"},"labels":{"namespace":"default"}}`),
		mk(`{"cluster":"inbound|8080||","canaryLabels":{"rollouts_pod_template_hash":"a"}}`),
	} {
		if _, err := ParseConfig([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
