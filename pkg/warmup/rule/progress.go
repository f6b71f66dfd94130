package rule

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// blockShare sets how far back the stopping rule looks: it compares the
// last quarter of a target's windows with the quarter before. A distance
// that grows with the requests sent makes the rule scale-free: a fast
// decay (a JIT warm in a few hundred requests) and a slow one (a cache
// that fills over thousands) are both judged over a span of their own
// size, so a slow decay is never mistaken for a plateau because two
// neighbouring windows happen to look alike.
const blockShare = 4

// tailBlockShare is blockShare for the tail (p99, slow requests): it
// compares the last fifth of the windows with the fifth before. A tail
// thins out from a high share of slow requests (a cache's misses, a rare
// endpoint's cold calls): over quarters the earlier block still reaches
// back to where it was thick, and a tail thin since a while was called
// "still improving" for a fifth of the warm-up longer (cache-fill and
// lazy-endpoints released at 1.6× their oracle, docs/stopping-rule.md). The p50
// keeps its quarters: a slow decay (a JIT's late tier, a power law) moves
// less than the tolerance between two blocks of a fifth, and was taken
// for a plateau (jit-slow released with its p50 still more than 10 %
// above its plateau in 14–18 % of runs).
const tailBlockShare = 5

// minBlockRequests is the smallest block the rule compares: 300 requests
// measure a share of slow requests around 10 % to about ±1.7 points (the
// fall must beat chance, slowShareZ) and a p50 to ~2 %, so two blocks are
// told apart by what changed, not by chance.
const minBlockRequests = 300

// slowFactor: a request slower than slowFactor × its block's median
// counts as slow (and AbsoluteTolerance above it: slowOver). Cold requests
// (a cache miss, an endpoint's first calls, code not compiled yet) are
// slow by this measure; their share keeps falling while a pod warms even
// when no percentile moves (a cache whose misses fall from 30 % to 2 %
// leaves p50 and p99 where they are).
const slowFactor = 2

// slowOver is the latency above which a request of a block with that p50
// is slow: slowFactor × p50, and at least floor (AbsoluteTolerance) above
// it. On a service answering in 30 µs a scheduler hiccup of 0.1–2 ms is
// many times its p50, and the share of hiccups moves with the machine's
// load, not with warming: a pod warm from its start, its p50 and p99 moving
// by far less than AbsoluteTolerance, was held past maxRequests as "still
// improving" on slow requests (a unit test over mTLS, in 1 run in 5).
// Speeding up a request by less than AbsoluteTolerance is no improvement,
// as for p50 and p99.
func slowOver(p50, floor time.Duration) time.Duration {
	return max(slowFactor*p50, p50+floor)
}

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
	// and AbsoluteTolerance above it (slowOver: a pod that got uniformly
	// faster keeps its share; counted in the tail's blocks); requests is 0
	// when some window kept no latencies (then the share is not judged).
	slow, requests int
	// slowDispersion is how many times a binomial share's variance the
	// block's share of slow requests has, from its windows' scatter
	// (dispersion); 0 or 1: a binomial's (past poolBudget, where windows
	// are histograms, and in the run's first windows).
	slowDispersion float64
}

// median is the upper median: for an even count, the stricter (slower)
// of the two middle values, so a block never looks faster than it is.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// progress is how a target's latency moved between the two latest blocks:
// its p50 between two of a quarter of its windows each (earlier, recent),
// its tail — p99 and slow requests — between two of a fifth
// (tailEarlier, tailRecent: tailBlockShare).
type progress struct {
	earlier, recent         blockStats
	tailEarlier, tailRecent blockStats
	// improving names the first figure that got better by more than the
	// tolerance ("p50", "p99", "slow requests"), or "" once none does.
	improving string
}

func (p progress) String() string {
	switch p.improving {
	case "p50":
		return fmt.Sprintf("p50 %s → %s", latency.Format(p.earlier.p50), latency.Format(p.recent.p50))
	case "p99":
		return fmt.Sprintf("p99 %s → %s", latency.Format(p.tailEarlier.p99), latency.Format(p.tailRecent.p99))
	case "slow requests":
		return fmt.Sprintf("slow requests (over %d× p50 and absoluteTolerance above it) %.1f%% → %.1f%%", slowFactor, 100*share(p.tailEarlier), 100*share(p.tailRecent))
	}
	return "not improving"
}

func share(b blockStats) float64 { return float64(b.slow) / float64(b.requests) }

// progressOf compares the last block of complete windows with the block
// before it; ok is false until there are two blocks. Each block holds
// max(StableWindows, minBlockRequests, windows/blockShare) windows for the
// p50, windows/tailBlockShare for the tail. Its blocks come from the
// target's blockPool (pooled histograms, moved by a few windows per
// check), not from re-pooling every latency.
func (c *Config) progressOf(pool *blockPool, complete []Window) (p progress, ok bool) {
	n := len(complete)
	pool.sync(complete)
	r := c.blockWindows(n)
	if n < 2*r {
		return p, false
	}
	p.earlier, p.recent = pool.blocks(complete, r)
	p.tailEarlier, p.tailRecent = pool.tailBlocks(complete, c.tailBlockWindows(n), c.AbsoluteTolerance)
	pool.forget(c.keepFrom(n))
	p.improving = c.improvement(p)
	return p, true
}

// fewerSlow says whether the share of slow requests fell from before to
// now by more than the tolerance and by more than chance explains
// (slowShareZ standard errors of the difference of two proportions, each
// block's variance times its dispersion: a neighbour's episode in the
// earlier block is not the pod getting faster).
func (c *Config) fewerSlow(before, now blockStats) bool {
	return c.fewer(before.slow, before.requests, now.slow, now.requests, slowShareZ, before.slowDispersion, now.slowDispersion)
}

// fewer says whether a share fell from bn of b requests to an of a by more
// than the tolerance and by more than chance explains (z standard errors
// of the difference of two proportions, the variance of each times its
// dispersion, bd and ad: at least 1).
func (c *Config) fewer(bn, b, an, a int, z, bd, ad float64) bool {
	if b == 0 || a == 0 {
		return false
	}
	before, now := float64(bn)/float64(b), float64(an)/float64(a)
	if before <= (1+c.Tolerance)*now {
		return false
	}
	pooled := float64(bn+an) / float64(b+a)
	v := pooled * (1 - pooled)
	se := math.Sqrt(max(1, bd)*v/float64(b) + max(1, ad)*v/float64(a))
	return before-now > z*se
}

// better says whether now is faster than before by more than the tolerance,
// relative (before > (1+Tolerance) × now) and absolute (by more than
// AbsoluteTolerance). One-sided on purpose: warming up only makes a pod
// faster, so a pod that got slower has not "not converged" — it has
// stopped improving, and a noisy neighbour's spike in the latest windows
// cannot hold the warm-up back.
func (c *Config) better(before, now time.Duration) bool {
	return float64(before) > (1+c.Tolerance)*float64(now) && before-now > c.AbsoluteTolerance
}

// improvement names what the recent blocks still improve on ("p50", "p99",
// "slow requests"), the first that does; "" when none does.
func (c *Config) improvement(p progress) string {
	switch {
	case c.better(p.earlier.p50, p.recent.p50):
		return "p50"
	case c.better(p.tailEarlier.p99, p.tailRecent.p99):
		return "p99"
	case c.fewerSlow(p.tailEarlier, p.tailRecent):
		return "slow requests"
	}
	return ""
}
