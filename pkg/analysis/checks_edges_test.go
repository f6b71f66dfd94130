package analysis

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

// customBuckets are the finer Istio buckets docs/latency.md recommends; the
// top finite bound is 1000 ms.
var customBuckets = []float64{1, 2, 5, 10, 15, 20, 25, 35, 50, 75, 100, 150, 250, 500, 1000}

// slowTail is 10,000 requests, 9,970 fast and 30 taking 5 s: p99.9's rank
// (9,990) lies in the +Inf bucket of customBuckets.
func slowTail() Histogram {
	counts := make([]float64, len(customBuckets)+1)
	counts[6] = 9970           // ≤ 25 ms
	counts[len(counts)-1] = 30 // 5 s, above the top bound
	return cumulative(customBuckets, counts)
}

func checkNamed(t *testing.T, v Verdict, name string) Check {
	t.Helper()
	for _, c := range v.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, v.Checks)
	return Check{}
}

// TestTopBucketNeverPasses: a percentile whose rank lies in +Inf is only
// known to be above the top bound: a limit at or below it fails, one above
// it is Inconclusive — never Pass (it passed at 1s with top 1000 ms).
func TestTopBucketNeverPasses(t *testing.T) {
	for _, tc := range []struct {
		limit string
		phase Phase
		want  string
	}{
		{"1s", Fail, "p99.9 above 1.00s (in the +Inf bucket, above the top bucket bound) > 1.00s SLO"},
		{"500ms", Fail, "p99.9 above 1.00s"},
		{"2s", Inconclusive, "the histogram cannot tell whether it is ≤ 2.00s; add buckets above 1.00s"},
	} {
		r := mustRules(t, promConfig(SLO{P999: dur(tc.limit)}))
		v := evaluate(r, &Sample{Canary: *side("canary", slowTail())}, "5m")
		c := checkNamed(t, v, "p999")
		if c.Phase != tc.phase || !strings.Contains(c.Message, tc.want) {
			t.Errorf("p999 %s: %s %q, want %s with %q", tc.limit, c.Phase, c.Message, tc.phase, tc.want)
		}
		if v.Phase == Pass {
			t.Errorf("p999 %s: the verdict passed a p99.9 of 5 s: %s", tc.limit, v.Summary)
		}
		if v.Canary.P999 != nil || v.Canary.AboveMs["p999"] != 1000 || !strings.Contains(v.Summary, "canary p99.9 >1.00s") {
			t.Errorf("p999 %s: canary p999 %v aboveMs %v summary %q; want no number, above 1000 ms, shown as >1.00s", tc.limit, v.Canary.P999, v.Canary.AboveMs, v.Summary)
		}
	}
}

// TestTopBucketRatio: the same for ratio limits.
func TestTopBucketRatio(t *testing.T) {
	stableCounts := make([]float64, len(customBuckets)+1)
	stableCounts[6], stableCounts[13] = 9985, 15 // p99.9 in (250, 500]
	stable := cumulative(customBuckets, stableCounts)
	for _, tc := range []struct {
		name           string
		canary, stable Histogram
		limit          string
		phase          Phase
		want           string
	}{
		{"canary above top, ratio certainly above", slowTail(), stable, "1.5", Fail, "p99.9 canary/stable above 3.00 (canary above 1.00s, the top bucket bound / 333ms) > 1.5"},
		{"canary above top, cannot tell", slowTail(), stable, "4", Inconclusive, "cannot tell whether canary/stable ≤ 4"},
		{"both above top", slowTail(), slowTail(), "1.5", Inconclusive, "both above the top bucket bound"},
		{"stable above top, canary certainly faster", stable, slowTail(), "1.2", Pass, "canary/stable below"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, promConfig(SLO{Ratio: RatioSLO{P999: number(tc.limit)}}))
			v := evaluate(r, &Sample{Canary: *side("canary", tc.canary), Stable: side("stable", tc.stable)}, "5m")
			c := checkNamed(t, v, "ratio:p999")
			if c.Phase != tc.phase || !strings.Contains(c.Message, tc.want) {
				t.Errorf("%s %q, want %s with %q", c.Phase, c.Message, tc.phase, tc.want)
			}
		})
	}
}

// TestNonFiniteDataIsError: +Inf or NaN counts made the tail test compute
// NaN and pass; they are an Error naming the series.
func TestNonFiniteDataIsError(t *testing.T) {
	cfg := promConfig(SLO{P99: dur("250ms")})
	cfg.TailTest = &TailTestConfig{}
	r := mustRules(t, cfg)
	rng := rand.New(rand.NewPCG(71, 72))
	good := sampleHistogram(rng, typical, 9000)
	for _, bad := range []float64{math.Inf(+1), math.NaN()} {
		broken := sampleHistogram(rng, typical, 1000)
		broken.Buckets[len(broken.Buckets)-1].Count = bad
		v := evaluate(r, &Sample{Canary: *side("canary", broken), Stable: side("stable", good)}, "5m")
		if v.Phase != Error || !strings.Contains(v.Summary, `canary latency histogram has a non-finite count`) || !strings.Contains(v.Summary, `le="+Inf"`) || !strings.Contains(v.Summary, "test:canary") {
			t.Errorf("count %v: %s %q, want Error naming the bucket and its source", bad, v.Phase, v.Summary)
		}
	}

	// Through Prometheus: the series is named.
	fake := testutil.NewPrometheus(t)
	addIstio(fake, istioService("app-stable"), good, f64(9000), nil)
	fake.Add("istio_request_duration_milliseconds_bucket", map[string]string{"reporter": "source", "destination_service": istioService("app-canary"), "le": "100"}, math.NaN())
	fake.Add("istio_request_duration_milliseconds_bucket", map[string]string{"reporter": "source", "destination_service": istioService("app-canary"), "le": "+Inf"}, math.Inf(+1))
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Error || !strings.Contains(v.Summary, "returned the non-finite count") || !strings.Contains(v.Summary, "istio_request_duration_milliseconds_bucket") {
		t.Errorf("non-finite buckets from Prometheus: %s %q, want Error naming the query", v.Phase, v.Summary)
	}
}

// TestNaNResultSaysNaN: a NaN result (0/0) is reported as NaN, not as "no
// series".
func TestNaNResultSaysNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	fake := testutil.NewPrometheus(t)
	c := sampleHistogram(rng, typical, 2000)
	addHistogram(fake, "istio_request_duration_milliseconds", map[string]string{"reporter": "source", "destination_service": istioService("app-canary")}, c, 1)
	fake.Add("istio_requests_total", map[string]string{"reporter": "source", "destination_service": istioService("app-canary"), "response_code": "200"}, math.NaN())
	cfg := istioConfig(fake.URL)
	cfg.Istio.Stable, cfg.TailTest, cfg.SLO = nil, nil, SLO{P99: dur("1s")}
	v := analyze(t, cfg)
	if v.Phase != Inconclusive || !strings.Contains(v.Summary, "error rate: canary: query returned NaN: sum(increase(istio_requests_total") || strings.Contains(v.Summary, "no series") {
		t.Errorf("NaN requests: %s %q, want Inconclusive saying NaN", v.Phase, v.Summary)
	}
	if ms(math.NaN()) != "NaN" {
		t.Errorf("ms(NaN) = %q", ms(math.NaN()))
	}
}

// TestLatencySLOsAreJudgedWithErrors: fast 503s make a failing canary look
// fast; latency SLOs without slo.maxErrorRate get the default 1 %.
func TestLatencySLOsAreJudgedWithErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(79, 80))
	r := mustRules(t, promConfig(SLO{P99: dur("250ms")}))
	c := side("canary", sampleHistogram(rng, typical, 2000))
	c.Errors = Measured{From: "errors", Value: 100, Found: true} // 5 % fast failures
	v := evaluate(r, &Sample{Canary: *c}, "5m")
	ch := checkNamed(t, v, "error-rate")
	if v.Phase != Fail || ch.Limit != DefaultMaxErrorRate || !strings.Contains(ch.Message, "error rate 5.00% > 1.00% SLO (100 of 2000, default limit") {
		t.Fatalf("%s %q, want Fail on the default error rate", v.Phase, v.Summary)
	}
	if !strings.Contains(v.Summary, "canary p99 ") || !strings.Contains(v.Summary, "errors 5.00%") {
		t.Errorf("summary %q does not show both latency and errors", v.Summary)
	}
	// An explicit limit wins.
	r = mustRules(t, promConfig(SLO{P99: dur("250ms"), MaxErrorRate: number("10%")}))
	if v := evaluate(r, &Sample{Canary: *c}, "5m"); v.Phase != Pass {
		t.Errorf("explicit maxErrorRate 10%%: %s", v.Summary)
	}
	// A source that cannot count errors cannot judge latency alone.
	_, err := ParseConfig([]byte(`{"source":"promql","prometheus":{"address":"http://p:9090"},"promql":{"canary":"a=\"b\"","histogram":"x{<<.Selector>>}"},"slo":{"p99":"1s"}}`))
	if err == nil || !strings.Contains(err.Error(), "promql.requests: missing; latency SLOs are judged together with the error rate") || !strings.Contains(err.Error(), "promql.errors: missing") {
		t.Errorf("promql latency SLO without requests/errors: %v", err)
	}
}

// TestEmptySampleIsError: a custom Source returning an empty (or nil)
// sample, or too few query values, is an Error, not a panic.
func TestEmptySampleIsError(t *testing.T) {
	cfg := promConfig(SLO{P99: dur("250ms")})
	cfg.Queries = []QueryCheck{{Name: "gc", Query: "up", Max: number("1")}}
	rng := rand.New(rand.NewPCG(81, 82))
	for _, tc := range []struct {
		name   string
		sample *Sample
		want   string
	}{
		{"empty", &Sample{}, "returned an empty sample"},
		{"nil", nil, "returned no sample (nil)"},
		{"missing query values", &Sample{Canary: *side("canary", sampleHistogram(rng, typical, 1000))}, "returned 0 query values for canary, the config has 1 queries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAnalyzer(cfg, WithLogger(quiet), WithSource(&fixedSource{sample: tc.sample}))
			if err != nil {
				t.Fatal(err)
			}
			v := a.Analyze(context.Background(), time.Time{})
			if v.Phase != Error || !strings.Contains(v.Summary, tc.want) {
				t.Errorf("%s %q, want Error with %q", v.Phase, v.Summary, tc.want)
			}
		})
	}
}
