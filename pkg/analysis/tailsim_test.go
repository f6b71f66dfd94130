package analysis

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The simulations below run the tail test exactly as the analysis does
// (tailCheck under the default rules: minSamples 100, minTailCount 5,
// q 0.99, confidence 0.95) on Istio's default buckets, with Poisson request
// counts per bucket, checked 20 times per trial. Their figures are quoted in
// docs/latency.md ("Measured").

// latencyDist is a latency distribution by its CDF (ms).
type latencyDist interface{ cdf(x float64) float64 }

// bimodal is a mixture: a fraction slow of requests from b, the rest from a
// (a fast path and a slow path, e.g. cache hits and misses).
type bimodal struct {
	a, b lognormal
	slow float64
}

func (d bimodal) cdf(x float64) float64 { return (1-d.slow)*d.a.cdf(x) + d.slow*d.b.cdf(x) }

// pareto is a heavy power-law tail above xm ms with index alpha.
type pareto struct{ xm, alpha float64 }

func (d pareto) cdf(x float64) float64 {
	if x <= d.xm {
		return 0
	}
	return 1 - math.Pow(d.xm/x, d.alpha)
}

// slowed adds extra ms to a fraction of requests: the regressions the tail
// test must catch ("5 % of requests +1 s").
type slowed struct {
	base     latencyDist
	fraction float64
	extraMs  float64
}

func (d slowed) cdf(x float64) float64 {
	shifted := 0.0
	if x > d.extraMs {
		shifted = d.base.cdf(x - d.extraMs)
	}
	return (1-d.fraction)*d.base.cdf(x) + d.fraction*shifted
}

// simDists are the A/A shapes: light and heavy lognormal tails, a bimodal
// mix and a Pareto tail.
var simDists = []struct {
	name string
	dist latencyDist
}{
	{"lognormal σ0.5", lognormal{median: 20, sigma: 0.5}},
	{"lognormal σ1.0", lognormal{median: 20, sigma: 1.0}},
	{"bimodal 90/10", bimodal{a: lognormal{median: 8, sigma: 0.3}, b: lognormal{median: 60, sigma: 0.4}, slow: 0.1}},
	{"pareto α2", pareto{xm: 5, alpha: 2}},
}

// finerBuckets are the custom Istio buckets docs/latency.md suggests
// (sidecar.istio.io/statsHistogramBuckets).
var finerBuckets = []float64{1, 2, 5, 10, 15, 20, 25, 35, 50, 75, 100, 150, 250, 500, 1000}

// bucketLayouts are the histograms the power figures are measured on.
var bucketLayouts = []struct {
	name   string
	bounds []float64
}{
	{"istio default", istioBuckets},
	{"docs' finer", finerBuckets},
}

// bucketProbs is the probability of each bucket of bounds (the last is +Inf).
func bucketProbs(bounds []float64, d latencyDist) []float64 {
	p := make([]float64, len(bounds)+1)
	prev := 0.0
	for i, b := range bounds {
		c := d.cdf(b)
		p[i] = math.Max(0, c-prev)
		prev = c
	}
	p[len(bounds)] = math.Max(0, 1-prev)
	return p
}

// poisson draws a Poisson(lambda) count: multiplication below 30, else
// Hörmann's PTRS transformed rejection (as numpy does).
func poisson(rng *rand.Rand, lambda float64) float64 {
	if math.IsNaN(lambda) || math.IsInf(lambda, 0) {
		panic("poisson: non-finite mean")
	}
	if lambda <= 0 {
		return 0
	}
	if lambda < 30 {
		limit, k, p := math.Exp(-lambda), 0.0, 1.0
		for {
			p *= rng.Float64()
			if p <= limit {
				return k
			}
			k++
		}
	}
	slam, loglam := math.Sqrt(lambda), math.Log(lambda)
	b := 0.931 + 2.53*slam
	a := -0.059 + 0.02483*b
	invalpha := 1.1239 + 1.1328/(b-3.4)
	vr := 0.9277 - 3.6224/(b-2)
	for {
		u := rng.Float64() - 0.5
		v := rng.Float64()
		us := 0.5 - math.Abs(u)
		k := math.Floor((2*a/us+b)*u + lambda + 0.43)
		if us >= 0.07 && v <= vr {
			return k
		}
		if k < 0 || (us < 0.013 && v > us) {
			continue
		}
		lg, _ := math.Lgamma(k + 1)
		if math.Log(v)+math.Log(invalpha)-math.Log(a/(us*us)+b) <= -lambda+k*loglam-lg {
			return k
		}
	}
}

// drawCounts adds one interval's Poisson bucket counts with n expected
// requests to counts.
func drawCounts(rng *rand.Rand, probs []float64, n float64, counts []float64) {
	for i, p := range probs {
		counts[i] += poisson(rng, n*p)
	}
}

// simScenario is one way a rollout looks at its canary: the canary weight
// at each look, and whether each look sees everything so far (cumulative)
// or only the last slidingIntervals intervals.
type simScenario struct {
	name    string
	weight  func(look int) float64
	sliding bool
}

const (
	simLooks = 20
	// simInterval is the requests both versions get per interval between
	// looks: at 5 % weight the canary gets 100, so the first look the tail
	// test could judge (500 canary requests) is the fifth.
	simInterval      = 2000.0
	slidingIntervals = 5
)

func simScenarios() []simScenario {
	fixed := func(w float64) func(int) float64 { return func(int) float64 { return w } }
	ramp := func(look int) float64 { return 0.05 + 0.45*float64(look)/float64(simLooks-1) }
	var out []simScenario
	for _, sliding := range []bool{false, true} {
		kind := "cumulative"
		if sliding {
			kind = "sliding"
		}
		out = append(out,
			simScenario{"5% " + kind, fixed(0.05), sliding},
			simScenario{"10% " + kind, fixed(0.10), sliding},
			simScenario{"50% " + kind, fixed(0.50), sliding},
			simScenario{"ramp 5→50% " + kind, ramp, sliding},
		)
	}
	return out
}

// simTrial runs one trial of simLooks looks and returns the first look
// (1-based) whose tail test failed, or 0.
func simTrial(rng *rand.Rand, r *Rules, sc simScenario, bounds, canaryProbs, stableProbs []float64, interval float64, looks int) int {
	nb := len(bounds) + 1
	var ringC, ringS [][]float64
	cumC, cumS := make([]float64, nb), make([]float64, nb)
	winC, winS := make([]float64, nb), make([]float64, nb)
	for look := 1; look <= looks; look++ {
		w := sc.weight(look - 1)
		ic, is := make([]float64, nb), make([]float64, nb)
		drawCounts(rng, canaryProbs, interval*w, ic)
		drawCounts(rng, stableProbs, interval*(1-w), is)
		c, s := cumC, cumS
		if sc.sliding {
			ringC, ringS = append(ringC, ic), append(ringS, is)
			if len(ringC) > slidingIntervals {
				ringC, ringS = ringC[1:], ringS[1:]
			}
			clear(winC)
			clear(winS)
			for j := range ringC {
				for i := range nb {
					winC[i] += ringC[j][i]
					winS[i] += ringS[j][i]
				}
			}
			c, s = winC, winS
		} else {
			for i := range nb {
				cumC[i] += ic[i]
				cumS[i] += is[i]
			}
		}
		ch, _ := tailCheck(r, side("canary", cumulative(bounds, c)), side("stable", cumulative(bounds, s)))
		if ch.Phase == Fail {
			return look
		}
	}
	return 0
}

// simTrials is the same with -short: fewer trials would make the seeded
// 5 % bound a coin toss, and the full count takes seconds.
func simTrials() int { return 2000 }

// TestTailTestAAFalseAlarmsSimulated: canary and stable from the same
// distribution, 2,000 trials × 20 looks per case: at most 5 % of trials may
// ever fail, at every weight, on a ramp, with cumulative and sliding windows,
// for every shape.
func TestTailTestAAFalseAlarmsSimulated(t *testing.T) {
	r := mustRules(t, tailOnly())
	trials := simTrials()
	for di, d := range simDists {
		probs := bucketProbs(istioBuckets, d.dist)
		for si, sc := range simScenarios() {
			t.Run(d.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(uint64(100+di), uint64(200+si)))
				alarms := 0
				for range trials {
					if look := simTrial(rng, r, sc, istioBuckets, probs, probs, simInterval, simLooks); look > 0 {
						alarms++
					}
				}
				rate := float64(alarms) / float64(trials)
				t.Logf("A/A %-16s %-24s %d trials × %d looks: false alarms %.2f%% (%d)", d.name, sc.name, trials, simLooks, 100*rate, alarms)
				if rate > 0.05 {
					t.Errorf("A/A false alarms %.2f%% > 5%%", 100*rate)
				}
			})
		}
	}
}

// regression is a slowed fraction of requests the tail test must catch.
type regression struct {
	name            string
	fraction, extra float64
	minPower        float64 // the target, within two windows of 500 canary requests
}

var powerRegressions = []regression{
	{"5% +1s", 0.05, 1000, 0.95},
	{"1% +200ms", 0.01, 200, 0.85},
}

// TestTailTestPowerSimulated: a canary with a slow fraction of requests at
// 500 canary requests per window (5 % weight, cumulative) must fail within
// two windows: ≥ 95 % of trials for "5 % of requests +1 s", ≥ 85 % for
// "1 % +200 ms", on Istio's default buckets and on the finer ones the docs
// suggest — wherever the target can be reached by a test that is checked
// again and again. That is judged by the sequential oracle
// (powerCeilings): the exact likelihood ratio of the bucket counts, knowing
// stable's distribution and the regression in advance, checked against 20
// after each window. Where even the oracle stays under the target (measured:
// lognormal σ 1.0 on both layouts, the bimodal mix on Istio's default
// buckets) the figure is logged and the oracle's shortfall asserted instead,
// so the waiver cannot outlive its reason.
func TestTailTestPowerSimulated(t *testing.T) {
	r := mustRules(t, tailOnly())
	trials := simTrials()
	const canaryPerWindow, weight = 500.0, 0.05
	sc := simScenario{name: "5% cumulative", weight: func(int) float64 { return weight }}
	for li, layout := range bucketLayouts {
		for di, d := range simDists {
			for _, reg := range powerRegressions {
				t.Run(layout.name+"/"+d.name+"/"+reg.name, func(t *testing.T) {
					t.Parallel()
					rng := rand.New(rand.NewPCG(uint64(300+di+10*li), uint64(reg.extra)))
					stable := bucketProbs(layout.bounds, d.dist)
					canary := bucketProbs(layout.bounds, slowed{base: d.dist, fraction: reg.fraction, extraMs: reg.extra})
					caught := 0
					for range trials {
						if look := simTrial(rng, r, sc, layout.bounds, canary, stable, canaryPerWindow/weight, 2); look > 0 {
							caught++
						}
					}
					power := float64(caught) / float64(trials)
					fixed, sequential := powerCeilings(stable, canary, canaryPerWindow, uint64(di+10*li))
					t.Logf("power %-13s %-16s %-10s %d trials, 500 canary requests per window: failed within two windows in %.1f%% (oracle: sequential %.1f%%, fixed-sample %.1f%%)",
						layout.name, d.name, reg.name, trials, 100*power, 100*sequential, 100*fixed)
					switch {
					case sequential >= reg.minPower && power < reg.minPower:
						t.Errorf("power %.1f%% < %.0f%%, which the sequential oracle reaches (%.1f%%)", 100*power, 100*reg.minPower, 100*sequential)
					case sequential < reg.minPower && power > sequential+0.02:
						t.Errorf("power %.1f%% above the oracle's %.1f%%: the oracle or the simulation is wrong", 100*power, 100*sequential)
					}
				})
			}
		}
	}
}

// powerCeilings bounds what any test can do with two windows of
// perWindow canary requests, even knowing stable's distribution exactly
// and the regression in advance. fixed is the Neyman–Pearson
// likelihood-ratio test at 5 % on both windows together, the most powerful
// test there is for one look; sequential is the same likelihood ratio
// checked after each window against 20 (Ville: ≤ 5 % false alarms however
// often it is looked at), the oracle version of what danki does. For
// "1 % of requests +200 ms" on lognormal σ 1.0 on Istio's buckets both stay
// far below 85 %: stable already has 0.58 % above 250 ms and 5.4 % above
// 100 ms, and the slowed requests add 0.17 and 0.95 points there, too little
// in 1,000 requests.
func powerCeilings(stable, canary []float64, perWindow float64, seed uint64) (fixed, sequential float64) {
	const draws = 20000
	logRatio := make([]float64, len(stable))
	for i := range stable {
		if stable[i] > 0 && canary[i] > 0 {
			logRatio[i] = math.Log(canary[i] / stable[i])
		}
	}
	rng := rand.New(rand.NewPCG(500, seed))
	// window draws one window's log likelihood ratio (the Poisson terms
	// cancel: both distributions sum to 1).
	window := func(probs []float64) float64 {
		s := 0.0
		for i, p := range probs {
			if logRatio[i] != 0 {
				s += logRatio[i] * poisson(rng, perWindow*p)
			}
		}
		return s
	}
	null := make([]float64, draws)
	for i := range null {
		null[i] = window(stable) + window(stable)
	}
	slices.Sort(null)
	critical := null[int(0.95*draws)] // rejects at most 5 % of A/A draws
	rejectAt := math.Log(20)
	fixedCaught, sequentialCaught := 0, 0
	for range draws {
		first := window(canary)
		both := first + window(canary)
		if both > critical {
			fixedCaught++
		}
		if first >= rejectAt || both >= rejectAt {
			sequentialCaught++
		}
	}
	return float64(fixedCaught) / draws, float64(sequentialCaught) / draws
}

// TestTailTestPowerCeiling keeps the reason the 85 % target is waived on
// lognormal σ 1.0 true: on Istio's default buckets no test reaches it.
func TestTailTestPowerCeiling(t *testing.T) {
	d := simDists[1]
	if d.name != "lognormal σ1.0" {
		t.Fatalf("simDists[1] is %s", d.name)
	}
	stable := bucketProbs(istioBuckets, d.dist)
	canary := bucketProbs(istioBuckets, slowed{base: d.dist, fraction: 0.01, extraMs: 200})
	fixed, sequential := powerCeilings(stable, canary, 500, 1)
	t.Logf("ceiling %s 1%% +200ms at 1,000 canary requests: the most powerful 5%% test catches %.1f%%, the sequential oracle %.1f%%", d.name, 100*fixed, 100*sequential)
	if fixed >= 0.85 {
		t.Errorf("ceiling %.1f%% ≥ 85%%: the target is reachable on %s after all", 100*fixed, d.name)
	}
}
