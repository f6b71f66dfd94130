package rule

import (
	"fmt"
	"math"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// stopState is what the stopping rule remembers of a target from one of its
// windows to the next.
type stopState struct {
	// pool holds the blocks of the target's windows the rule compares
	// (blockPool), moved by a few windows per look.
	pool *blockPool
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
	// (the warm-up's yield: Pod.Restart), 0 otherwise.
	from int
}

// restart forgets the plateaus counted so far: the target's CPU came back
// after its first n windows (Pod.Restart), and a plateau that ends a
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
func (c *Config) next(s *stopState, windows []Window, ref stableRef) check {
	return s.jit.hold(c, c.nextOnLatency(s, windows, ref), windows)
}

// nextOnLatency is next on the latency alone: next adds the JVM's own
// signal (jitSignal.hold) where the pod exposes it.
func (c *Config) nextOnLatency(s *stopState, windows []Window, ref stableRef) check {
	v := c.judge(s.pool, windows, ref)
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
		case float64(flat) < need || c.JudgeAgainstStable && s.ownFor < c.StableWindows:
			v.converged = false
			v.why = fmt.Sprintf("not improving for %d windows in a row, of %.0f (%g of its windows)", flat, need, flatShare)
		case s.gotFaster:
			heavy := ""
			if v.heavyTail {
				heavy = ", its tail heavy"
			}
			span, of, held := c.plateauSpan(s.settled, v.heavyTail)
			if !held {
				v.converged = false
				v.why = fmt.Sprintf("not improving at %d of its last %d windows, of %.0f (%d requests once it got faster%s)", of, span, math.Ceil(settleHold*float64(span)), plateauRequests(v.heavyTail), heavy)
				break
			}
			v.by = fmt.Sprintf("on its own plateau: not improving at its last %d window(s) in a row (at least flatShare %g of its %d) and at %d of its last %d (%d requests once it got faster%s)%s",
				flat, flatShare, n, of, span, plateauRequests(v.heavyTail), heavy, v.own)
		default:
			v.by = fmt.Sprintf("on its own plateau: not improving at its last %d window(s) in a row (at least flatShare %g of its %d; it never got faster)%s", flat, flatShare, n, v.own)
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
		ch.by = fmt.Sprintf("settled near stable: p50 within stableRatio %g × stable's and not improving in %d of its last %d windows (settleShare %g of its warm-up), short of as fast as stable: %s",
			c.StableRatio, of, span, settleShare, v.settled)
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
func (c *Config) tailThinning(pool *blockPool, complete []Window, ref stableRef) bool {
	line := max(time.Duration(c.RejectRatio*float64(ref.p99)), ref.p99+c.RejectFloor)
	bn, b, an, a := pool.above(line)
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
	if plateau <= time.Duration(c.RejectRatio*float64(stableP99)) || plateau-stableP99 <= c.RejectFloor {
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
