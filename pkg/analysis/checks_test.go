package analysis

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func promConfig(slo SLO) Config {
	return Config{
		Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: "http://127.0.0.1:9"},
		Envoy:  &EnvoyConfig{CanaryCluster: "c", StableCluster: "s"},
		Window: window("5m"), SLO: slo,
	}
}

func TestAbsoluteChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	h := sampleHistogram(rng, typical, 5000) // p99 ≈ 81 ms → read in (50, 100]
	r := mustRules(t, promConfig(SLO{P50: dur("25ms"), P99: dur("60ms"), P999: dur("1s")}))
	v := evaluate(r, &Sample{Canary: *side("canary", h)}, "5m")
	if v.Phase != Fail {
		t.Fatalf("phase %s: %s", v.Phase, v.Summary)
	}
	byName := map[string]Check{}
	for _, c := range v.Checks {
		byName[c.Name] = c
	}
	if c := byName["p50"]; c.Phase != Pass {
		t.Errorf("p50: %s %s", c.Phase, c.Message)
	}
	if c := byName["p99"]; c.Phase != Fail || !strings.Contains(c.Message, "> 60.0ms SLO (limit inside the 50.0ms–100ms bucket: decided by interpolation)") {
		t.Errorf("p99: %s %q", c.Phase, c.Message)
	}
	if c := byName["p999"]; c.Phase != Pass {
		t.Errorf("p999 with 5,000 requests: %s %s", c.Phase, c.Message)
	}
	if !strings.HasPrefix(v.Summary, "Fail: p99 ") {
		t.Errorf("summary %q does not lead with the breach", v.Summary)
	}
}

func TestPercentileNeedsEnoughTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	h := sampleHistogram(rng, typical, 2000)
	r := mustRules(t, promConfig(SLO{P99: dur("1s"), P999: dur("1s")}))
	v := evaluate(r, &Sample{Canary: *side("canary", h)}, "5m")
	if v.Phase != Inconclusive {
		t.Fatalf("phase %s: %s", v.Phase, v.Summary)
	}
	if !strings.Contains(v.Summary, "p99.9: canary has 2000 requests in the window, needs 5000 (minTailCount 5 ÷ (1−0.999))") {
		t.Errorf("summary %q", v.Summary)
	}
	if v.Checks[0].Phase != Pass {
		t.Errorf("p99 with 2,000 requests: %s", v.Checks[0].Message)
	}
}

func TestFailBeatsInconclusive(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	h := sampleHistogram(rng, typical, 1000)
	r := mustRules(t, promConfig(SLO{P50: dur("5ms"), P999: dur("1s")}))
	v := evaluate(r, &Sample{Canary: *side("canary", h)}, "5m")
	if v.Phase != Fail {
		t.Fatalf("a measured breach (p50) must fail even while p99.9 is inconclusive: %s", v.Summary)
	}
}

func TestErrorRateChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	h := sampleHistogram(rng, typical, 1000)
	r := mustRules(t, promConfig(SLO{MaxErrorRate: number("2%")}))
	for _, tc := range []struct {
		name     string
		requests Measured
		errs     Measured
		phase    Phase
		want     string
	}{
		{"ok", Measured{From: "req", Value: 1000, Found: true}, Measured{From: "err", Value: 10, Found: true}, Pass, "error rate 1.00% ≤ 2.00% (10 of 1000)"},
		{"breach", Measured{From: "req", Value: 1000, Found: true}, Measured{From: "err", Value: 30, Found: true}, Fail, "error rate 3.00% > 2.00% SLO (30 of 1000)"},
		{"no error series", Measured{From: "req", Value: 1000, Found: true}, Measured{From: "err"}, Pass, "error rate 0% ≤ 2.00% (0 of 1000)"},
		{"no request series", Measured{From: "sum(req)"}, Measured{From: "err"}, Inconclusive, "error rate: canary: no data, query returned no series: sum(req)"},
		{"too few", Measured{From: "req", Value: 20, Found: true}, Measured{From: "err", Value: 20, Found: true}, Inconclusive, "canary has 20 requests in the window, needs 100 (minSamples)"},
	} {
		s := side("canary", h)
		s.Requests, s.Errors = tc.requests, tc.errs
		v := evaluate(r, &Sample{Canary: *s}, "5m")
		if v.Phase != tc.phase || !strings.Contains(v.Summary+v.Checks[0].Message, tc.want) {
			t.Errorf("%s: phase %s, want %s with %q: %s / %s", tc.name, v.Phase, tc.phase, tc.want, v.Summary, v.Checks[0].Message)
		}
	}
}

func TestRatioChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 40))
	stable := sampleHistogram(rng, typical, 20000)
	slow := typical
	slow.scale = 1.5
	r := mustRules(t, promConfig(SLO{Ratio: RatioSLO{P50: number("1.2"), P99: number("1.2")}}))

	v := evaluate(r, &Sample{Canary: *side("canary", sampleHistogram(rng, slow, 5000)), Stable: side("stable", stable)}, "5m")
	if v.Phase != Fail || !strings.Contains(v.Summary, "p50 canary/stable 1.") || !strings.Contains(v.Summary, "> 1.2") {
		t.Fatalf("1.5× slower canary: %s", v.Summary)
	}
	v = evaluate(r, &Sample{Canary: *side("canary", sampleHistogram(rng, typical, 5000)), Stable: side("stable", stable)}, "5m")
	if v.Phase != Pass {
		t.Fatalf("same distribution: %s", v.Summary)
	}
	// stable configured but empty
	empty := &Side{Name: "stable", LatencyFrom: "sum by (le) (stable)"}
	v = evaluate(r, &Sample{Canary: *side("canary", stable), Stable: empty}, "5m")
	if v.Phase != Inconclusive || !strings.Contains(v.Summary, "stable: no data, query returned no series: sum by (le) (stable)") {
		t.Fatalf("stable empty: %s", v.Summary)
	}
}

func TestMaxNeedsRawData(t *testing.T) {
	cfg := Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: "c"}, SLO: SLO{Max: dur("100ms")}}
	r := mustRules(t, cfg)
	raw := Histogram{HasRaw: true, Min: 1, Max: 250, Buckets: []Bucket{{10, 40}, {250, 50}}}
	v := evaluate(r, &Sample{Canary: *side("canary", raw)}, "run")
	if v.Phase != Fail || !strings.Contains(v.Summary, "max 250ms > 100ms SLO") {
		t.Fatalf("a breached max fails even below minSamples: %s", v.Summary)
	}
	raw.Max = 50
	raw.Buckets[1].UpperBound = 50
	v = evaluate(r, &Sample{Canary: *side("canary", raw)}, "run")
	if v.Phase != Inconclusive {
		t.Fatalf("a max below the limit on 50 requests is not yet a pass: %s", v.Summary)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
