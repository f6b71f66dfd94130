package analysis

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	"fortio.org/fortio/stats"
	fortiolog "fortio.org/log"

	"github.com/danki-dev/danki/pkg/policy"
)

// runFortio sends exactly n requests with real fortio to a local server that
// sleeps delay and answers 503 to every tenth request, and returns the
// result JSON fortio would write with -json.
func runFortio(t *testing.T, n int64, delay time.Duration) []byte {
	t.Helper()
	fortiolog.SetLogLevelQuiet(fortiolog.Warning)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		if calls.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	o := fhttp.HTTPRunnerOptions{RunnerOptions: periodic.RunnerOptions{
		QPS: -1, Exactly: n, NumThreads: 4, Out: io.Discard, Percentiles: []float64{50, 99},
	}}
	o.URL = srv.URL + "/"
	res, err := fhttp.RunHTTPTest(&o)
	if err != nil {
		t.Fatalf("fortio run: %v", err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestFortioRealRun(t *testing.T) {
	const delay = 3 * time.Millisecond
	data := runFortio(t, 300, delay)
	dir := t.TempDir()
	canaryFile := filepath.Join(dir, "canary.json")
	if err := os.WriteFile(canaryFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The stable result comes over HTTP, as from a warm-up step's result URL.
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(data) }))
	t.Cleanup(files.Close)

	cfg := Config{
		Source: SourceFortio,
		Fortio: &FortioConfig{Canary: canaryFile, Stable: files.URL + "/stable.json"},
		SLO:    SLO{P50: dur("10s"), Max: dur("10s"), MaxErrorRate: number("0.2"), Ratio: RatioSLO{P50: number("1.01")}},
	}
	a, err := NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	v := a.Analyze(context.Background(), time.Time{})
	if v.Phase != Pass {
		t.Fatalf("phase %s, want Pass: %s", v.Phase, v.Summary)
	}
	c := v.Canary
	if c.Count != 300 || *c.Requests != 300 || *c.Errors != 30 {
		t.Errorf("count %v requests %v errors %v, want 300/300/30 (every tenth answer 503)", c.Count, *c.Requests, *c.Errors)
	}
	floor := float64(delay) / float64(time.Millisecond)
	if c.Min == nil || *c.Min < floor || *c.P50 < floor || *c.Max < *c.P99 || *c.P99 < *c.P50 {
		t.Errorf("min %v p50 %v p99 %v max %v: want min ≥ %v ms and min ≤ p50 ≤ p99 ≤ max", *c.Min, *c.P50, *c.P99, *c.Max, floor)
	}
	if v.Window != "whole fortio run" {
		t.Errorf("window %q", v.Window)
	}

	// The same data against tight SLOs: max (raw, fortio only) and error rate fail.
	cfg.SLO = SLO{Max: dur("1ms"), MaxErrorRate: number("1%")}
	a, err = NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	v = a.Analyze(context.Background(), time.Time{})
	if v.Phase != Fail || !strings.Contains(v.Summary, "> 1.00ms SLO") || !strings.Contains(v.Summary, "error rate 10.00% > 1.00% SLO (30 of 300)") {
		t.Fatalf("phase %s, want Fail on max and error rate: %s", v.Phase, v.Summary)
	}
}

func TestFortioMissingAndBadFiles(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte("not json"), 0o600)
	empty := filepath.Join(dir, "empty.json")
	_ = os.WriteFile(empty, []byte(`{"RunType":"HTTP","RetCodes":{},"DurationHistogram":{"Count":0}}`), 0o600)
	for _, tc := range []struct {
		canary string
		phase  Phase
		want   string
	}{
		{filepath.Join(dir, "missing.json"), Error, "read canary fortio result"},
		{bad, Error, "is not fortio HTTP result JSON"},
		{empty, Inconclusive, "canary: no data, query returned no series: " + empty},
	} {
		cfg := Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: tc.canary}, SLO: SLO{P50: dur("1s")}}
		a, err := NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()))
		if err != nil {
			t.Fatal(err)
		}
		v := a.Analyze(context.Background(), time.Time{})
		if v.Phase != tc.phase || !strings.Contains(v.Summary, tc.want) {
			t.Errorf("%s: phase %s, want %s with %q: %s", tc.canary, v.Phase, tc.phase, tc.want, v.Summary)
		}
	}
}

func TestFortioHistogramKeepsGapsEmpty(t *testing.T) {
	h := stats.NewHistogram(0, 0.001) // fortio's default resolution: 1 ms
	for range 10 {
		h.Record(0.0012)
	}
	for range 10 {
		h.Record(0.0505)
	}
	got := FortioHistogram(h.Export())
	if got.Min != 1.2 || got.Max != 50.5 || got.Count() != 20 || !got.HasRaw {
		t.Fatalf("min %v max %v count %v raw %v", got.Min, got.Max, got.Count(), got.HasRaw)
	}
	// p75 lies among the 50.5 ms requests, not smeared over the empty
	// 2–50 ms gap fortio skipped.
	if p75 := got.Quantile(0.75); p75 < 45 || p75 > 50.5 {
		t.Fatalf("p75 = %v ms, want within the upper bucket (45–50.5 ms); buckets %v", p75, got.Buckets)
	}
	if p50 := got.Quantile(0.5); p50 > 2 {
		t.Fatalf("p50 = %v ms, want in the lower bucket", p50)
	}
}

// A gRPC warm-up's result holds gRPC status codes: 0 is OK, anything else
// (even a code below 100, which means "no HTTP answer" in an HTTP result) is
// an error.
func TestFortioSideGRPCCodes(t *testing.T) {
	res := &fhttp.HTTPRunnerResults{RetCodes: map[int]int64{0: 95, 5: 3, 14: 2}}
	res.RunType = "gRPC"
	side := FortioSide("canary", "f.json", res)
	if side.Requests.Value != 100 || side.Errors.Value != 5 {
		t.Errorf("gRPC result: %v requests, %v errors; want 100 and 5 (NotFound, Unavailable)", side.Requests.Value, side.Errors.Value)
	}
	res.RunType = "HTTP"
	if side := FortioSide("canary", "f.json", res); side.Errors.Value != 100 {
		t.Errorf("the same codes in an HTTP result: %v errors; want all 100 (no HTTP status)", side.Errors.Value)
	}
}
