package analysis

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

func f64(v float64) *float64 { return &v }

// istioService is the FQDN of an Istio test service.
func istioService(name string) string { return name + ".default.svc.cluster.local" }

// addIstio adds one version's Istio standard metrics, as the gateway
// (reporter="source") reports them for the Service it routed to: the
// latency histogram, and its requests split into 200s and 503s (errors nil:
// no 503 series at all; requests nil: no request series).
func addIstio(p *testutil.Prometheus, service string, h Histogram, requests, errors *float64) {
	labels := map[string]string{"reporter": "source", "destination_service": service}
	addHistogram(p, "istio_request_duration_milliseconds", labels, h, 1)
	code := func(c string) map[string]string {
		return map[string]string{"reporter": "source", "destination_service": service, "response_code": c}
	}
	if requests != nil {
		ok := *requests
		if errors != nil {
			ok -= *errors
		}
		p.Add("istio_requests_total", code("200"), ok)
	}
	if errors != nil {
		p.Add("istio_requests_total", code("503"), *errors)
	}
}

// addEnvoy adds one upstream cluster's Envoy metrics as Envoy with Istio's
// stats tags exports them: envoy_cluster_upstream_rq once per response_code
// and once more per response_code_class, under one name.
func addEnvoy(p *testutil.Prometheus, cluster string, h Histogram, requests, errors float64) {
	addHistogram(p, "envoy_cluster_upstream_rq_time", map[string]string{"cluster_name": cluster}, h, 1)
	for _, s := range []struct {
		label, value string
		n            float64
	}{
		{"response_code", "200", requests - errors}, {"response_code", "503", errors},
		{"response_code_class", "2xx", requests - errors}, {"response_code_class", "5xx", errors},
	} {
		p.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cluster, s.label: s.value}, s.n)
	}
}

// addHistogram adds h's buckets (ms) as <name>_bucket series, with le
// divided by leScale (1000 for a histogram in seconds).
func addHistogram(p *testutil.Prometheus, name string, labels map[string]string, h Histogram, leScale float64) {
	bounds, counts := make([]float64, len(h.Buckets)), make([]float64, len(h.Buckets))
	for i, b := range h.Buckets {
		bounds[i], counts[i] = b.UpperBound/leScale, b.Count
	}
	p.AddHistogram(name, labels, bounds, counts)
}

func istioConfig(address string) Config {
	return Config{
		Source:     SourceIstio,
		Prometheus: &PrometheusConfig{Address: address},
		Istio: &IstioConfig{
			Canary: IstioSelector{Service: "app-canary.default.svc.cluster.local"},
			Stable: &IstioSelector{Service: "app-stable.default.svc.cluster.local"},
		},
		Window:   window("5m"),
		SLO:      SLO{P99: dur("250ms"), MaxErrorRate: number("0.01"), Ratio: RatioSLO{P99: number("1.5")}},
		TailTest: &TailTestConfig{},
	}
}

func analyze(t *testing.T, c Config) Verdict {
	t.Helper()
	a, err := NewAnalyzer(c, WithLogger(quiet), WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	return a.Analyze(context.Background(), time.Time{})
}

// healthyIstio serves 2,000 canary requests (4 failed) from canaryDist and
// 18,000 stable requests (20 failed) from typical; it returns the canary's
// histogram.
func healthyIstio(p *testutil.Prometheus, rng *rand.Rand, canaryDist lognormal) Histogram {
	c := sampleHistogram(rng, canaryDist, 2000)
	s := sampleHistogram(rng, typical, 18000)
	addIstio(p, istioService("app-canary"), c, f64(c.Count()), f64(4))
	addIstio(p, istioService("app-stable"), s, f64(s.Count()), f64(20))
	return c
}

func TestPrometheusSlowCanaryFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	slow := typical
	slow.scale = 2
	fake := testutil.NewPrometheus(t)
	healthyIstio(fake, rng, slow)
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Fail {
		t.Fatalf("phase %s, want Fail: %s", v.Phase, v.Summary)
	}
	for _, w := range []string{"p99 canary/stable", "> 1.5", "tail test", "canary's tail is heavier"} {
		if !strings.Contains(v.Summary, w) {
			t.Errorf("summary %q does not name the breach %q", v.Summary, w)
		}
	}
}

func TestPrometheusUnreachableIsError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there any more
	v := analyze(t, istioConfig(addr))
	if v.Phase != Error {
		t.Fatalf("phase %s, want Error: %s", v.Phase, v.Summary)
	}
	if !strings.Contains(v.Summary, "unreachable") || !strings.Contains(v.Summary, addr) || !strings.Contains(v.Summary, "check prometheus.address") {
		t.Errorf("summary %q does not explain the unreachable Prometheus", v.Summary)
	}
	if v.Err() == nil {
		t.Error("Err() is nil for an Error verdict")
	}
}

func TestPrometheusBadQueryIsError(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	fake.Respond(func(q string) (int, string) {
		return http.StatusBadRequest, `{"status":"error","errorType":"bad_data","error":"1:44: parse error: unexpected \"}\" in label matching"}`
	})
	cfg := istioConfig(fake.URL)
	v := analyze(t, cfg)
	if v.Phase != Error {
		t.Fatalf("phase %s, want Error: %s", v.Phase, v.Summary)
	}
	for _, w := range []string{"prometheus rejected query", "istio_request_duration_milliseconds_bucket", "parse error", "fix the PromQL"} {
		if !strings.Contains(v.Summary, w) {
			t.Errorf("summary %q does not contain %q", v.Summary, w)
		}
	}
}

func TestPrometheusServerErrorIsError(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	fake.Respond(func(q string) (int, string) {
		return http.StatusServiceUnavailable, `{"status":"error","errorType":"unavailable","error":"TSDB not ready"}`
	})
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Error || !strings.Contains(v.Summary, "TSDB not ready") || !strings.Contains(v.Summary, "and 5 more queries failed") {
		t.Fatalf("phase %s, want Error naming the cause: %s", v.Phase, v.Summary)
	}
}

func TestPrometheusTimeoutIsError(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	fake.Delay(5 * time.Second)
	cfg := istioConfig(fake.URL)
	cfg.Timeout = config.Duration(200 * time.Millisecond)
	start := time.Now()
	v := analyze(t, cfg)
	if v.Phase != Error || !strings.Contains(v.Summary, "no answer within 200ms") {
		t.Fatalf("phase %s, want Error on timeout: %s", v.Phase, v.Summary)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("analysis took %s despite the 200ms timeout", d)
	}
}

func TestPrometheusEmptyResultIsInconclusiveNamingTheQuery(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	s := sampleHistogram(rng, typical, 9000)
	fake := testutil.NewPrometheus(t)
	// no canary series at all: e.g. the canary selector is wrong, or no traffic yet
	addIstio(fake, istioService("app-stable"), s, f64(9000), nil)
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Inconclusive {
		t.Fatalf("phase %s, want Inconclusive: %s", v.Phase, v.Summary)
	}
	for _, w := range []string{
		"no data, query returned no series",
		`sum by (le) (increase(istio_request_duration_milliseconds_bucket{destination_service="app-canary.default.svc.cluster.local",reporter="source"}[5m]))`,
		`sum(increase(istio_requests_total{destination_service="app-canary.default.svc.cluster.local",reporter="source"}[5m]))`,
	} {
		if !strings.Contains(v.Summary, w) {
			t.Errorf("summary %q does not contain %q", v.Summary, w)
		}
	}
}

func TestPrometheusRatioWithStableMissingIsInconclusive(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	c := sampleHistogram(rng, typical, 2000)
	fake := testutil.NewPrometheus(t)
	addIstio(fake, istioService("app-canary"), c, f64(2000), nil)
	cfg := istioConfig(fake.URL)
	cfg.SLO = SLO{Ratio: RatioSLO{P99: number("1.2")}}
	cfg.TailTest = nil
	v := analyze(t, cfg)
	if v.Phase != Inconclusive {
		t.Fatalf("phase %s, want Inconclusive: %s", v.Phase, v.Summary)
	}
	want := `p99 ratio: stable: no data, query returned no series: sum by (le) (increase(istio_request_duration_milliseconds_bucket{destination_service="app-stable.default.svc.cluster.local",reporter="source"}[5m]))`
	if !strings.Contains(v.Summary, want) {
		t.Errorf("summary %q\ndoes not contain %q", v.Summary, want)
	}
}

func TestPrometheusZeroTrafficIsInconclusive(t *testing.T) {
	// The series exist but nothing happened in the window: counts are 0.
	zero := cumulative(istioBuckets, make([]float64, len(istioBuckets)+1))
	fake := testutil.NewPrometheus(t)
	addIstio(fake, istioService("app-canary"), zero, f64(0), nil)
	addIstio(fake, istioService("app-stable"), zero, f64(0), nil)
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Inconclusive || !strings.Contains(v.Summary, "canary has 0 requests in the window") {
		t.Fatalf("phase %s, want Inconclusive on zero traffic: %s", v.Phase, v.Summary)
	}
}

func TestPrometheusSeveralSeriesIsError(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	fake.Respond(func(q string) (int, string) {
		if strings.Contains(q, "_bucket") {
			return 200, testutil.VectorJSON(testutil.SampleJSON(map[string]string{"le": "+Inf"}, 10))
		}
		return 200, testutil.VectorJSON(testutil.SampleJSON(map[string]string{"pod": "a"}, 1), testutil.SampleJSON(map[string]string{"pod": "b"}, 2))
	})
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Error || !strings.Contains(v.Summary, "returned 2 series") {
		t.Fatalf("phase %s, want Error: %s", v.Phase, v.Summary)
	}
}

func TestPrometheusHistogramWithoutLeIsError(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	fake.Respond(func(q string) (int, string) {
		return 200, testutil.VectorJSON(testutil.SampleJSON(map[string]string{"pod": "a"}, 1))
	})
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Error || !strings.Contains(v.Summary, "without an le label") {
		t.Fatalf("phase %s, want Error: %s", v.Phase, v.Summary)
	}
}

func TestPrometheusBearerToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	fake := testutil.NewPrometheus(t)
	healthyIstio(fake, rng, typical)

	cfg := istioConfig(fake.URL)
	cfg.Prometheus.BearerToken = "inline-token"
	if v := analyze(t, cfg); v.Phase == Error {
		t.Fatal(v.Summary)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = istioConfig(fake.URL)
	cfg.Prometheus.BearerTokenFile = tokenFile
	if v := analyze(t, cfg); v.Phase == Error {
		t.Fatal(v.Summary)
	}
	seen := map[string]int{}
	for _, a := range fake.Authorizations() {
		seen[a]++
	}
	if seen["Bearer inline-token"] != 6 || seen["Bearer file-token"] != 6 {
		t.Fatalf("Authorization headers seen %v, want 6 inline and 6 from the file", seen)
	}
}

func TestPrometheusTLS(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	fake := &testutil.Prometheus{}
	healthyIstio(fake, rng, typical)
	srv := httptest.NewUnstartedServer(fake)         // 127.0.0.1, self-signed
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // expected handshake failures
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := istioConfig(srv.URL)
	if v := analyze(t, cfg); v.Phase != Error || !strings.Contains(v.Summary, "TLS verification failed") || !strings.Contains(v.Summary, "prometheus.caFile") {
		t.Errorf("without the CA: phase %s, want Error about the certificate: %s", v.Phase, v.Summary)
	}
	cfg = istioConfig(srv.URL)
	cfg.Prometheus.CAFile = caFile
	if v := analyze(t, cfg); v.Phase != Pass {
		t.Errorf("with caFile: phase %s: %s", v.Phase, v.Summary)
	}
	cfg = istioConfig(srv.URL)
	cfg.Prometheus.InsecureSkipVerify = true
	if v := analyze(t, cfg); v.Phase != Pass {
		t.Errorf("with insecureSkipVerify: phase %s: %s", v.Phase, v.Summary)
	}
	cfg = istioConfig(srv.URL)
	cfg.Prometheus.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := NewAnalyzer(cfg, WithPolicy(policy.Local())); err == nil || !strings.Contains(err.Error(), "prometheus.caFile") {
		t.Errorf("missing CA file: err %v, want one naming prometheus.caFile", err)
	}
}

func TestPrometheusCumulativeWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	fake := testutil.NewPrometheus(t)
	healthyIstio(fake, rng, typical)
	cfg := istioConfig(fake.URL)
	cfg.Window = Window{}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	a, err := NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if v := a.Analyze(context.Background(), time.Time{}); v.Phase != Error || !strings.Contains(v.Summary, "needs the time the analysis started") {
		t.Fatalf("cumulative without a start: %s", v.Summary)
	}
	v := a.Analyze(context.Background(), now.Add(-(3*time.Minute + 200*time.Millisecond)))
	if v.Phase != Pass || v.Window != "3m1s (cumulative)" {
		t.Fatalf("phase %s window %q: %s", v.Phase, v.Window, v.Summary)
	}
	if !strings.Contains(fake.Queries()[0], "[3m1s]") {
		t.Errorf("query %q does not use the cumulative range [3m1s]", fake.Queries()[0])
	}
}

// TestPrometheusCumulativeWindowClamped: a cumulative window from a start
// long past (a gate's gateSince of 1970, forged or zeroed in the ramp
// state) queries at most the longest window, not 56 years of every series.
func TestPrometheusCumulativeWindowClamped(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	fake := testutil.NewPrometheus(t)
	healthyIstio(fake, rng, typical)
	cfg := istioConfig(fake.URL)
	cfg.Window = CumulativeWindow()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	a, err := NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()), WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	v := a.Analyze(context.Background(), time.Unix(1, 0))
	if v.Phase != Pass || !strings.HasPrefix(v.Window, "90d (cumulative, clamped from ") {
		t.Fatalf("phase %s window %q: %s", v.Phase, v.Window, v.Summary)
	}
	for _, q := range fake.Queries() {
		if !strings.Contains(q, "[90d]") {
			t.Errorf("query %q does not use the clamped range [90d]", q)
		}
	}
	// Just inside the bound, the window is what it says.
	v = a.Analyze(context.Background(), now.Add(-maxWindow+time.Hour))
	if v.Window != promRange(maxWindow-time.Hour)+" (cumulative)" {
		t.Errorf("window %q inside the bound, want %s (cumulative)", v.Window, promRange(maxWindow-time.Hour))
	}
}

var quiet = slog.New(slog.DiscardHandler)

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
