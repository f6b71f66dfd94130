package analysis

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
)

// The users' p90 on stable, from the gate's Envoy histograms over the last
// Range; refused without a stable series; no reading from too few requests.
func TestStableTailReadsStablesP90(t *testing.T) {
	const canary, stable = "outbound|8080||app-canary.default.svc.cluster.local", "outbound|8080||app-stable.default.svc.cluster.local"
	fake := testutil.NewPrometheus(t)
	// stable: 80 requests ≤ 5 ms, 20 in (5, 10] ms → p90 = 7.5 ms (interpolated).
	fake.AddHistogram("envoy_cluster_upstream_rq_time", map[string]string{"cluster_name": stable}, []float64{1, 5, 10, 25, math.Inf(1)}, []float64{0, 80, 100, 100, 100})
	cfg := Config{
		Source:     SourceEnvoy,
		Prometheus: &PrometheusConfig{Address: fake.URL},
		Envoy:      &EnvoyConfig{CanaryCluster: canary, StableCluster: stable},
		SLO:        SLO{P99: dur("1s")},
	}
	tail, err := NewStableTail(cfg, 10*time.Second, nil, WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tail.Latency(context.Background())
	if err != nil || got != 7500*time.Microsecond {
		t.Fatalf("Latency = %v, %v; want 7.5ms", got, err)
	}
	want := `sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{cluster_name="` + stable + `"}[10s]))`
	if !containsString(fake.Queries(), want) {
		t.Errorf("query not sent: %s\nsent: %q", want, fake.Queries())
	}

	tail.MinCount = 500
	if _, err := tail.Latency(context.Background()); err == nil || !strings.Contains(err.Error(), "100 stable requests in the last 10s, fewer than 500") {
		t.Errorf("too few requests: %v", err)
	}

	cfg.Envoy = &EnvoyConfig{CanaryCluster: canary}
	if _, err := NewStableTail(cfg, 0, nil); err == nil || !strings.Contains(err.Error(), "envoy.stableCluster") {
		t.Errorf("no stable cluster: %v", err)
	}
	if _, err := NewStableTail(Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: "c.json"}, SLO: SLO{P99: dur("1s")}}, 0, nil); err == nil || !strings.Contains(err.Error(), "Prometheus") {
		t.Errorf("fortio source: %v", err)
	}
}

// Against a real Prometheus scraping an Envoy-named histogram every second:
// the users' p90 on stable reads in the fast bucket while stable is quick,
// and follows it up when stable's requests slow down.
func TestStableTailRealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Prometheus (skipped with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const canary, stable = "outbound|8080||app-canary.default.svc.cluster.local", "outbound|8080||app-stable.default.svc.cluster.local"
	reg := prometheus.NewRegistry()
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envoy_cluster_upstream_rq_time", Help: "Envoy cluster metric", Buckets: istioBuckets,
	}, []string{"cluster_name"})
	reg.MustRegister(hist)
	hist.WithLabelValues(stable)
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer exporter.Close()
	promURL := startPrometheus(t, strings.TrimPrefix(exporter.URL, "http://"))
	cfg := Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: promURL},
		Envoy: &EnvoyConfig{CanaryCluster: canary, StableCluster: stable}, SLO: SLO{P99: dur("1s")}}
	tail, err := NewStableTail(cfg, 10*time.Second, quiet, WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	// read waits for a reading that satisfies ok.
	read := func(what string, ok func(time.Duration) bool) time.Duration {
		t.Helper()
		for {
			l, err := tail.Latency(ctx)
			if err == nil && ok(l) {
				return l
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: last reading %v, %v", what, l, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// A scrape at zero first: increase() never counts what came before a
	// series' first scrape.
	api, err := newPrometheusAPI(PrometheusConfig{Address: promURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		v, _, _, err := api.Query(ctx, `count(envoy_cluster_upstream_rq_time_bucket{le="+Inf"} == 0)`, time.Now())
		if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 && vec[0].Value == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the zero series was not scraped: %v", ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 1000 {
		hist.WithLabelValues(stable).Observe(2 + float64(i%3)) // 2–4 ms
	}
	fast := read("quick stable", func(l time.Duration) bool { return l > 0 })
	if fast < time.Millisecond || fast > 5*time.Millisecond {
		t.Fatalf("quick stable's p90 read %v, want within the (1, 5] ms bucket", fast)
	}
	for range 1000 {
		hist.WithLabelValues(stable).Observe(30) // users now wait 30 ms
	}
	slow := read("slow stable", func(l time.Duration) bool { return l > 10*time.Millisecond })
	if slow > 50*time.Millisecond {
		t.Fatalf("slow stable's p90 read %v, want within the (25, 50] ms bucket", slow)
	}
	t.Logf("users' p90 on stable: %v quick, %v slow", fast, slow)
}
