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
	// Thresholds: stable's p98 lies in (0, 50], its p99 in (50, 100], its
	// p99.9 in (100, 250] (9,990 ≤ 250 ms): 50, 100 and 250 ms.
	wantBounds := []float64{50, 100, 250}
	wantAbove := [][2]float64{{200, 120}, {60, 50}, {10, 10}} // canary, stable
	if len(res.Thresholds) != len(wantBounds) {
		t.Fatalf("thresholds %+v, want %v", res.Thresholds, wantBounds)
	}
	// Closed form per threshold: of m exceedances the canary's share has
	// null π0 = 1000/11000 and alternatives with odds 3× (weight 0.8) and
	// 1.5× (weight 0.2) π0's; Λ is the mean over the thresholds.
	pi0 := 1000.0 / 11000
	sum := 0.0
	for i, th := range res.Thresholds {
		if th.ThresholdMs != wantBounds[i] || th.CanaryAbove != wantAbove[i][0] || th.StableAbove != wantAbove[i][1] {
			t.Fatalf("threshold %d: %+v, want %v ms with %v above", i, th, wantBounds[i], wantAbove[i])
		}
		xc, m := wantAbove[i][0], wantAbove[i][0]+wantAbove[i][1]
		e := 0.0
		for _, alt := range []struct{ r, w float64 }{{3, 0.8}, {1.5, 0.2}} {
			pi := 1000 * alt.r / (1000*alt.r + 10000)
			e += alt.w * math.Pow(pi/pi0, xc) * math.Pow((1-pi)/(1-pi0), m-xc)
		}
		if math.Abs(th.EValue-e)/e > 1e-9 {
			t.Fatalf("threshold %v ms: e-value %v, want %v", th.ThresholdMs, th.EValue, e)
		}
		sum += e
	}
	if want := sum / 3; math.Abs(res.EValue-want)/want > 1e-9 {
		t.Fatalf("e-value %v, want %v", res.EValue, want)
	}
	if res.Strongest != 0 {
		t.Fatalf("strongest threshold %v ms, want 50 ms (200 vs 120 above it)", res.Thresholds[res.Strongest].ThresholdMs)
	}
	if !res.Rejected || res.RejectAt != 20 {
		t.Fatalf("rejected=%v at %v, want rejected at 20", res.Rejected, res.RejectAt)
	}
	// The margin applies at every threshold: 6 points still leaves the
	// 18.8-point difference above 50 ms (20 % vs 1.2 %), 20 points leaves none.
	if res, _ = RunTailTest(canary, stable, 0.99, 0.95, 0.06); !res.Rejected {
		t.Fatalf("not rejected with margin 6%% < the difference 18.8%% above 50 ms: e=%v", res.EValue)
	}
	if res, _ = RunTailTest(canary, stable, 0.99, 0.95, 0.20); res.Rejected {
		t.Fatalf("rejected with margin 20%% > every difference (18.8%%, 5.5%%, 0%%): e=%v", res.EValue)
	}
}

func TestConditionalMixtureExtremes(t *testing.T) {
	// Huge counts stay finite and signed the right way: far more canary
	// exceedances than its share is overwhelming evidence, far fewer is none.
	for _, tc := range []struct {
		xc, xs   float64
		positive bool
	}{
		{1e6, 1e6, true},  // canary share 1/2 vs π0 1/11
		{0, 1e6, false},   // no canary exceedance at all
		{1e5, 1e6, false}, // exactly the null share
	} {
		l := logConditionalMixture(tc.xc, tc.xs, 1e7, 1e8, 0)
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("log Λ(%v, %v) = %v", tc.xc, tc.xs, l)
		}
		if tc.positive != (l > math.Log(20)) {
			t.Errorf("log Λ(%v of %v) = %v; want reject %v", tc.xc, tc.xc+tc.xs, l, tc.positive)
		}
	}
	// No exceedances: no evidence either way, Λ = 1.
	if l := logConditionalMixture(0, 0, 1000, 9000, 0); math.Abs(l) > 1e-12 {
		t.Errorf("log Λ with no exceedances = %v, want 0", l)
	}
}
