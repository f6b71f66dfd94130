package analysis

import (
	"fmt"
	"math"
)

// The tail test asks one question of two histograms taken over the same
// window: does the canary land above stable's p99 bucket bound more often
// than stable does?
//
// Threshold. T is the upper bound of the bucket holding stable's q-quantile
// (q = 0.99 by default): the finest threshold the buckets can resolve at or
// above stable's p99. Counting requests above a bucket bound is exact — no
// interpolation — so the test is as precise as the data allows.
//
// Statistic. With x of n requests above T, p̂ = x/n for each side, and the
// one-sided hypotheses are H0: p_canary − p_stable ≤ margin against
// H1: p_canary − p_stable > margin. θ̂ = p̂_c − p̂_s − margin is approximately
// normal with variance V, estimated at the boundary of H0: the pooled
// V = p̄(1−p̄)(1/n_c + 1/n_s) (see nullVariance).
//
// Why a mixture sequential probability ratio test. Argo measures every
// interval, and pkg/shift checks after every weight step: the same question
// is asked again and again of a growing sample. A fixed-sample test (a
// z-test at 95 %) checked ten times raises false alarms far above 5 %. The
// mixture SPRT (Robbins 1970; the "always valid p-values" of Johari, Koomen,
// Pekelis & Walsh, KDD 2017, used by Optimizely) instead averages the
// likelihood ratio of every effect θ > 0 under a half-normal prior with
// scale τ:
//
//	Λ = 2 √(V/(V+τ)) · exp(θ̂²τ / (2V(V+τ))) · Φ(θ̂ √(τ/(V(V+τ))))
//
// Under H0, Λ is a (super)martingale with mean ≤ 1 in the normal model, so by
// Ville's inequality P(Λ ever reaches 1/α) ≤ α however often it is looked
// at. Λ is an e-value: the verdict is Fail when Λ ≥ 1/α (20 at 95 %), and
// 1/Λ is an anytime-valid p-value. Alpha-spending was the alternative; it
// needs the number of looks in advance, which Argo's `count` and manual
// promotion do not give.
//
// Choices and their limits, also in docs/latency.md:
//   - τ = (3·(1−q))²: the prior puts its weight on effects of a few times the
//     nominal tail fraction (1–9 percentage points at p99), the size of a real
//     regression; a tiny effect needs far more data before it counts.
//   - The guarantee is exact for a growing sample (window: cumulative). With
//     a sliding window every check still has false-alarm probability ≤ α,
//     but checks on fresh data add up.
//   - T is taken from stable's data, so stable's rate above it is biased low
//     when a true bucket exceedance sits right at 1−q; the A/A tests in
//     tailtest_test.go cover that worst case.
//   - The normal approximation needs a few exceedances: below minSamples
//     (canary) or minTailCount/(1−q) (stable) the test is Inconclusive.
const tailMixtureScale = 3.0

// TailTest is the result of one tail test: every number it used.
type TailTest struct {
	Quantile    float64 `json:"quantile"`
	ThresholdMs float64 `json:"thresholdMs"` // upper bound of stable's q bucket
	CanaryCount float64 `json:"canaryCount"`
	StableCount float64 `json:"stableCount"`
	CanaryAbove float64 `json:"canaryAbove"` // requests above the threshold
	StableAbove float64 `json:"stableAbove"`
	CanaryRate  float64 `json:"canaryRate"` // fraction above the threshold
	StableRate  float64 `json:"stableRate"`
	Margin      float64 `json:"margin,omitempty"`
	Z           float64 `json:"z"`      // (difference − margin) / standard error
	EValue      float64 `json:"eValue"` // mixture likelihood ratio Λ
	RejectAt    float64 `json:"rejectAt"`
	Confidence  float64 `json:"confidence"`
	// Rejected: the canary's tail is heavier than stable's, with the stated
	// confidence, anytime-valid.
	Rejected bool `json:"rejected"`
}

// RunTailTest runs the tail test on canary and stable histograms from the
// same window. It returns an error when the threshold cannot be placed
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

	v := nullVariance(t, margin)
	theta := t.CanaryRate - t.StableRate - margin
	t.Z = theta / math.Sqrt(v)
	scale := tailMixtureScale * (1 - q)
	logE := logMixtureSPRT(theta, v, scale*scale)
	t.EValue = math.Exp(math.Min(logE, 700))
	t.Rejected = logE >= math.Log(t.RejectAt)
	return t, nil
}

// nullVariance is the variance of p̂_c − p̂_s at the boundary of H0. With no
// margin that boundary is p_c = p_s, and the pooled rate p̄ estimates the
// common p: V = p̄(1−p̄)(1/n_c + 1/n_s) (the score test's variance, which
// unlike the unpooled one does not shrink when the canary happens to have
// few exceedances). With a margin the rates differ at the boundary and each
// side keeps its own rate. Rates are floored at 1/(2n) so that no
// exceedances at all still leave some uncertainty.
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

// logMixtureSPRT is log Λ for the one-sided normal mixture SPRT with
// estimate theta, its variance v and mixing variance tau (half-normal prior
// on θ > 0). With x = θ √(τ/(v(v+τ))):
// log Λ = log 2 + ½ log(v/(v+τ)) + x²/2 + log Φ(x).
func logMixtureSPRT(theta, v, tau float64) float64 {
	if !(v > 0) {
		return math.Inf(-1)
	}
	x := theta * math.Sqrt(tau/(v*(v+tau)))
	return math.Ln2 + 0.5*math.Log(v/(v+tau)) + halfSquarePlusLogPhi(x)
}

// halfSquarePlusLogPhi is x²/2 + log Φ(x), computed without overflow for
// large |x| (for x → −∞ it tends to −log(−x) − ½ log 2π).
func halfSquarePlusLogPhi(x float64) float64 {
	if x > -30 {
		return x*x/2 + math.Log(0.5*math.Erfc(-x/math.Sqrt2))
	}
	// Mills ratio: Φ(x) ≈ φ(x)/(−x) · (1 − 1/x² + 3/x⁴).
	return -math.Log(-x) - 0.5*math.Log(2*math.Pi) + math.Log(1-1/(x*x)+3/(x*x*x*x))
}

func quantileName(q float64) string {
	for _, qs := range quantiles {
		if qs.q == q {
			return qs.label[1:]
		}
	}
	return fmt.Sprintf("%g", q*100)
}
