package rule

import (
	"fmt"
	"time"
)

// Rule is the stopping rule of one warm-up: its config, and the stable
// pods' windows every pod is compared with. Build it with New, then one Pod
// per target. It does no I/O and keeps no clock: what it decides follows
// from what it was given, in the order given.
type Rule struct {
	c Config
	// stable are the stable pool's windows; a window's latencies are let
	// go once no reference reaches it (2 × compareWindows back).
	stable []Window
	// ref is stableReference of stable, worked out once per stable window.
	ref      stableRef
	refStale bool
}

// New is the rule for config c (from a validated warm-up config).
func New(c Config) (*Rule, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("stopping rule: %w", err)
	}
	return &Rule{c: c}, nil
}

// MinStop is the fewest requests per pod after which the rule can call
// it warm.
func (r *Rule) MinStop() int64 { return r.c.MinStop() }

// Stable takes in the stable pool's next window (measured side by side
// with the pods', the same request mix).
func (r *Rule) Stable(w Window) {
	r.stable = append(r.stable, w)
	if i := len(r.stable) - 1 - 2*r.c.compareWindows(); i >= 0 {
		r.stable[i].sorted = nil
	}
	r.refStale = true
}

// StableP99 is the p99 every pod's is compared with (0 before any stable
// window).
func (r *Rule) StableP99() time.Duration { return r.reference().p99 }

func (r *Rule) reference() stableRef {
	if r.refStale {
		r.ref, r.refStale = r.c.stableReference(r.stable), false
	}
	return r.ref
}

// Pod is the rule's state for one target: its windows, the blocks it
// compares (blockPool), the plateaus counted so far and its JIT signal.
type Pod struct {
	rule    *Rule
	windows []Window
	stop    stopState
	// look is what the latest look said (Decision.Look).
	look string
}

// NewPod starts judging a target; jit: it exposes its JIT's compile time
// (Reading), which then holds a stop back while it still compiles.
func (r *Rule) NewPod(jit bool) *Pod {
	p := &Pod{rule: r, stop: stopState{pool: newBlockPool()}, look: "no complete window yet"}
	if jit {
		p.stop.jit = &jitSignal{}
	}
	return p
}

// Reading takes in a reading of the pod's JIT (ignored for a pod judged on
// latency alone). Readings come in request order, before the window they
// precede.
func (p *Pod) Reading(rd Reading) {
	if p.stop.jit != nil {
		p.stop.jit.readings = append(p.stop.jit.readings, rd)
	}
}

// Window takes in the pod's next window and decides: keep loading, warm,
// or rejected as a slower version. Each window is judged, whatever was
// decided before: the caller stops feeding a pod it has done with.
func (p *Pod) Window(w Window) Decision {
	p.windows = append(p.windows, w)
	ch := p.rule.c.next(&p.stop, p.windows, p.rule.reference())
	p.windows[len(p.windows)-1].sorted = nil // the pool holds them while a block reaches them
	p.look = ch.why
	return decisionOf(ch)
}

// AtBound decides a pod not warm when a bound (deadline, maxRequests) ends
// its warm-up: accepted near stable (acceptNearStable), or failed, with
// what its latest look said.
func (p *Pod) AtBound() Decision {
	if why, near := p.rule.c.nearStable(p.stop.pool, p.windows, p.rule.StableP99()); near {
		return Decision{Kind: AcceptedNearStable, Reason: why, Look: p.look}
	}
	return Decision{Kind: Failed, Reason: p.look, Look: p.look}
}

// Restart counts the plateaus a verdict needs from the pod's next window
// on: its CPU came back after a yield. Its windows and blocks carry on.
func (p *Pod) Restart() { p.stop.restart(len(p.windows)) }

// JIT says what the rule made of the pod's JIT signal ("" for a pod
// judged on latency alone).
func (p *Pod) JIT() string {
	if p.stop.jit == nil {
		return ""
	}
	return p.stop.jit.notes()
}
