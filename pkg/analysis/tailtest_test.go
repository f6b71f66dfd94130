package analysis

import (
	"math"
	"math/rand/v2"
	"testing"
)

// typical is a service with median 20 ms and p99 ≈ 81 ms: stable's p99 lies
// in Istio's (50, 100] bucket, so the test threshold is 100 ms.
var typical = lognormal{median: 20, sigma: 0.6}

// atTheBound puts exactly 1 % of requests above 100 ms, a bucket bound: the
// worst case for choosing the threshold from stable's own data (half the time
// stable's sample lands just under 1 % there, biasing its rate low).
var atTheBound = lognormal{median: 100 / math.Exp(0.6*2.3263478740408408), sigma: 0.6}

// TestTailTestAAFalseAlarms: canary and stable from the same distribution,
// one check per window, 1,000 seeded windows per case: the verdict must pass
// in ≥ 95 % of them (false alarms ≤ 5 %).
func TestTailTestAAFalseAlarms(t *testing.T) {
	cases := []struct {
		name       string
		dist       lognormal
		nCanary    int
		nStable    int
		maxAlarms  float64
		wantAlarms float64 // the design target, far below the 5 % budget
		// allInconclusive: below minTailCount/(1−q) canary requests (500 at
		// p99) the test never judges, so it can never raise a false alarm.
		allInconclusive bool
	}{
		{"typical 10% weight", typical, 1000, 9000, 0.05, 0.02, false},
		{"typical 50% weight", typical, 5000, 5000, 0.05, 0.02, false},
		{"typical small canary", typical, 200, 1800, 0.05, 0.02, true},
		{"worst-case threshold", atTheBound, 1000, 9000, 0.05, 0.05, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, tailOnly())
			rng := rand.New(rand.NewPCG(1, 2))
			const windows = 1000
			alarms, inconclusive := 0, 0
			for range windows {
				c := sampleHistogram(rng, tc.dist, tc.nCanary)
				s := sampleHistogram(rng, tc.dist, tc.nStable)
				v := evaluate(r, &Sample{Canary: *side("canary", c), Stable: side("stable", s)}, "1m")
				switch v.Phase {
				case Fail:
					alarms++
				case Inconclusive:
					inconclusive++
				}
			}
			rate := float64(alarms) / windows
			t.Logf("%s: n=%d/%d: %d false alarms in %d windows (%.1f%%), %d inconclusive", tc.name, tc.nCanary, tc.nStable, alarms, windows, 100*rate, inconclusive)
			if tc.allInconclusive && inconclusive != windows {
				t.Errorf("%d of %d windows inconclusive; with %d canary requests none may get a verdict", inconclusive, windows, tc.nCanary)
			}
			if !tc.allInconclusive && inconclusive > 0 {
				t.Errorf("%d windows inconclusive; with these sample sizes every window should get a verdict", inconclusive)
			}
			if rate > tc.maxAlarms {
				t.Errorf("false-alarm rate %.1f%% > %.0f%%: the tail test cries wolf", 100*rate, 100*tc.maxAlarms)
			}
			if rate > tc.wantAlarms {
				t.Errorf("false-alarm rate %.1f%% above the expected %.0f%%", 100*rate, 100*tc.wantAlarms)
			}
		})
	}
}

// TestTailTestAnytimeValid checks the property the mixture SPRT is for: the
// same A/A analysis looked at 20 times as data accumulates (window:
// cumulative) still raises a false alarm in ≤ 5 % of runs — while a naive
// fixed-sample one-sided z-test at 95 % looked at the same 20 times does
// not, which shows the simulation has teeth.
func TestTailTestAnytimeValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		dist lognormal
	}{{"typical", typical}, {"worst-case threshold", atTheBound}} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRules(t, tailOnly())
			rng := rand.New(rand.NewPCG(3, 4))
			const runs, looks, stepCanary, stepStable = 1000, 20, 100, 900
			ours, naive := 0, 0
			for range runs {
				var c, s Histogram
				oursAlarm, naiveAlarm := false, false
				for range looks {
					c = addHistograms(c, sampleHistogram(rng, tc.dist, stepCanary))
					s = addHistograms(s, sampleHistogram(rng, tc.dist, stepStable))
					v := evaluate(r, &Sample{Canary: *side("canary", c), Stable: side("stable", s)}, "cumulative")
					if v.Phase == Fail {
						oursAlarm = true
					}
					if v.Tail != nil && v.Tail.Z > 1.6449 {
						naiveAlarm = true
					}
				}
				if oursAlarm {
					ours++
				}
				if naiveAlarm {
					naive++
				}
			}
			t.Logf("%s: %d looks, %d runs: mixture SPRT false alarms %.1f%%, naive z-test %.1f%%", tc.name, looks, runs, 100*float64(ours)/runs, 100*float64(naive)/runs)
			if float64(ours)/runs > 0.05 {
				t.Errorf("mixture SPRT raised a false alarm in %.1f%% of runs checked %d times; want ≤ 5%%", 100*float64(ours)/runs, looks)
			}
			if float64(naive)/runs <= 0.10 {
				t.Errorf("naive z-test false alarms %.1f%% ≤ 10%%: the simulation does not show the repeated-looks problem", 100*float64(naive)/runs)
			}
		})
	}
}

// TestTailTestPower: a canary whose whole latency distribution is 1.5× stable's
// (so its p99 is 1.5× stable's: 121 ms vs 81 ms) must fail in ≥ 95 % of
// windows at 1,000 canary / 9,000 stable requests (10 % canary weight,
// ~1 minute at 170 req/s). Smaller sizes are logged for docs/latency.md.
func TestTailTestPower(t *testing.T) {
	slow := typical
	slow.scale = 1.5
	if got := slow.quantile(0.99) / typical.quantile(0.99); math.Abs(got-1.5) > 1e-9 {
		t.Fatalf("canary p99 / stable p99 = %v, want 1.5", got)
	}
	r := mustRules(t, tailOnly())
	for _, tc := range []struct {
		nCanary, nStable int
		minPower         float64
	}{
		{1000, 9000, 0.95},
		{500, 4500, 0},
		{300, 2700, 0},
		{200, 1800, 0},
	} {
		rng := rand.New(rand.NewPCG(5, uint64(tc.nCanary)))
		const windows = 1000
		fails := 0
		for range windows {
			c := sampleHistogram(rng, slow, tc.nCanary)
			s := sampleHistogram(rng, typical, tc.nStable)
			v := evaluate(r, &Sample{Canary: *side("canary", c), Stable: side("stable", s)}, "1m")
			if v.Phase == Fail {
				fails++
			}
		}
		power := float64(fails) / windows
		t.Logf("p99 1.5x stable, n=%d/%d: fails in %.1f%% of windows", tc.nCanary, tc.nStable, 100*power)
		if power < tc.minPower {
			t.Errorf("n=%d/%d: slow canary failed in only %.1f%% of windows; want ≥ %.0f%%", tc.nCanary, tc.nStable, 100*power, 100*tc.minPower)
		}
	}
}

func TestTailTestBelowMinSamplesIsInconclusive(t *testing.T) {
	r := mustRules(t, tailOnly())
	rng := rand.New(rand.NewPCG(7, 8))
	slow := typical
	slow.scale = 3
	for _, tc := range []struct {
		name                 string
		nCanary, nStable     int
		wantMessageFragments []string
	}{
		{"few canary requests", 40, 9000, []string{"canary has 40 requests", "needs 500 (minTailCount 5 ÷ (1−0.99))"}},
		{"canary below minTailCount/(1−q)", 300, 9000, []string{"canary has 300 requests", "needs 500 (minTailCount 5 ÷ (1−0.99))"}},
		{"few stable requests", 1000, 300, []string{"stable has 300 requests", "needs 500 (minTailCount 5 ÷ (1−0.99))"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Even a canary three times slower is not failed on too little data,
			// and certainly not passed.
			c := sampleHistogram(rng, slow, tc.nCanary)
			s := sampleHistogram(rng, typical, tc.nStable)
			v := evaluate(r, &Sample{Canary: *side("canary", c), Stable: side("stable", s)}, "1m")
			if v.Phase != Inconclusive {
				t.Fatalf("phase %s, want Inconclusive: %s", v.Phase, v.Summary)
			}
			for _, f := range tc.wantMessageFragments {
				if !contains(v.Summary, f) {
					t.Errorf("summary %q does not say %q", v.Summary, f)
				}
			}
		})
	}
}

func TestRunTailTestNumbers(t *testing.T) {
	// Stable: 10,000 requests, 9,880 ≤ 50 ms and 9,950 ≤ 100 ms → rank 9,900
	// lies in (50, 100], threshold 100 ms, stable rate above it 0.5 %.
	stable := cumulative([]float64{50, 100, 250}, []float64{9880, 70, 40, 10})
	// Canary: 1,000 requests, 60 above 100 ms → 6 %.
	canary := cumulative([]float64{50, 100, 250}, []float64{800, 140, 50, 10})
	res, err := RunTailTest(canary, stable, 0.99, 0.95, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.ThresholdMs != 100 || res.CanaryAbove != 60 || res.StableAbove != 50 {
		t.Fatalf("threshold %v, above %v/%v; want 100, 60/50", res.ThresholdMs, res.CanaryAbove, res.StableAbove)
	}
	if math.Abs(res.CanaryRate-0.06) > 1e-12 || math.Abs(res.StableRate-0.005) > 1e-12 {
		t.Fatalf("rates %v/%v, want 0.06/0.005", res.CanaryRate, res.StableRate)
	}
	// Closed form: pooled p̄ = 110/11000, V = p̄(1−p̄)(1/1000 + 1/10000),
	// τ = (3·0.01)².
	pbar := 110.0 / 11000
	v := pbar * (1 - pbar) * (1.0/1000 + 1.0/10000)
	tau := 0.03 * 0.03
	theta := 0.055
	x := theta * math.Sqrt(tau/(v*(v+tau)))
	want := 2 * math.Sqrt(v/(v+tau)) * math.Exp(x*x/2) * 0.5 * math.Erfc(-x/math.Sqrt2)
	if math.Abs(res.EValue-want)/want > 1e-9 {
		t.Fatalf("e-value %v, want %v", res.EValue, want)
	}
	if !res.Rejected || res.RejectAt != 20 {
		t.Fatalf("rejected=%v at %v, want rejected at 20", res.Rejected, res.RejectAt)
	}
	// The same rates with a 6 % margin cannot reject (unpooled variance).
	res, _ = RunTailTest(canary, stable, 0.99, 0.95, 0.06)
	if res.Rejected {
		t.Fatalf("rejected with margin 6%% > observed difference 5.5%%: e=%v", res.EValue)
	}
}

func TestMixtureSPRTExtremes(t *testing.T) {
	// Far below zero the statistic tends to 0 without NaN or overflow; far
	// above it is finite and huge.
	for _, theta := range []float64{-1, -0.5, 0, 0.5, 1} {
		l := logMixtureSPRT(theta, 1e-9, 1e-4)
		if math.IsNaN(l) || math.IsInf(l, +1) {
			t.Errorf("logMixtureSPRT(%v) = %v", theta, l)
		}
	}
	if lo, hi := logMixtureSPRT(-1, 1e-9, 1e-4), logMixtureSPRT(1, 1e-9, 1e-4); !(lo < 0 && hi > 100) {
		t.Errorf("log Λ(−1) = %v, log Λ(+1) = %v; want < 0 and > 100", lo, hi)
	}
	// Continuity across the asymptotic switch at x = −30.
	a, b := halfSquarePlusLogPhi(-29.999), halfSquarePlusLogPhi(-30.001)
	if math.Abs(a-b) > 1e-3 {
		t.Errorf("halfSquarePlusLogPhi jumps at −30: %v vs %v", a, b)
	}
}
