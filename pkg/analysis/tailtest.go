package analysis

import (
	"fmt"
	"math"
)

// The tail test asks of two histograms taken over the same window: does the
// canary land above stable's tail more often than stable does?
//
// Thresholds. A regression shows at the bucket bound just below where the
// slowed requests land, and which bound that is depends on the shape of
// stable's tail: "1 % of requests +200 ms" lifts a Pareto-tailed service's
// 5–50 ms requests over 100 ms, twice stable's p99 bound of 50 ms. So the
// test asks the question at every bucket bound of stable's tail: from the
// bound of the bucket holding stable's 1−2(1−q) quantile (p98 at q 0.99:
// when stable's p99 sits right at a bound its bucket flips from window to
// window, and the bound at p99 is then the one below it) up to the bound of
// stable's 1−(1−q)/10 quantile (p99.9), where stable's own exceedances are
// rare and a handful of slow canary requests stand out. Counting requests
// above a bucket bound is exact — no interpolation.
//
// Statistic. Above one threshold T, x_c of n_c canary and x_s of n_s stable
// requests land. Given the m = x_c + x_s exceedances, each one is a canary
// request with probability π = n_c·p_c / (n_c·p_c + n_s·p_s) (Poisson
// arrivals), whatever the common rate: under H0 (p_c ≤ p_s) π ≤ π0 =
// n_c/(n_c+n_s). This conditional binomial test (the exact test for two
// Poisson rates) needs no normal approximation, so it stays exact for rare
// exceedances far out in the tail, where 2 or 3 canary requests above T are
// already telling. Its mixture likelihood ratio
//
//	Λ_T = Σ_j w_j · (π_j/π0)^x_c · ((1−π_j)/(1−π0))^(m−x_c)
//
// weighs the alternatives "the canary's rate above T is r_j times stable's"
// (π_j's odds are r_j times π0's) by w_j (tailAlternatives).
//
// Why a mixture sequential probability ratio test. Argo measures every
// interval, and pkg/shift checks after every weight step: the same question
// is asked again and again of a growing sample, and a fixed-sample test at
// 95 % checked 20 times raises false alarms in ~18 % of healthy rollouts.
// Each exceedance multiplies Λ_T by π_j/π0 (canary) or (1−π_j)/(1−π0)
// (stable), factors with mean ≤ 1 under H0, so Λ_T is a nonnegative
// supermartingale with mean ≤ 1 (Robbins 1970; the "always valid p-values"
// of Johari, Koomen, Pekelis & Walsh, KDD 2017). The mean of such
// supermartingales over the thresholds, Λ = (1/K) Σ_T Λ_T, is one too, and
// by Ville's inequality P(Λ ever reaches 1/α) ≤ α however often it is
// looked at. Λ is an e-value: the verdict is Fail when Λ ≥ 1/α (20 at
// 95 %), and 1/Λ is an anytime-valid p-value. Averaging costs at most a
// factor K against the best single threshold and never multiplies evidence
// across thresholds, which are nested and so not independent.
// Alpha-spending was the alternative; it needs the number of looks in
// advance, which Argo's `count` and manual promotion do not give.
//
// Choices and their limits, also in docs/latency.md:
//   - The guarantee is exact for a growing sample at one canary weight
//     (window: cumulative). With weights that change between looks π0 is
//     taken from the cumulative counts, and with a sliding window every
//     check alone still has false-alarm probability ≤ α, but checks on fresh
//     data add up; the simulations in tailsim_test.go measure both.
//   - The thresholds come from stable's own data, a choice the
//     supermartingale argument does not cover; the simulations cover it.
//   - With a margin, H0 is p_c ≤ p_s + margin: π0 then uses stable's
//     observed rate (p̂_s + margin)/p̂_s as the rate ratio, an approximation
//     that is good when stable has many more exceedances than the canary.
//   - The verdict needs minTailCount/(1−q) requests on each side (500 at
//     p99) before it can say anything (Inconclusive until then).

// tailAlternatives are the alternatives the mixture weighs: the canary's
// rate above a threshold r times stable's. Most weight sits on 3×, the
// effect size the test is built for (the normal-model test before it
// weighed effects of about three times the nominal tail fraction): a slow
// path that 1 % of requests hit, above a bound stable crosses 0.5 % of the
// time. A one-point alternative, though, is blind below the ratio where its
// evidence stops growing (about 1.8× for 3×), so a fifth of the weight sits
// on 1.5×: a canary whose rate is 1.3× stable's or more is failed once there
// is enough data, at the cost of a factor 1.25 in evidence for the rest.
var tailAlternatives = []struct{ ratio, weight float64 }{{3, 0.8}, {1.5, 0.2}}

// TailThreshold is the test at one bucket bound of stable's tail.
type TailThreshold struct {
	ThresholdMs float64 `json:"thresholdMs"`
	CanaryAbove float64 `json:"canaryAbove"`
	StableAbove float64 `json:"stableAbove"`
	EValue      float64 `json:"eValue"` // Λ_T, this threshold's mixture likelihood ratio
}

// TailTest is the result of one tail test: every number it used.
type TailTest struct {
	Quantile float64 `json:"quantile"`
	// ThresholdMs is the upper bound of the bucket holding stable's
	// Quantile; the counts and rates below are at it. Thresholds lists
	// every bound the test asked at.
	ThresholdMs float64 `json:"thresholdMs"`
	CanaryCount float64 `json:"canaryCount"`
	StableCount float64 `json:"stableCount"`
	CanaryAbove float64 `json:"canaryAbove"` // requests above ThresholdMs
	StableAbove float64 `json:"stableAbove"`
	CanaryRate  float64 `json:"canaryRate"` // fraction above ThresholdMs
	StableRate  float64 `json:"stableRate"`
	Margin      float64 `json:"margin,omitempty"`
	Z           float64 `json:"z"` // at ThresholdMs: (difference − margin) / standard error, for reference
	// EValue is Λ, the mean of the thresholds' e-values: the verdict's
	// evidence against "the canary's tail is no heavier".
	EValue     float64         `json:"eValue"`
	RejectAt   float64         `json:"rejectAt"`
	Confidence float64         `json:"confidence"`
	Thresholds []TailThreshold `json:"thresholds"`
	// Strongest is the index in Thresholds with the largest e-value: where
	// the canary's tail differs most.
	Strongest int `json:"strongest"`
	// Rejected: the canary's tail is heavier than stable's, with the stated
	// confidence, anytime-valid.
	Rejected bool `json:"rejected"`
}

// RunTailTest runs the tail test on canary and stable histograms from the
// same window. It returns an error when the thresholds cannot be placed
// (no stable data, or stable's quantile in the +Inf bucket).
func RunTailTest(canary, stable Histogram, q, confidence, margin float64) (TailTest, error) {
	// 1/(1−0.95) is 19.99999…; round so that "reject at 20" reads as 20.
	rejectAt := math.Round(1e9/(1-confidence)) / 1e9
	t := TailTest{Quantile: q, Confidence: confidence, Margin: margin, RejectAt: rejectAt}
	threshold := stable.BucketBound(q)
	switch {
	case math.IsNaN(threshold):
		return t, fmt.Errorf("stable has no usable histogram to place its p%s bound", quantileName(q))
	case math.IsInf(threshold, +1):
		return t, fmt.Errorf("stable's p%s lies in the +Inf bucket: no finite bound to test against", quantileName(q))
	}
	t.ThresholdMs = threshold
	t.CanaryCount, t.StableCount = canary.Count(), stable.Count()
	if t.CanaryCount <= 0 || t.StableCount <= 0 {
		return t, fmt.Errorf("no requests to compare (canary %.0f, stable %.0f)", t.CanaryCount, t.StableCount)
	}
	t.CanaryAbove = math.Max(0, t.CanaryCount-canary.CountAtOrBelow(threshold))
	t.StableAbove = math.Max(0, t.StableCount-stable.CountAtOrBelow(threshold))
	t.CanaryRate = t.CanaryAbove / t.CanaryCount
	t.StableRate = t.StableAbove / t.StableCount
	t.Z = (t.CanaryRate - t.StableRate - margin) / math.Sqrt(nullVariance(t, margin))

	logEs := make([]float64, 0, 4)
	for _, bound := range tailThresholds(stable, q) {
		th := TailThreshold{
			ThresholdMs: bound,
			CanaryAbove: math.Max(0, t.CanaryCount-canary.CountAtOrBelow(bound)),
			StableAbove: math.Max(0, t.StableCount-stable.CountAtOrBelow(bound)),
		}
		logE := logConditionalMixture(th.CanaryAbove, th.StableAbove, t.CanaryCount, t.StableCount, margin)
		th.EValue = math.Exp(math.Min(logE, 700))
		if len(t.Thresholds) == 0 || logE > logEs[t.Strongest] {
			t.Strongest = len(t.Thresholds)
		}
		t.Thresholds = append(t.Thresholds, th)
		logEs = append(logEs, logE)
	}
	logE := logSumExp(logEs) - math.Log(float64(len(logEs)))
	t.EValue = math.Exp(math.Min(logE, 700))
	t.Rejected = logE >= math.Log(t.RejectAt)
	return t, nil
}

// tailThresholds are the finite bucket bounds of stable's tail, from the
// bound of its 1−2(1−q) quantile to the bound of its 1−(1−q)/10 quantile
// (or the top finite bound, when that quantile lies in the +Inf bucket).
// The caller has checked that the bound of stable's q is finite.
func tailThresholds(stable Histogram, q float64) []float64 {
	low := stable.BucketBound(1 - 2*(1-q))
	high := stable.BucketBound(1 - (1-q)/10)
	var out []float64
	for _, b := range stable.Buckets {
		if b.UpperBound >= low && b.UpperBound <= high && !math.IsInf(b.UpperBound, +1) {
			out = append(out, b.UpperBound)
		}
	}
	return out
}

// logConditionalMixture is log Λ_T for xc of nc canary and xs of ns stable
// requests above one threshold: the binomial likelihood ratio of the
// canary's share of the exceedances, mixed over tailAlternatives against the
// null share π0 (see the comment at the top of this file).
func logConditionalMixture(xc, xs, nc, ns, margin float64) float64 {
	nullRatio := 1.0
	if margin > 0 {
		ps := clampRate(xs/ns, ns)
		nullRatio = (ps + margin) / ps
	}
	m := xc + xs
	pi0 := nc * nullRatio / (nc*nullRatio + ns)
	terms := make([]float64, len(tailAlternatives))
	for j, alt := range tailAlternatives {
		r := nullRatio * alt.ratio
		pi := nc * r / (nc*r + ns)
		terms[j] = math.Log(alt.weight) + xc*math.Log(pi/pi0) + (m-xc)*(math.Log1p(-pi)-math.Log1p(-pi0))
	}
	return logSumExp(terms)
}

// logSumExp is log Σ exp(x_i) without overflow.
func logSumExp(xs []float64) float64 {
	top := math.Inf(-1)
	for _, x := range xs {
		top = math.Max(top, x)
	}
	if math.IsInf(top, 0) {
		return top
	}
	sum := 0.0
	for _, x := range xs {
		sum += math.Exp(x - top)
	}
	return top + math.Log(sum)
}

// nullVariance is the variance of p̂_c − p̂_s at the boundary of H0, for the
// reported z: with no margin the pooled rate p̄ estimates the common p,
// V = p̄(1−p̄)(1/n_c + 1/n_s); with a margin each side keeps its own rate.
// Rates are floored at 1/(2n) so that no exceedances at all still leave
// some uncertainty.
func nullVariance(t TailTest, margin float64) float64 {
	if margin == 0 {
		n := t.CanaryCount + t.StableCount
		p := clampRate((t.CanaryAbove+t.StableAbove)/n, n)
		return p * (1 - p) * (1/t.CanaryCount + 1/t.StableCount)
	}
	pc, ps := clampRate(t.CanaryRate, t.CanaryCount), clampRate(t.StableRate, t.StableCount)
	return pc*(1-pc)/t.CanaryCount + ps*(1-ps)/t.StableCount
}

func clampRate(p, n float64) float64 {
	floor := 0.5 / n
	return math.Max(floor, math.Min(1-floor, p))
}

func quantileName(q float64) string {
	for _, qs := range quantiles {
		if qs.q == q {
			return qs.label[1:]
		}
	}
	return fmt.Sprintf("%g", q*100)
}
