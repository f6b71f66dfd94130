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
}

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
// lazy-endpoints released at 1.6× their oracle, docs/warmup.md). The p50
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
// max(StableWindows, minBlockRequests, windows/blockShare) windows for the
// p50, windows/tailBlockShare for the tail. Its blocks come from the
// target's blockPool (pooled histograms, moved by a few windows per
// check), not from re-pooling every latency.
func (c *Config) progressOf(complete []WindowStats) (p progress, ok bool) {
	n := len(complete)
	pool := poolOf(complete)
	r := c.blockWindows(n)
	if n < 2*r {
		return p, false
	}
	p.earlier, p.recent = pool.blocks(complete, r)
	p.tailEarlier, p.tailRecent = pool.tailBlocks(complete, c.tailBlockWindows(n), c.AbsoluteTolerance.D())
	pool.forget(c.keepFrom(n))
	switch {
	case c.better(p.earlier.p50, p.recent.p50):
		p.improving = "p50"
	case c.better(p.tailEarlier.p99, p.tailRecent.p99):
		p.improving = "p99"
	case c.fewerSlow(p.tailEarlier, p.tailRecent):
		p.improving = "slow requests"
	}
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
	return float64(before) > (1+c.Tolerance)*float64(now) && before-now > c.AbsoluteTolerance.D()
}

// stableCompareRequests is how many of a canary's latest requests are
// compared with stable (rounded up to whole windows, at least
// StableWindows): 500 pooled requests put the canary's p50 within ~2 % and
// its p99 within ~5–10 % of their true values, so one window (a spike, a GC
// pause) decides nothing and a canary 30 % slower is not taken for one
// within 10 % by chance.
const stableCompareRequests = 500

// compareWindows is stableCompareRequests in windows.
func (c *Config) compareWindows() int {
	return max(c.StableWindows, (stableCompareRequests+c.Window-1)/c.Window)
}

// stableRef is what a canary is compared with: the stable pods' latency
// measured side by side with the same request mix, pooled over their latest
// compareWindows windows (stableReference). The zero value is "no stable
// window yet".
type stableRef struct {
	p50, p99 time.Duration
	windows  int
}

func (r stableRef) known() bool { return r.windows > 0 }

// shedStable drops a stable window's latencies once no stable reference
// reaches it (2 × compareWindows back), unless keep (Options.KeepLatencies).
func (c *Config) shedStable(windows []WindowStats, keep bool) {
	if i := len(windows) - 1 - 2*c.compareWindows(); i >= 0 && !keep {
		windows[i].sorted = nil
	}
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
// reject: a pod that settles far above stable is a slower version
// (rejectSlowerVersion).
func (c *Config) judge(windows []WindowStats, ref stableRef, reject bool) verdict {
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
	// make it a good version — unless the share of its requests above the
	// reject line is still falling (a cache whose misses thin out is still
	// warming, though its p99 stands).
	if reject && ref.known() && !c.better(p.earlier.p99, p.recent.p99) && !c.tailThinning(complete, ref) {
		if why := c.slowerThanStable(p, ref.p99); why != "" {
			return verdict{why: why, slower: why}
		}
	}
	for _, w := range complete[len(complete)-k:] {
		if float64(w.Errors) > *c.MaxErrorRatio*float64(w.Count) {
			return verdict{why: fmt.Sprintf("window %d had %d errors in %d requests (maxErrorRatio %g)", w.Index, w.Errors, w.Count, *c.MaxErrorRatio)}
		}
	}
	// The gate's neighbours (neighboursOnly) are a reference where they
	// can be one: before StableWindows of their windows, and for a pod
	// far above them, the pod's own plateau decides (below).
	own := ""
	switch {
	case !(c.CompareToStable || reject || c.judgeStable) || !ref.known():
	case ref.windows < k && c.neighboursOnly(reject):
		own = fmt.Sprintf("; its neighbours answered %d of %d windows", ref.windows, k)
	case ref.windows < k:
		return verdict{why: fmt.Sprintf("waiting for stable windows (%d of %d)", ref.windows, k)}
	default:
		cmp := c.asFastAsStable(complete, ref)
		switch {
		case cmp.near:
			return verdict{converged: true}
		case c.CompareToStable:
			return verdict{why: cmp.why}
		case p.improving != "":
			return verdict{why: fmt.Sprintf("%s; still improving over the last %d windows: %s (tolerance %g)", cmp.why, 2*p.recent.windows, p, c.Tolerance), improving: true}
		case !c.neighboursOnly(reject) || cmp.within:
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
		return verdict{converged: true, plateau: true, heavyTail: heavyTail(p)}
	}
	if c.CompareToStable || reject {
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
func (c *Config) asFastAsStable(complete []WindowStats, ref stableRef) stableComparison {
	p50, p99 := poolOf(complete).last(complete, c.compareWindows())
	if float64(p50) <= (1+c.Tolerance)*float64(ref.p50) && float64(p99) <= c.StableRatio*float64(ref.p99) {
		return stableComparison{near: true, within: true}
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
	// why says how far off the target is ("" when near).
	why string
	// near: as fast as stable (p50 within Tolerance, p99 within
	// StableRatio); within: p50 within StableRatio of stable's.
	near, within bool
}

// neighboursOnly says whether stable is the warm gate's neighbours: a
// reference for warm, never for rejection (Options.JudgeAgainstStable).
func (c *Config) neighboursOnly(reject bool) bool {
	return c.judgeStable && !reject && !c.CompareToStable
}

// stopState is what the stopping rule remembers of a target from one of its
// windows to the next.
type stopState struct {
	// slowerFor counts the windows in a row at which the target's own
	// latency had stopped improving far above stable's (verdict.slower).
	slowerFor int
	// settled says, for each window since from, whether the target's own
	// latency had stopped improving there, away from stable's (above the
	// reject line or below: verdict.settled, verdict.slower) or on its
	// own plateau (verdict.plateau): settledSpan's share, and (flatRun)
	// how long a plateau has lasted.
	settled []bool
	// ownFor counts the windows in a row judged on its own plateau.
	ownFor int
	// gotFaster: some look found the target still improving (its latency
	// fell during the warm-up), so its plateau must last
	// minPlateauRequests (heavyTailPlateauRequests for a heavy tail).
	gotFaster bool
	// jit is the JVM's own signal, where the pod exposes it (jit.go);
	// nil: latency alone.
	jit *jitSignal
	// from is how many of the target's first windows count towards no
	// plateau's length: those measured while it yielded its CPU
	// (Options.Yield), 0 otherwise.
	from int
}

// restart forgets the plateaus counted so far: the target's CPU came back
// after its first n windows (Options.Yield), and a plateau that ends a
// warm-up or rejects a version must hold at full weight.
func (s *stopState) restart(n int) {
	s.slowerFor, s.settled, s.ownFor, s.from = 0, nil, 0, n
}

// flatRun is how many of the latest windows in a row were flat (settled).
// A pod settled short of stable has a flat latency as one judged on its
// own plateau: next to the gate's neighbours, one whose p50 hovers about
// StableRatio × theirs is judged now on the one rule, now on the other,
// and its run does not restart at each switch. (A slower verdict counts
// too, but it comes only with rejection, where no pod is judged on its own
// plateau.)
func (s *stopState) flatRun() int {
	run := 0
	for i := len(s.settled) - 1; i >= 0 && s.settled[i]; i-- {
		run++
	}
	return run
}

// check is the outcome of one look at a target's windows.
type check struct {
	verdict
	// rejected says why the target is a slower version ("" if it is not).
	rejected string
}

// settleShare: where stable is loaded, a target whose own latency stopped
// improving short of stable's, but with its p50 within StableRatio of
// stable's, is warm once that plateau has lasted this share of its
// warm-up (as long as the warm-up before it, as for rejection): a version a
// little slower than stable, or a pod on a slower node, is not held to the
// deadline. Further off, a plateau is no end: a JIT makes a pod faster in
// steps (tiers compiled at invocation counts of their own), p50 flat at
// 1.9× stable's for thousands of requests between two (the zoo's
// spring-steps); such a pod stays under load until it is as fast as
// stable, is rejected above the reject line, or is accepted near stable at
// the bound (acceptNearStable).
const settleShare = 1.0 / 2

// next judges a target's windows after its latest one (judge) and applies
// what a lasting plateau means where stable is loaded: a target settled
// above the reject line for StableWindows windows in a row and for half of
// its warm-up (plateauLongEnough) is a slower version; one settled short of
// stable's latency for settleShare of its warm-up is warm (a version a
// little slower than stable, a pod on a slower node), unless
// compareToStable holds it to stable's latency. Where the pod exposes its
// JIT's compile time, a stop is held back while the JIT still compiles
// (jitSignal.hold).
func (c *Config) next(s *stopState, windows []WindowStats, ref stableRef, reject bool) check {
	return s.jit.hold(c, c.nextOnLatency(s, windows, ref, reject), windows)
}

// nextOnLatency is next on the latency alone: next adds the JVM's own
// signal (jitSignal.hold) where the pod exposes it.
func (c *Config) nextOnLatency(s *stopState, windows []WindowStats, ref stableRef, reject bool) check {
	v := c.judge(windows, ref, reject)
	// The plateaus' lengths are shares of the windows since the target had
	// its full CPU weight (all of them unless it yielded).
	n := len(windows) - s.from
	if r := c.blockWindows(len(windows)); v.slower != "" && s.from > 0 && n < r {
		// Slower on a block partly measured while the pod yielded its CPU
		// is no verdict yet.
		v.why = fmt.Sprintf("%s; judging it on windows at full CPU weight (%d of %d)", v.why, n, r)
		v.slower = ""
	}
	s.settled = append(s.settled, v.settled != "" || v.slower != "" || v.plateau)
	s.gotFaster = s.gotFaster || v.improving
	if v.plateau {
		s.ownFor++
		// Next to the gate's neighbours, a pod judged on its own plateau
		// must have been for a block (StableWindows) in a row: one whose
		// flat run began settled near theirs and just crossed further off
		// is, like a cache whose p50 hovers about StableRatio × theirs,
		// still warming.
		flat := s.flatRun()
		need := math.Ceil(flatShare * float64(n))
		switch {
		case float64(flat) < need || c.judgeStable && s.ownFor < c.StableWindows:
			v.converged = false
			v.why = fmt.Sprintf("not improving for %d windows in a row, of %.0f (%g of its windows)", flat, need, flatShare)
		case s.gotFaster:
			if span, of, held := c.plateauSpan(s.settled, v.heavyTail); !held {
				heavy := ""
				if v.heavyTail {
					heavy = ", its tail heavy"
				}
				v.converged = false
				v.why = fmt.Sprintf("not improving at %d of its last %d windows, of %.0f (%d requests once it got faster%s)", of, span, math.Ceil(settleHold*float64(span)), plateauRequests(v.heavyTail), heavy)
			}
		}
	} else {
		s.ownFor = 0
	}
	ch := check{verdict: v}
	if v.slower == "" {
		s.slowerFor = 0
	} else if s.slowerFor++; c.plateauLongEnough(s.slowerFor, n) {
		ch.rejected = fmt.Sprintf("%s, for %d windows in a row", v.slower, s.slowerFor)
		return ch
	}
	if v.settled == "" {
		return ch
	}
	if span, of := c.settledSpan(s.settled, n); v.closeToStable && span > 0 {
		ch.converged, ch.settled = true, fmt.Sprintf("settled in %d of its last %d windows at %s", of, span, v.settled)
	}
	return ch
}

// settledSpan says whether a target has stayed settled long enough to be
// warm short of stable's latency: in settleHold of its last windows, as
// many as settleShare of the n since it had its full CPU (and at least
// StableWindows). It returns how many windows were looked at and how many
// of them were settled (span 0: not long enough). A share, not a run in
// a row: a noisy neighbour's spike in the earlier of the two blocks judge
// compares reads as an improvement for a block's length, and breaks a run
// of a pod that is as warm as it gets (a slower node's, next to the gate's
// neighbours: TestGateReleasesASlowerNode).
func (c *Config) settledSpan(settled []bool, n int) (span, of int) {
	need := int(math.Ceil(max(float64(c.StableWindows), settleShare*float64(n))))
	if of, held := heldOver(settled, need); held {
		return need, of
	}
	return 0, 0
}

// settleHold is the share of settledSpan's and plateauSpan's windows that
// must have been settled.
const settleHold = 0.9

// heldOver counts the settled looks among the last span, and says whether
// there were span looks and settleHold of them were settled.
func heldOver(settled []bool, span int) (of int, held bool) {
	for _, ok := range settled[max(0, len(settled)-span):] {
		if ok {
			of++
		}
	}
	return of, len(settled) >= span && float64(of) >= settleHold*float64(span)
}

// plateauSpan says whether a target that got faster has held its plateau
// for plateauRequests(heavy): span is that many requests in windows, of
// how many of the last span looks (since it had its full CPU) were flat,
// and held whether settleHold of them were. A share, not a run in a row:
// with small windows the span is many looks, and a chance "still
// improving" at one of them (a neighbour's spike in the earlier block)
// must not restart it.
func (c *Config) plateauSpan(settled []bool, heavy bool) (span, of int, held bool) {
	span = (plateauRequests(heavy) + c.Window - 1) / c.Window
	of, held = heldOver(settled, span)
	return span, of, held
}

// plateauRequests is how long a target that got faster must hold its
// plateau: heavyTailPlateauRequests while its tail is heavy,
// minPlateauRequests otherwise.
func plateauRequests(heavy bool) int {
	if heavy {
		return heavyTailPlateauRequests
	}
	return minPlateauRequests
}

// tailThinning says whether the share of a target's requests above the
// reject line (rejectRatio × stable's p99, and rejectFloor above it) fell
// from its earlier block to its latest (fewer); false when the blocks kept
// no latencies.
func (c *Config) tailThinning(complete []WindowStats, ref stableRef) bool {
	line := max(time.Duration(c.RejectRatio*float64(ref.p99)), ref.p99+c.RejectFloor.D())
	bn, b, an, a := poolOf(complete).above(line)
	return c.fewer(bn, b, an, a, tailThinZ, 1, 1)
}

// tailThinZ is slowShareZ for tailThinning: a slower version's share above
// the reject line stands still, and a fall by chance (~0.1 % of looks at 3
// standard errors) would restart its count of windows in a row.
const tailThinZ = 3

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

// stableReference is what a canary is compared with (stableRef), from the
// stable pool's windows: the p50 pooled over the latest compareWindows
// windows, at the lower end of stableP50Z standard errors, and the p99
// pooled so too, or over the compareWindows windows before when that is
// lower (a hiccup on a stable pod — a GC pause while it serves users —
// inflates one span, and must not wave a cold canary through). Windows
// without latencies (shed) give the medians of their p50s and p99s
// instead (the lower median: the stricter bar).
func (c *Config) stableReference(windows []WindowStats) stableRef {
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
func pooledOrMedians(windows []WindowStats) (p50, p99 time.Duration) {
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
