package analysis

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
)

func TestPrometheusCustomPromQLAndQueries(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	c := sampleHistogram(rng, typical, 1000)
	fake := testutil.NewPrometheus(t)
	for _, version := range []string{"v2", "v1"} {
		labels := map[string]string{"app": "checkout", "version": version}
		addHistogram(fake, "http_server_requests_seconds", labels, c, 1000)
		fake.Add("http_server_requests_seconds_count", map[string]string{"app": "checkout", "version": version, "status": "200"}, 999)
		fake.Add("http_server_requests_seconds_count", map[string]string{"app": "checkout", "version": version, "status": "500"}, 1)
	}
	fake.Add("jvm_gc_pause_seconds_sum", map[string]string{"pod": "app-v2-abc"}, 0.09)
	fake.Add("jvm_gc_pause_seconds_sum", map[string]string{"pod": "app-v1-def"}, 0.03)
	cfg := Config{
		Source:     SourcePromQL,
		Prometheus: &PrometheusConfig{Address: fake.URL},
		PromQL: &PromQLConfig{
			Canary:    `app="checkout",version="v2"`,
			Stable:    `app="checkout",version="v1"`,
			Histogram: `sum by (le) (increase(http_server_requests_seconds_bucket{<<.Selector>>}[<<.Window>>]))`,
			Requests:  `sum(increase(http_server_requests_seconds_count{<<.Selector>>}[<<.Window>>]))`,
			Errors:    `sum(increase(http_server_requests_seconds_count{<<.Selector>>,status=~"5.."}[<<.Window>>]))`,
		},
		Queries: []QueryCheck{{
			Name:     "gc-pause-fraction",
			Query:    `sum(rate(jvm_gc_pause_seconds_sum{<<.Selector>>}[<<.Window>>]))`,
			Canary:   `pod=~"app-v2.*"`,
			Stable:   `pod=~"app-v1.*"`,
			Max:      number("0.05"),
			MaxRatio: number("2"),
		}},
		Window: window("2m"),
		SLO:    SLO{P99: dur("250ms"), Ratio: RatioSLO{P50: number("1.1")}},
	}
	v := analyze(t, cfg)
	if v.Phase != Fail {
		t.Fatalf("phase %s, want Fail on GC: %s", v.Phase, v.Summary)
	}
	if !strings.Contains(v.Summary, "gc-pause-fraction 0.09 > 0.05") || !strings.Contains(v.Summary, "gc-pause-fraction canary/stable 3.00") {
		t.Errorf("summary %q does not name the GC breach", v.Summary)
	}
	// le in seconds was converted to milliseconds.
	if want := c.Quantile(0.99); v.Canary.P99 == nil || math.Abs(*v.Canary.P99-want) > 1e-9 {
		t.Errorf("canary p99 %v ms, want %v ms (le labels were seconds)", v.Canary.P99, want)
	}
	if !containsString(fake.Queries(), `sum by (le) (increase(http_server_requests_seconds_bucket{app="checkout",version="v2"}[2m]))`) {
		t.Errorf("custom histogram query not rendered as expected: %q", fake.Queries())
	}
	for _, c := range v.Checks {
		if c.Name == "p99" && c.Phase != Pass {
			t.Errorf("p99 check %s: %s", c.Phase, c.Message)
		}
	}
}
