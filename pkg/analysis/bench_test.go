package analysis

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkEvaluate measures one verdict (every SLO kind plus the tail test)
// on Istio-bucketed canary and stable histograms — the work done per Argo
// measurement after the queries return.
func BenchmarkEvaluate(b *testing.B) {
	rng := rand.New(rand.NewPCG(61, 62))
	cfg := promConfig(SLO{P50: dur("50ms"), P90: dur("100ms"), P95: dur("150ms"), P99: dur("250ms"), P999: dur("1s"), MaxErrorRate: number("1%"),
		Ratio: RatioSLO{P50: number("1.2"), P99: number("1.2"), P999: number("1.5")}})
	cfg.TailTest = &TailTestConfig{}
	r := mustRules(b, cfg)
	s := &Sample{Canary: *side("canary", sampleHistogram(rng, typical, 10000)), Stable: side("stable", sampleHistogram(rng, typical, 90000))}
	b.ReportAllocs()
	for b.Loop() {
		v := evaluate(r, s, "5m")
		if v.Phase == Error {
			b.Fatal(v.Summary)
		}
	}
}

// BenchmarkTailTest measures the statistical test alone.
func BenchmarkTailTest(b *testing.B) {
	rng := rand.New(rand.NewPCG(63, 64))
	c, s := sampleHistogram(rng, typical, 10000), sampleHistogram(rng, typical, 90000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RunTailTest(c, s, 0.99, 0.95, 0); err != nil {
			b.Fatal(err)
		}
	}
}
