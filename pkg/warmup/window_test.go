package warmup

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fortio.org/fortio/periodic"

	"github.com/danki-dev/danki/pkg/config"
)

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func TestPercentileIsExactNearestRank(t *testing.T) {
	var samples []sample
	for i := 100; i >= 1; i-- { // 100 ms … 1 ms, unsorted input
		samples = append(samples, sample{latency: ms(float64(i)), ok: i%10 != 0})
	}
	w := computeWindow(samples)
	if w.P50 != ms(50) || w.P90 != ms(90) || w.P99 != ms(99) || w.Max != ms(100) || w.Count != 100 || w.Errors != 10 {
		t.Errorf("1..100 ms: got p50 %s p90 %s p99 %s max %s count %d errors %d", w.P50, w.P90, w.P99, w.Max, w.Count, w.Errors)
	}
	// With 20 values nearest-rank p99 is the maximum, p50 the 10th value.
	w = computeWindow(samples[80:]) // 20 … 1 ms
	if w.P99 != ms(20) || w.P50 != ms(10) {
		t.Errorf("1..20 ms: p99 %s p50 %s, want 20ms and 10ms", w.P99, w.P50)
	}
	if w := computeWindow(nil); w.Count != 0 || w.P99 != 0 {
		t.Errorf("empty window: %+v", w)
	}
}

func TestConfigDecodeAndValidate(t *testing.T) {
	var c Config
	err := config.Decode([]byte(`{"qsp": 10}`), &c)
	if err == nil || !strings.Contains(err.Error(), "qsp: unknown field") {
		t.Errorf("typo: err = %v, want unknown field", err)
	}
	err = config.Decode([]byte(`{"deadline": 10}`), &c)
	if err == nil || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), `"30s"`) {
		t.Errorf("bare number duration: err = %v, want the field and an example", err)
	}
	err = config.Decode([]byte(`{"deadline": "5m", "timeout": "2s", "qps": 50, "requests": [{"path": "/x"}], "maxErrorRatio": 0}`), &c)
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if c.Deadline.D() != 5*time.Minute || c.Timeout.D() != 2*time.Second || c.QPS != 50 || *c.MaxErrorRatio != 0 ||
		c.Requests[0].Method != "GET" || c.Requests[0].Weight != 1 || c.Window != DefaultWindow {
		t.Errorf("decoded+defaulted config wrong: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
	out, _ := json.Marshal(Config{Deadline: config.Duration(90 * time.Second)})
	if !strings.Contains(string(out), `"deadline":"1m30s"`) {
		t.Errorf("marshal: %s", out)
	}

	bad := Config{QPS: -1, Window: 5, StableWindows: 1, Tolerance: -1, MarkerHeader: "bad header", HealthPath: "healthz",
		Requests: []RequestSpec{{Path: "x"}, {Path: "/{{randInt 1}", Headers: map[string]string{"bad name": "v"}}}}.WithDefaults()
	err = bad.Validate()
	for _, want := range []string{"qps", "window", "stableWindows", "tolerance", "markerHeader", "healthPath", "requests[0].path", "requests[1].path", "requests[1].headers"} {
		if err == nil || !strings.Contains(err.Error(), want+":") && !strings.Contains(err.Error(), want) {
			t.Errorf("validate: error %v does not name %s", err, want)
		}
	}
}

func TestURLTargets(t *testing.T) {
	ts, err := URLTargets("urls", []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://10.0.0.5:80"})
	if err != nil || len(ts) != 2 || ts[0].URL != "http://127.0.0.1:8080" {
		t.Errorf("targets %+v err %v", ts, err)
	}
	for _, bad := range []string{"https://x:1", "http://x:1/api", "127.0.0.1:8080", "http://x:1/?a=b"} {
		if _, err := URLTargets("--url", []string{bad}); err == nil || !strings.Contains(err.Error(), "--url[0]") {
			t.Errorf("%q: err = %v, want an error naming --url[0]", bad, err)
		}
	}
}

func BenchmarkComputeWindow(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("window=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			samples := make([]sample, n)
			for i := range samples {
				samples[i] = sample{latency: time.Duration(rng.ExpFloat64() * float64(time.Millisecond)), ok: true}
			}
			b.ReportAllocs()
			for b.Loop() {
				computeWindow(samples)
			}
		})
	}
}

// BenchmarkGeneratorNext is the per-request cost of drawing and rendering a
// templated request.
func BenchmarkGeneratorNext(b *testing.B) {
	cfg := Config{Requests: []RequestSpec{
		{Path: `/items/{{randInt 1 100000}}?color={{pick "red" "green" "blue"}}`, Weight: 3, Headers: map[string]string{"X-Request-Id": "{{uuid}}"}},
		{Path: "/static/home", Weight: 1},
	}}.WithDefaults()
	set, err := newRequestSet(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	g := set.newGenerator(1, 2, &seq)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecorderReport is danki's bookkeeping per request (what periodic
// calls after every request), windows handed off included.
func BenchmarkRecorderReport(b *testing.B) {
	events := make(chan event, 16)
	go func() {
		for range events {
		}
	}()
	rec := newRecorder(100, 0, events)
	b.ReportAllocs()
	for b.Loop() {
		rec.Report(b.Context(), periodic.ThreadID(0), 0, time.Time{}, 0.0023, true, "200")
	}
	close(events)
}
