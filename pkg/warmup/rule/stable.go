package rule

import (
	"math"
	"slices"
	"time"
)

// stableCompareRequests is how many of a canary's latest requests are
// compared with stable (rounded up to whole windows, at least
// StableWindows): 500 pooled requests put the canary's p50 within ~2 % and
// its p99 within ~5–10 % of their true values, so one window (a spike, a GC
// pause) decides nothing and a canary 30 % slower is not taken for one
// within 10 % by chance.
const stableCompareRequests = 500

// stableRef is what a canary is compared with: the stable pods' latency
// measured side by side with the same request mix, pooled over their latest
// compareWindows windows (stableReference). The zero value is "no stable
// window yet".
type stableRef struct {
	p50, p99 time.Duration
	windows  int
}

func (r stableRef) known() bool { return r.windows > 0 }

// stableReference is what a canary is compared with (stableRef), from the
// stable pool's windows: the p50 pooled over the latest compareWindows
// windows, at the lower end of stableP50Z standard errors, and the p99
// pooled so too, or over the compareWindows windows before when that is
// lower (a hiccup on a stable pod — a GC pause while it serves users —
// inflates one span, and must not wave a cold canary through). Windows
// without latencies (shed) give the medians of their p50s and p99s
// instead (the lower median: the stricter bar).
func (c *Config) stableReference(windows []Window) stableRef {
	complete := completeWindows(windows)
	k := c.compareWindows()
	if len(complete) == 0 {
		return stableRef{}
	}
	recent := complete[max(0, len(complete)-k):]
	r := stableRef{windows: len(recent)}
	r.p50, r.p99 = pooledOrMedians(recent)
	if len(complete) >= 2*k {
		if _, p99 := pooledOrMedians(complete[len(complete)-2*k : len(complete)-k]); p99 < r.p99 {
			r.p99 = p99
		}
	}
	return r
}

// stableP50Z places stable's p50 at the lower end of half its standard
// error (nearestRank). The canary's p50 is taken at the upper end of its
// own (asFastAsStable); together the two margins make about the standard
// error of the difference of two samples of about the same size (√2 of
// one), so a stable sample that came out slow by chance does not wave a
// canary through that is still more than Tolerance above stable. With
// stable's point estimate, a canary still warming slowly (the zoo's
// jit-slow next to a noisy neighbour) was released with its next 1,000
// requests' p50 1.10–1.17× its plateau in 1 run in 10.
const stableP50Z = -0.5

// pooledOrMedians is the nearest-rank p50 (at stableP50Z) and p99 of
// windows' latencies pooled, or, when a window kept none, the lower
// medians of their p50s and p99s.
func pooledOrMedians(windows []Window) (p50, p99 time.Duration) {
	var lat []time.Duration
	for _, w := range windows {
		if len(w.sorted) == 0 {
			var p50s, p99s []time.Duration
			for _, w := range windows {
				p50s, p99s = append(p50s, w.P50), append(p99s, w.P99)
			}
			slices.Sort(p50s)
			slices.Sort(p99s)
			m := (len(p99s) - 1) / 2
			return p50s[m], p99s[m]
		}
		lat = append(lat, w.sorted...)
	}
	slices.Sort(lat)
	return nearestRank(lat, 0.5, stableP50Z), nearestRank(lat, 0.99, 0)
}

// nearestRank is sorted's q-quantile by nearest rank, moved by z standard
// errors of the rank (√(n·q·(1−q))): z 1 is the upper end of its
// one-standard-error range.
func nearestRank(sorted []time.Duration, q, z float64) time.Duration {
	n := float64(len(sorted))
	r := int(math.Ceil(q*n + z*math.Sqrt(n*q*(1-q)) - 1e-9))
	return sorted[min(max(r, 1), len(sorted))-1]
}
