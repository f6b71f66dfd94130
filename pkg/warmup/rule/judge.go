package rule

import (
	"fmt"

	"github.com/danki-dev/danki/pkg/latency"
)

// verdict says whether a target's latest windows satisfy the convergence
// rule, and if not, why (for progress and failure messages).
type verdict struct {
	converged bool
	why       string
	// slower is set when the target's own latency has converged but sits
	// too far above stable's (rejectSlowerVersion): why, with both figures.
	slower string
	// settled is set when the target's own latency has stopped improving
	// but is not yet as fast as stable's, below the reject line: how far
	// off it is (see stopState). On a converged check: why it converged.
	settled string
	// closeToStable: its p50 is within StableRatio of stable's.
	closeToStable bool
	// plateau: converged on its own plateau, without stable (see flatShare).
	plateau bool
	// heavyTail: on its own plateau, its tail is still heavy (heavyTail):
	// its plateau must last heavyTailPlateauRequests.
	heavyTail bool
	// improving: its latest block of windows was faster than the block
	// before (progressOf).
	improving bool
	// by is, on a converged check, the rule that called it warm and its
	// figures (Decision.Reason): "as fast as stable: …" here, the
	// plateaus' (nextOnLatency) and the JIT's (jitSignal.hold) parts
	// added where they decide.
	by string
	// own is what made a pod next to the gate's neighbours judged on its
	// own plateau ("" for a lone pod).
	own string
}

// judge applies the stopping rule to one target's windows. Where stable
// pods are loaded side by side (ref known: rejectSlowerVersion's default,
// compareToStable), a pod is warm once its latest requests (compareWindows)
// are as fast as stable's: pooled p50 within Tolerance of stable's p50 and
// pooled p99 within StableRatio × stable's p99 — the warm answer itself is
// the reference, so a pod that gets faster in steps (a JIT's tiers) is not
// taken for warm on a flat stretch between two steps. A pod whose own
// latency stopped improving elsewhere is reported as settled (verdict.settled,
// verdict.slower above the reject line): next decides what a settled
// plateau that lasts means. Without stable, judge calls the pod warm
// (verdict.plateau) once, after MinStop, its latest block of windows is no
// better than the block before (progressOf), and next holds that back
// until it has held for flatShare of its windows (and minPlateauRequests
// once the pod got faster). Either way the latest StableWindows windows
// must have few enough errors.
//
// c.Reject: a pod that settles far above stable is a slower version
// (rejectSlowerVersion). pool is the target's blockPool.
func (c *Config) judge(pool *blockPool, windows []Window, ref stableRef) verdict {
	k := c.StableWindows
	complete := completePrefix(windows)
	p, ok := c.progressOf(pool, complete)
	if !ok {
		return verdict{why: fmt.Sprintf("%d of %d windows", len(complete), 2*max(k, c.minBlockWindows()))}
	}
	if got := complete[len(complete)-1].Requests; got < c.MinRequests {
		return verdict{why: fmt.Sprintf("%d of minRequests %d", got, c.MinRequests)}
	}
	// A slower version is judged on its tail alone: once its p99 stopped
	// improving far above stable's, a p50 still getting faster does not
	// make it a good version — unless the share of its requests above the
	// reject line is still falling (a cache whose misses thin out is still
	// warming, though its p99 stands).
	if c.Reject && ref.known() && !c.better(p.earlier.p99, p.recent.p99) && !c.tailThinning(pool, complete, ref) {
		if why := c.slowerThanStable(p, ref.p99); why != "" {
			return verdict{why: why, slower: why}
		}
	}
	for _, w := range complete[len(complete)-k:] {
		if float64(w.Errors) > c.MaxErrorRatio*float64(w.Count) {
			return verdict{why: fmt.Sprintf("window %d had %d errors in %d requests (maxErrorRatio %g)", w.Index, w.Errors, w.Count, c.MaxErrorRatio)}
		}
	}
	// The gate's neighbours (neighboursOnly) are a reference where they
	// can be one: before StableWindows of their windows, and for a pod
	// far above them, the pod's own plateau decides (below).
	own := ""
	switch {
	case !(c.CompareToStable || c.Reject || c.JudgeAgainstStable) || !ref.known():
	case ref.windows < k && c.neighboursOnly():
		own = fmt.Sprintf("; its neighbours answered %d of %d windows", ref.windows, k)
	case ref.windows < k:
		return verdict{why: fmt.Sprintf("waiting for stable windows (%d of %d)", ref.windows, k)}
	default:
		cmp := c.asFastAsStable(pool, complete, ref)
		switch {
		case cmp.near:
			return verdict{converged: true, by: cmp.by}
		case c.CompareToStable:
			return verdict{why: cmp.why}
		case p.improving != "":
			return verdict{why: fmt.Sprintf("%s; still improving over the last %d windows: %s (tolerance %g)", cmp.why, 2*p.recent.windows, p, c.Tolerance), improving: true}
		case !c.neighboursOnly() || cmp.within:
			return verdict{why: cmp.why + "; its own latency has stopped improving", settled: cmp.why, closeToStable: cmp.within}
		}
		// Settled further above its neighbours than StableRatio, the pod
		// may run on a slower node, or sit between two JIT tiers: the
		// gate cannot tell which (it rejects nothing), and holding it for
		// half its warm-up in a row, which a noisy neighbour's spikes
		// keep resetting, kept a slower node's pod out until maxRequests.
		// Its own plateau says when it is warm, as for a lone pod.
		own = "; p50 over stableRatio × its neighbours'"
	}
	if p.improving != "" {
		return verdict{why: fmt.Sprintf("still improving over the last %d windows: %s (tolerance %g)%s", 2*p.recent.windows, p, c.Tolerance, own), improving: true}
	}
	if own != "" {
		return verdict{converged: true, plateau: true, heavyTail: heavyTail(p), own: own}
	}
	if c.CompareToStable || c.Reject {
		return verdict{why: "waiting for a stable window"}
	}
	return verdict{converged: true, plateau: true, heavyTail: heavyTail(p)}
}

// flatShare: without stable, a target is warm once its own latency has
// not improved (judge) at every window for this share of its windows: a
// plateau that grows with the warm-up, so one look at two flat blocks (a
// spike in the latest) ends nothing.
const flatShare = 0.05

// minPlateauRequests: a target that got faster during its warm-up must
// also hold its plateau over this many requests (rounded up to windows;
// at settleHold of them: plateauSpan), the smallest block, and over
// heavyTailPlateauRequests while its tail is heavy. Where the warm-up is
// long the plateau is flatShare of it anyway. A pod warm from its first
// request never got faster: it needs only flatShare (released after
// MinStop).
const minPlateauRequests = minBlockRequests

// heavyTailPlateauRequests is minPlateauRequests for a heavy tail
// (heavyTail), twice the smallest block: a tail that thins too slowly to
// show between two neighbouring blocks of 300 requests (a cache's misses,
// a rare endpoint's cold calls, still several % of the requests 10–50×
// slower) passes one look, or two, by chance, not a plateau whose first
// and last blocks are apart. A thin tail moves with the body, whose p50
// a block pins within a few %: a pod whose JIT made every request faster
// at once is seen flat by a block's plateau (the zoo's jit-fast, released
// at 1.44× its oracle instead of 1.78×, every run still within the goal
// after the stop).
const heavyTailPlateauRequests = 2 * minBlockRequests

// heavyTailRatio: a tail is heavy when the latest tail block's median
// window p99 is more than this many times its p50. A lognormal body up to
// σ ≈ 0.47 (a JVM's spread of a thin tail) stays under it; a few % of
// requests 10–50× slower (misses, cold endpoints) lift every window's p99
// far over it, a spike or a neighbour's episode only a window's or two.
const heavyTailRatio = 3

// heavyTail says whether a target's latest tail block is heavy
// (heavyTailRatio).
func heavyTail(p progress) bool {
	return float64(p.tailRecent.p99) > heavyTailRatio*float64(p.tailRecent.p50)
}

// asFastAsStable says whether a target's latest requests are as fast as
// stable's (ref), and if not, how far off they are. The target's figures
// are pooled over its last compareWindows windows but the one with the
// highest p99 (one window spoiled by a GC pause or a neighbour decides
// nothing), each taken at the upper end of its one-standard-error range
// (distribution-free, by rank: the p50 ± √n/2 ranks): a pod is called as
// fast as stable when the requests say so, not when it is as likely above
// the bar as below.
func (c *Config) asFastAsStable(pool *blockPool, complete []Window, ref stableRef) stableComparison {
	p50, p99 := pool.last(complete, c.compareWindows())
	if float64(p50) <= (1+c.Tolerance)*float64(ref.p50) && float64(p99) <= c.StableRatio*float64(ref.p99) {
		return stableComparison{near: true, within: true,
			by: fmt.Sprintf("as fast as stable: p50 %s within tolerance %g of stable's %s and p99 %s within stableRatio %g × stable's %s, over its last %d windows",
				latency.Format(p50), c.Tolerance, latency.Format(ref.p50), latency.Format(p99), c.StableRatio, latency.Format(ref.p99), c.compareWindows())}
	}
	return stableComparison{
		why: fmt.Sprintf("p50 %s, p99 %s over its last %d windows vs stable's %s and %s (within tolerance %g and stableRatio %g to be warm)",
			latency.Format(p50), latency.Format(p99), c.compareWindows(), latency.Format(ref.p50), latency.Format(ref.p99), c.Tolerance, c.StableRatio),
		within: float64(p50) <= c.StableRatio*float64(ref.p50),
	}
}

// stableComparison is a target's latest requests next to stable's
// (asFastAsStable).
type stableComparison struct {
	// why says how far off the target is ("" when near); by, when near,
	// the rule and figures that made it warm.
	why, by string
	// near: as fast as stable (p50 within Tolerance, p99 within
	// StableRatio); within: p50 within StableRatio of stable's.
	near, within bool
}
