package analysis

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
)

var quietLoadLog = slog.New(slog.DiscardHandler)

// fivePercentSlow answers in about 1 ms, and one request in 20 (chosen at random)
// 60 ms later: the "5 % of requests slower" bad version, scaled down.
func fivePercentSlow(seed uint64) func(int64, bool) time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed))
	var mu sync.Mutex
	return func(int64, bool) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.05 {
			return 61 * time.Millisecond
		}
		return time.Millisecond
	}
}

func loadAnalyzer(t *testing.T, cfg string) *Analyzer {
	t.Helper()
	c, err := ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(c, WithLogger(quietLoadLog), WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestLoadSourceVerdicts(t *testing.T) {
	good := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	slow := testutil.NewColdServer(t, nil)
	slow.Delay = fivePercentSlow(1)
	stable := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))

	cases := []struct {
		name   string
		url    string
		load   string
		slo    string
		want   Phase
		inText string
	}{
		{"good version passes", good.URL, `"count": 600, "qps": 400, "connections": 8`, `"p99": "30ms", "max": "1s"`, Pass, "p99"},
		{"5% slow fails on p99", slow.URL, `"count": 600, "qps": 400, "connections": 8`, `"p99": "30ms"`, Fail, "p99"},
		{"slow fails relative to stable", slow.URL, `"count": 600, "qps": 400, "connections": 8, "stableURLs": ["` + stable.URL + `"], "stableQPS": 400`, `"ratio": {"p99": 3}}, "minTailCount": 2, "tailTest": {`, Fail, "stable"},
		{"too few requests is inconclusive", good.URL, `"count": 50, "qps": 400`, `"p99": "30ms"`, Inconclusive, "needs 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := loadAnalyzer(t, fmt.Sprintf(`{"source": "load", "load": {"urls": [%q], "warmUp": false, %s}, "slo": {%s}}`, tc.url, tc.load, tc.slo))
			v := a.Analyze(context.Background(), time.Time{})
			if v.Phase != tc.want || !strings.Contains(v.Summary, tc.inText) {
				t.Fatalf("verdict %s: %s; want %s naming %q", v.Phase, v.Summary, tc.want, tc.inText)
			}
			if v.Canary == nil || v.Canary.Requests == nil {
				t.Fatalf("verdict has no canary figures: %+v", v)
			}
			t.Logf("%s", v.Summary)
		})
	}
	for name, s := range map[string]*testutil.ColdServer{"good": good, "slow": slow, "stable": stable} {
		if s.Load() == 0 || s.Unmarked() != 0 {
			t.Errorf("%s server: %d requests, %d without the marker header; want some, all marked", name, s.Load(), s.Unmarked())
		}
	}
}

// The measurement counts exactly: count requests spread over the pods, each
// latency in the sample (the histogram has them all, max included).
func TestLoadSourceSendsCountAndKeepsEveryLatency(t *testing.T) {
	a := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	b := testutil.NewColdServer(t, testutil.Flat(3*time.Millisecond))
	src := loadAnalyzer(t, fmt.Sprintf(`{"source": "load", "load": {"urls": [%q, %q], "count": 400, "qps": 500, "connections": 2, "warmUp": false}, "slo": {"maxErrorRate": 0}}`, a.URL, b.URL))
	s, err := src.source.Fetch(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Canary.Requests.Value
	// Up to connections-1 requests per pod in flight at the cap complete too.
	if got < 400 || got > 402 || a.Load() < 200 || b.Load() < 200 {
		t.Fatalf("sent %g requests (%d + %d); want 400 spread evenly over 2 pods", got, a.Load(), b.Load())
	}
	if n := s.Canary.Latency.Count(); n != got {
		t.Errorf("histogram holds %g latencies; want every request's (%g)", n, got)
	}
	if s.Canary.Latency.Max < 3 || s.Canary.Latency.Min < 1 || s.Canary.Latency.Min > 3 {
		t.Errorf("min %.2f ms, max %.2f ms; want ≥ 1 ms and ≥ 3 ms (the two pods)", s.Canary.Latency.Min, s.Canary.Latency.Max)
	}
}

// The stable pods serve users: they get the new pods' pace, capped by
// stableQPS in all, whatever the new pods get.
func TestLoadSourceCapsStableLoad(t *testing.T) {
	canary := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	stable := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	canary.HealthPath, stable.HealthPath = "/healthz", "/healthz"
	src := loadAnalyzer(t, fmt.Sprintf(`{"source": "load", "load": {"healthPath": "/healthz", "urls": [%q], "stableURLs": [%q], "count": 1000, "qps": 500, "stableQPS": 10, "warmUp": false}, "slo": {"p99": "1s"}}`, canary.URL, stable.URL))
	start := time.Now()
	s, err := src.source.Fetch(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start).Seconds()
	limit := 10*elapsed + 2 // the first request of the stable runner goes out at once
	if n := float64(stable.Load()); n < 1 || n > limit {
		t.Fatalf("stable got %g requests in %.1fs next to %d on the new pod; want 1 to %.0f (stableQPS 10)", n, elapsed, canary.Load(), limit)
	}
	if s.Stable == nil || s.Stable.Requests.Value != float64(stable.Load()) {
		t.Fatalf("stable side %+v; want the %d requests stable served", s.Stable, stable.Load())
	}
	t.Logf("new pod %d requests, stable %d in %.1fs (cap 10/s)", canary.Load(), stable.Load(), elapsed)
}

// A cold pod is warmed first, so the measurement judges the version at its
// plateau; a later measurement in the same process skips the warm-up.
func TestLoadSourceWarmsBeforeMeasuring(t *testing.T) {
	cold := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 80*time.Millisecond, 150))
	warmed := NewWarmedPods()
	c, err := ParseConfig(fmt.Appendf(nil, `{"source": "load", "load": {"urls": [%q], "count": 600, "qps": 400, "connections": 4}, "slo": {"p99": "20ms"}}`, cold.URL))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(c, WithLogger(quietLoadLog), WithPolicy(policy.Local()), WithWarmedPods(warmed))
	if err != nil {
		t.Fatal(err)
	}
	v := a.Analyze(context.Background(), time.Time{})
	warmup := cold.Load() - int64(*v.Canary.Requests)
	if v.Phase != Pass || warmup < 300 {
		t.Fatalf("verdict %s after %d warm-up requests: %s; want Pass after a warm-up", v.Phase, warmup, v.Summary)
	}
	before := cold.Load()
	v = a.Analyze(context.Background(), time.Time{})
	if sent := cold.Load() - before; v.Phase != Pass || sent > 605 {
		t.Fatalf("second measurement sent %d requests, %s: %s; want only the 600 measured", sent, v.Phase, v.Summary)
	}
}

func TestLoadSourceContextStopsLoadAtOnce(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	a := loadAnalyzer(t, fmt.Sprintf(`{"source": "load", "load": {"urls": [%q], "duration": "1m", "qps": 200, "warmUp": false}, "slo": {"p99": "1s"}}`, srv.URL))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Verdict)
	go func() { done <- a.Analyze(ctx, time.Time{}) }()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Load() < 50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	stopped := time.Now()
	v := <-done
	if took := time.Since(stopped); took > time.Second || v.Phase == Pass {
		t.Fatalf("after cancel: %s (%s) after %s; want no pass, within a second", v.Phase, v.Summary, took)
	}
	n := srv.Load()
	time.Sleep(200 * time.Millisecond)
	if srv.Load() != n {
		t.Fatalf("load went on after the measurement ended: %d → %d", n, srv.Load())
	}
}

func TestLoadSourceTemplatesUseAngleDelimiters(t *testing.T) {
	srv := testutil.NewColdServer(t, nil)
	srv.Record, srv.HealthPath = true, "/healthz"
	a := loadAnalyzer(t, fmt.Sprintf(`{"source": "load", "load": {"healthPath": "/healthz", "urls": [%q], "count": 100, "qps": 500, "warmUp": false,
	  "requests": [{"path": "/items/<<randInt 1 100000>>", "headers": {"X-Seq": "<<seq>>"}}]}, "slo": {"maxErrorRate": 0}}`, srv.URL))
	if v := a.Analyze(context.Background(), time.Time{}); v.Phase != Pass {
		t.Fatalf("%s: %s", v.Phase, v.Summary)
	}
	uris := map[string]bool{}
	for _, r := range srv.Requests() {
		if !strings.HasPrefix(r.URI, "/items/") || strings.Contains(r.URI, "<") || r.Header.Get("X-Seq") == "" {
			t.Fatalf("request %s (X-Seq %q): template not rendered", r.URI, r.Header.Get("X-Seq"))
		}
		uris[r.URI] = true
	}
	if len(uris) < 50 {
		t.Fatalf("%d distinct paths in 100 requests; want random ones", len(uris))
	}
}

func TestLoadConfigErrorsNameTheField(t *testing.T) {
	cases := map[string]struct{ cfg, want string }{
		"unsafe method":  {`{"urls": ["http://127.0.0.1:1"], "requests": [{"method": "POST", "path": "/orders"}]}`, "load.requests[0].method: POST may change data"},
		"no pods":        {`{}`, "load: no new pods to load; set urls, service"},
		"both ways":      {`{"urls": ["http://127.0.0.1:1"], "service": "app-preview"}`, "load.urls: set together with service"},
		"bad count":      {`{"service": "s", "count": 0.5}`, "load.count: 0.5 must be a whole number"},
		"bad qps":        {`{"service": "s", "qps": 0}`, "load.qps: 0 must be above 0"},
		"long duration":  {`{"service": "s", "duration": "20m"}`, "load.duration: 20m0s is longer than load.deadline"},
		"curly template": {`{"service": "s", "requests": [{"path": "/<<end>>"}]}`, "load.requests[0].path"},
		"bad url":        {`{"urls": ["ftp://x"]}`, "load.urls"},
		"bad mtls":       {`{"service": "s", "mtls": "strict"}`, "load.mtls"},
		"istio with url": {`{"urls": ["http://127.0.0.1:1"], "mtls": "istio"}`, "load.mtls: istio with explicit urls"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(`{"source": "load", "load": ` + tc.cfg + `, "slo": {"p99": "1s"}}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want it to contain %q", err, tc.want)
			}
		})
	}
	_, err := ParseConfig([]byte(`{"source": "load", "load": {"service": "s"}, "slo": {"ratio": {"p99": 1.2}}}`))
	if err == nil || !strings.Contains(err.Error(), "load.stableService") {
		t.Fatalf("ratio without stable: %v; want it to name load.stableService", err)
	}
	_, err = ParseConfig([]byte(`{"source": "load", "load": {"service": "s"}, "prometheus": {"address": "http://p:9090"}, "slo": {"p99": "1s"}}`))
	if err == nil || !strings.Contains(err.Error(), "prometheus: set, but source is load") {
		t.Fatalf("prometheus with load: %v", err)
	}
}

// ExactHistogram's percentiles are the requests' own: nearest-rank p99 of
// 1…1000 ms lies between the 990th and 991st value.
func TestExactHistogramKeepsEveryValue(t *testing.T) {
	var lat []time.Duration
	for i := 1000; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond, time.Duration(i)*time.Millisecond)
	}
	h := ExactHistogram(lat)
	if h.Count() != 2000 || h.Min != 1 || h.Max != 1000 || len(h.Buckets) != 1000 {
		t.Fatalf("count %g, min %g, max %g, %d buckets; want 2000, 1, 1000, 1000", h.Count(), h.Min, h.Max, len(h.Buckets))
	}
	if p := h.Quantile(0.99); p < 989 || p > 991 {
		t.Fatalf("p99 %g ms; want 990 ± 1", p)
	}
	if !slices.IsSorted(lat) {
		t.Fatal("latencies not sorted in place")
	}
	if h := ExactHistogram(nil); h.Count() != 0 {
		t.Fatalf("empty: %+v", h)
	}
}

// gRPC requests share the warm-up's request type but the load source does
// not send them yet: refused, naming the entry and the way out.
func TestLoadRefusesGRPCRequests(t *testing.T) {
	_, err := ParseConfig([]byte(`{"source": "load", "load": {"urls": ["http://10.0.0.1:9090"], "requests": [{"grpc": {"method": "shop.Catalog/GetItem"}}]}, "slo": {"p99": "1s"}}`))
	if err == nil || !strings.Contains(err.Error(), "load.requests[0].grpc") || !strings.Contains(err.Error(), "danki/warmup") {
		t.Fatalf("err = %v; want a refusal naming load.requests[0].grpc and the danki/warmup step", err)
	}
}
