package warmup

import (
	"fmt"
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
}

// sample is one completed request.
type sample struct {
	latency time.Duration
	ok      bool
}

// computeWindow copies the latencies into scratch (reused between calls to
// avoid allocation) and summarizes them.
func computeWindow(samples []sample, scratch []time.Duration) (WindowStats, []time.Duration) {
	scratch = scratch[:0]
	errs := 0
	for _, s := range samples {
		scratch = append(scratch, s.latency)
		if !s.ok {
			errs++
		}
	}
	return WindowStats{Summary: latency.Summarize(scratch, errs)}, scratch
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

// judge applies the convergence rule to one target's complete windows.
// stableP99 is the stable pool's reference p99 (0 if no stable window yet);
// it is consulted with CompareToStable and when reject is set (a converged
// but slower version is flagged in verdict.slower).
func (c *Config) judge(windows []WindowStats, stableP99 time.Duration, reject bool) verdict {
	k := c.StableWindows
	if reject && stableP99 > 0 {
		if why := c.slowerThanStable(windows, stableP99); why != "" {
			return verdict{why: why, slower: why}
		}
	}
	if len(windows) < k {
		return verdict{why: fmt.Sprintf("%d of %d windows", len(windows), k)}
	}
	last := windows[len(windows)-k:]
	if got := last[k-1].Requests; got < c.MinRequests {
		return verdict{why: fmt.Sprintf("%d of minRequests %d", got, c.MinRequests)}
	}
	for _, w := range last {
		if float64(w.Errors) > *c.MaxErrorRatio*float64(w.Count) {
			return verdict{why: fmt.Sprintf("window %d had %d errors in %d requests (maxErrorRatio %g)", w.Index, w.Errors, w.Count, *c.MaxErrorRatio)}
		}
	}
	for _, q := range []struct {
		name string
		get  func(WindowStats) time.Duration
	}{{"p50", func(w WindowStats) time.Duration { return w.P50 }}, {"p99", func(w WindowStats) time.Duration { return w.P99 }}} {
		lo, hi := q.get(last[0]), q.get(last[0])
		for _, w := range last[1:] {
			lo, hi = min(lo, q.get(w)), max(hi, q.get(w))
		}
		if !c.within(lo, hi) {
			return verdict{why: fmt.Sprintf("%s of last %d windows spread %s–%s", q.name, k, latency.Format(lo), latency.Format(hi))}
		}
	}
	if (c.CompareToStable || reject) && stableP99 == 0 {
		return verdict{why: "waiting for a stable window"}
	}
	if reject {
		// Far above stable and not (yet) judged a plateau: still warming,
		// or slower; slowerThanStable tells the two apart.
		if plateau := c.stableReference(windows); plateau > time.Duration(c.RejectRatio*float64(stableP99)) && plateau-stableP99 > c.RejectFloor.D() {
			return verdict{why: fmt.Sprintf("p99 %s is %.1f× stable's %s: still warming, or slower", latency.Format(plateau), float64(plateau)/float64(stableP99), latency.Format(stableP99))}
		}
	}
	if c.CompareToStable {
		p99 := last[k-1].P99
		limit := time.Duration(c.StableRatio * float64(stableP99))
		if p99 > limit && p99-stableP99 > c.AbsoluteTolerance.D() {
			return verdict{why: fmt.Sprintf("p99 %s above %g × stable p99 %s", latency.Format(p99), c.StableRatio, latency.Format(stableP99))}
		}
	}
	return verdict{converged: true}
}

// slowerThanStable says why a target's latency has plateaued too far above
// stable's, or "" when it has not (or it is still improving). The plateau
// is the median of the last k windows' p99s (as stable's reference is, so
// one slow window decides nothing); it has stopped improving when it is
// not better than the median of the k windows before by more than the
// tolerance. One-sided on purpose: a pod still getting faster is warming,
// not slow.
func (c *Config) slowerThanStable(windows []WindowStats, stableP99 time.Duration) string {
	k := c.StableWindows
	complete := windows[:len(windows):len(windows)]
	for len(complete) > 0 && complete[len(complete)-1].Partial {
		complete = complete[:len(complete)-1]
	}
	if len(complete) < 2*k || complete[len(complete)-1].Requests < c.MinRequests {
		return ""
	}
	plateau := c.stableReference(complete)
	before := c.stableReference(complete[:len(complete)-k])
	if float64(before) > (1+c.Tolerance)*float64(plateau) {
		return "" // still improving
	}
	if plateau <= time.Duration(c.RejectRatio*float64(stableP99)) || plateau-stableP99 <= c.RejectFloor.D() {
		return ""
	}
	return fmt.Sprintf("p99 settled at %s (%s %d windows before), %.1f× stable's %s (rejectRatio %g, rejectFloor %s)",
		latency.Format(plateau), latency.Format(before), k, float64(plateau)/float64(stableP99), latency.Format(stableP99), c.RejectRatio, c.RejectFloor)
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

// within reports whether the spread lo..hi is inside the tolerance: relative
// (hi/lo - 1 <= Tolerance) or absolute (hi - lo <= AbsoluteTolerance).
func (c *Config) within(lo, hi time.Duration) bool {
	if hi-lo <= c.AbsoluteTolerance.D() {
		return true
	}
	return lo > 0 && float64(hi)/float64(lo)-1 <= c.Tolerance
}

// trend renders the last few windows' p99 for failure messages: "p99 of
// windows 8–10: 41.2ms → 30.8ms → 22.0ms (window 1: 412ms); last p50 3.10ms,
// still falling: …".
func trend(windows []WindowStats, n int) string {
	var complete []WindowStats
	for _, w := range windows {
		if !w.Partial {
			complete = append(complete, w)
		}
	}
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
