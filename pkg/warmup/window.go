package warmup

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// WindowStats is the latency of one window of consecutive requests to one
// target (or to the stable pool), with exact nearest-rank percentiles.
type WindowStats struct {
	// Index counts windows from 1.
	Index int `json:"index"`
	// Requests is the number of requests to this target so far, this window
	// included.
	Requests int64 `json:"requests"`
	// Summary's Count is the number of requests in this window (the window
	// size, or fewer for the last, partial window).
	latency.Summary
	// Partial marks the requests left over when the load stopped; partial
	// windows never count towards convergence.
	Partial bool `json:"partial,omitempty"`

	// sorted are the window's latencies in order, kept in memory only
	// (never in a status): the stopping rule takes its histogram from them
	// (blockPool), then the coordinator drops them unless
	// Options.KeepLatencies keeps them for TargetResult.Latencies.
	sorted []time.Duration
	// pool, on a target's first window, is the stopping rule's state for
	// that target's windows (blockPool).
	pool *blockPool
}

// sample is one completed request.
type sample struct {
	latency time.Duration
	ok      bool
}

// computeWindow summarizes one window's samples. It keeps the latencies,
// sorted, for the stopping rule's histogram of the window (and for
// Options.KeepLatencies): one allocation per window, which the summary's
// in-place sort reuses.
func computeWindow(samples []sample) WindowStats {
	lat := make([]time.Duration, len(samples))
	errs := 0
	for i, s := range samples {
		lat[i] = s.latency
		if !s.ok {
			errs++
		}
	}
	w := WindowStats{Summary: latency.Summarize(lat, errs)} // sorts lat
	w.sorted = lat
	return w
}

// shed drops the newest window's latencies once the stopping rule has its
// histogram (judge runs before), unless Options.KeepLatencies: a run's
// memory then does not grow by a latency per request.
func (c *coordinator) shed(windows []WindowStats) {
	if n := len(windows); n > 0 && !c.opts.KeepLatencies {
		windows[n-1].sorted = nil
	}
}

// verdict says whether a target's latest windows satisfy the convergence
// rule, and if not, why (for progress and failure messages).
type verdict struct {
	converged bool
	why       string
	// slower is set when the target's own latency has converged but sits
	// too far above stable's (rejectSlowerVersion): why, with both figures.
	slower string
}

// blockShare sets how far back the stopping rule looks: it compares the
// last quarter of a target's windows with the quarter before. A distance
// that grows with the requests sent makes the rule scale-free: a fast
// decay (a JIT warm in a few hundred requests) and a slow one (a cache
// that fills over thousands) are both judged over a span of their own
// size, so a slow decay is never mistaken for a plateau because two
// neighbouring windows happen to look alike.
const blockShare = 4

// minBlockRequests is the smallest block the rule compares: 500 requests
// measure a share of slow requests around 10 % to about ±1.5 points, so
// two blocks are told apart by what changed, not by chance.
const minBlockRequests = 500

// slowFactor: a request slower than slowFactor × its block's median
// counts as slow. Cold requests (a cache miss, an endpoint's first
// calls, code not compiled yet) are slow by this measure; their share
// keeps falling while a pod warms even when no percentile moves (a cache
// whose misses fall from 30 % to 2 % leaves p50 and p99 where they are).
const slowFactor = 2

// slowShareZ is how many standard errors the share of slow requests must
// fall by, between two blocks, to count as still improving: chance alone
// does it in ~2 % of looks (which only delays the stop by a window).
const slowShareZ = 2

// blockStats are the robust latency figures of a block of windows: the
// median of all its requests (pooled), the median of the windows' p99s
// (one window spoiled by a noisy neighbour — a GC pause, a preempted
// thread — does not move it) and the share of slow requests.
type blockStats struct {
	p50, p99 time.Duration
	windows  int
	// slow of requests were slower than slowFactor × the block's own p50
	// (so a pod that got uniformly faster keeps its share); requests is 0
	// when some window kept no latencies (then the share is not judged).
	slow, requests int
}

// median is the upper median: for an even count, the stricter (slower)
// of the two middle values, so a block never looks faster than it is.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// progress is how a target's latency moved between the two latest blocks.
type progress struct {
	earlier, recent blockStats
	// improving names the first figure that got better by more than the
	// tolerance ("p50", "p99", "slow requests"), or "" once none does.
	improving string
}

func (p progress) String() string {
	switch p.improving {
	case "p50":
		return fmt.Sprintf("p50 %s → %s", latency.Format(p.earlier.p50), latency.Format(p.recent.p50))
	case "p99":
		return fmt.Sprintf("p99 %s → %s", latency.Format(p.earlier.p99), latency.Format(p.recent.p99))
	case "slow requests":
		return fmt.Sprintf("slow requests (over %d× p50) %.1f%% → %.1f%%", slowFactor, 100*share(p.earlier), 100*share(p.recent))
	}
	return "not improving"
}

func share(b blockStats) float64 { return float64(b.slow) / float64(b.requests) }

// completePrefix is windows without the partial one: only the last window
// can be partial (the coordinator's finish adds it). It returns windows
// itself, not a copy, so the stopping rule's pool (on the first window)
// follows the target's windows from check to check.
func completePrefix(windows []WindowStats) []WindowStats {
	n := len(windows)
	if n > 0 && windows[n-1].Partial {
		windows = windows[:n-1]
	}
	if slices.ContainsFunc(windows, func(w WindowStats) bool { return w.Partial }) {
		return completeWindows(windows) // never built so; judged as before
	}
	return windows
}

// completeWindows drops the partial windows (left over when load stops).
func completeWindows(windows []WindowStats) []WindowStats {
	complete := make([]WindowStats, 0, len(windows))
	for _, w := range windows {
		if !w.Partial {
			complete = append(complete, w)
		}
	}
	return complete
}

// minBlockWindows is minBlockRequests in windows, rounded up.
func (c *Config) minBlockWindows() int { return (minBlockRequests + c.Window - 1) / c.Window }

// MinStop is the fewest requests per target after which the stopping rule
// can call a pod warm: MinRequests, and two blocks of windows.
func (c *Config) MinStop() int64 {
	return max(c.MinRequests, int64(2*max(c.StableWindows, c.minBlockWindows())*c.Window))
}

// progressOf compares the last block of complete windows with the block
// before it; ok is false until there are two blocks. Each block holds
// max(StableWindows, minBlockRequests, windows/blockShare) windows. Its
// blocks come from the target's blockPool (pooled histograms, moved by a
// few windows per check), not from re-pooling every latency.
func (c *Config) progressOf(complete []WindowStats) (p progress, ok bool) {
	n := len(complete)
	pool := poolOf(complete)
	r := c.blockWindows(n)
	if n < 2*r {
		return p, false
	}
	p.earlier, p.recent = pool.blocks(complete, r)
	pool.forget(c.keepFrom(n))
	switch {
	case c.better(p.earlier.p50, p.recent.p50):
		p.improving = "p50"
	case c.better(p.earlier.p99, p.recent.p99):
		p.improving = "p99"
	case c.fewerSlow(p.earlier, p.recent):
		p.improving = "slow requests"
	}
	return p, true
}

// fewerSlow says whether the share of slow requests fell from before to
// now by more than the tolerance and by more than chance explains
// (slowShareZ standard errors of the difference of two proportions).
func (c *Config) fewerSlow(before, now blockStats) bool {
	if before.requests == 0 || now.requests == 0 {
		return false
	}
	b, a := share(before), share(now)
	if b <= (1+c.Tolerance)*a {
		return false
	}
	pooled := float64(before.slow+now.slow) / float64(before.requests+now.requests)
	se := math.Sqrt(pooled * (1 - pooled) * (1/float64(before.requests) + 1/float64(now.requests)))
	return b-a > slowShareZ*se
}

// better says whether now is faster than before by more than the tolerance,
// relative (before > (1+Tolerance) × now) and absolute (by more than
// AbsoluteTolerance). One-sided on purpose: warming up only makes a pod
// faster, so a pod that got slower has not "not converged" — it has
// stopped improving, and a noisy neighbour's spike in the latest windows
// cannot hold the warm-up back.
func (c *Config) better(before, now time.Duration) bool {
	return float64(before) > (1+c.Tolerance)*float64(now) && before-now > c.AbsoluteTolerance.D()
}

// judge applies the stopping rule to one target's windows: the pod is warm
// once, after MinRequests, neither the p50 nor the p99 of its latest block
// of windows improved on the block before by more than the tolerance, and
// its latest StableWindows windows have few enough errors.
//
// stableP99 is the stable pool's reference p99 (0 if no stable window yet);
// it is consulted with CompareToStable and when reject is set (a warm but
// slower version is flagged in verdict.slower).
func (c *Config) judge(windows []WindowStats, stableP99 time.Duration, reject bool) verdict {
	k := c.StableWindows
	complete := completePrefix(windows)
	p, ok := c.progressOf(complete)
	if !ok {
		return verdict{why: fmt.Sprintf("%d of %d windows", len(complete), 2*max(k, c.minBlockWindows()))}
	}
	if got := complete[len(complete)-1].Requests; got < c.MinRequests {
		return verdict{why: fmt.Sprintf("%d of minRequests %d", got, c.MinRequests)}
	}
	// A slower version is judged on its tail alone: once its p99 stopped
	// improving far above stable's, a p50 still getting faster does not
	// make it a good version.
	if reject && stableP99 > 0 && !c.better(p.earlier.p99, p.recent.p99) {
		if why := c.slowerThanStable(p, stableP99); why != "" {
			return verdict{why: why, slower: why}
		}
	}
	for _, w := range complete[len(complete)-k:] {
		if float64(w.Errors) > *c.MaxErrorRatio*float64(w.Count) {
			return verdict{why: fmt.Sprintf("window %d had %d errors in %d requests (maxErrorRatio %g)", w.Index, w.Errors, w.Count, *c.MaxErrorRatio)}
		}
	}
	if p.improving != "" {
		return verdict{why: fmt.Sprintf("still improving over the last %d windows: %s (tolerance %g)", 2*p.recent.windows, p, c.Tolerance)}
	}
	if (c.CompareToStable || reject) && stableP99 == 0 {
		return verdict{why: "waiting for a stable window"}
	}
	if c.CompareToStable {
		p99 := p.recent.p99
		limit := time.Duration(c.StableRatio * float64(stableP99))
		if p99 > limit && p99-stableP99 > c.AbsoluteTolerance.D() {
			return verdict{why: fmt.Sprintf("p99 %s above %g × stable p99 %s", latency.Format(p99), c.StableRatio, latency.Format(stableP99))}
		}
	}
	return verdict{converged: true}
}

// slowerThanStable says why a target whose latency stopped improving sits
// too far above stable's, or "" when it does not. The plateau is the
// median p99 of its latest block of windows, compared with stable's
// reference (the median of its latest windows): one slow window decides
// nothing on either side.
func (c *Config) slowerThanStable(p progress, stableP99 time.Duration) string {
	plateau := p.recent.p99
	if plateau <= time.Duration(c.RejectRatio*float64(stableP99)) || plateau-stableP99 <= c.RejectFloor.D() {
		return ""
	}
	return fmt.Sprintf("p99 settled at %s (%s the %d windows before), %.1f× stable's %s (rejectRatio %g, rejectFloor %s)",
		latency.Format(plateau), latency.Format(p.earlier.p99), p.earlier.windows, float64(plateau)/float64(stableP99), latency.Format(stableP99), c.RejectRatio, c.RejectFloor)
}

// plateauLongEnough says whether a target that has been converged but
// slower than stable for slowerFor windows in a row, out of windows, is a
// slower version rather than a pod still warming: for StableWindows windows
// and for half of its warm-up.
func (c *Config) plateauLongEnough(slowerFor, windows int) bool {
	return slowerFor >= max(c.StableWindows, windows/2)
}

// stableReference is the stable p99 a canary is compared with: the median of
// the last StableWindows stable windows' p99s, so one hiccup on a stable pod
// (a GC pause while it serves live traffic) does not wave a cold canary
// through. 0 when no stable window has completed.
func (c *Config) stableReference(windows []WindowStats) time.Duration {
	var p99s []time.Duration
	for i := len(windows) - 1; i >= 0 && len(p99s) < c.StableWindows; i-- {
		if !windows[i].Partial {
			p99s = append(p99s, windows[i].P99)
		}
	}
	if len(p99s) == 0 {
		return 0
	}
	slices.Sort(p99s)
	return p99s[(len(p99s)-1)/2] // lower median: the stricter bar for an even count
}

// trend renders the last few windows' p99 for failure messages: "p99 of
// windows 8–10: 41.2ms → 30.8ms → 22.0ms (window 1: 412ms); last p50 3.10ms,
// still falling: …".
func trend(windows []WindowStats, n int) string {
	complete := completeWindows(windows)
	if len(complete) == 0 {
		return "no complete window"
	}
	first := max(0, len(complete)-n)
	var vals []string
	for _, w := range complete[first:] {
		vals = append(vals, latency.Format(w.P99))
	}
	lastW := complete[len(complete)-1]
	s := fmt.Sprintf("p99 of windows %d–%d: %s", complete[first].Index, lastW.Index, strings.Join(vals, " → "))
	if first > 0 {
		s += fmt.Sprintf(" (window 1: %s)", latency.Format(complete[0].P99))
	}
	s += "; last p50 " + latency.Format(lastW.P50)
	falling := len(complete) >= 3
	for i := max(1, len(complete)-3); i < len(complete); i++ {
		if complete[i].P99 >= complete[i-1].P99 {
			falling = false
		}
	}
	if falling {
		s += ", still falling: give it more time or requests (deadline, maxRequests)"
	} else if len(complete) >= 3 {
		s += ", not settling: check errors, or widen tolerance / window"
	}
	return s
}
