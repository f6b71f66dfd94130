package warmup

import (
	"cmp"
	"fmt"
	"time"
)

// Yield is a run whose targets start with their CPU lowered (Options.Yield:
// the step's yieldCPU, pods/resize to the least weight so the stable pods'
// users run first).
//
// A pod warm while it yields is warm at any weight, so that convergence
// stands. A verdict against it does not: a pod starved of CPU may only look
// slower. So the run ends the yield — Restore, once — at the first sign the
// missing CPU could explain (a rejection, a target starved: no window
// complete for yieldStall), when a target has had half of maxRequests, or
// after For, and goes on at full weight in the same run:
// the windows so far are kept (the stopping rule's blocks carry on, a
// slow-paced warm-up does not start again from nothing), while the plateaus
// a rejection or a settled short-of-stable plateau must last are counted
// from the restore, on windows measured at full weight only.
type Yield struct {
	// For is how long the targets yield at most; Run ends the yield by half
	// its deadline whatever For says (0: half the deadline).
	For time.Duration
	// Stall is how long a yielding target may go without a complete
	// window before it counts as starved and the yield ends (0:
	// yieldStall).
	Stall time.Duration
	// Restore gives the targets their CPU back and returns once that is
	// applied (or given up on). Run calls it at most once, on a goroutine
	// of its own while the load goes on, and returns only after it
	// returned. Run does not call it when every target converged while
	// yielding: the caller restores then.
	Restore func()
}

// YieldResult says how a run's yield (Options.Yield) went.
type YieldResult struct {
	// Ended says why the run gave the targets their CPU back before they
	// were all warm; "" when they were warm while yielding.
	Ended string `json:"ended,omitempty"`
	// After is the requests the busiest target had had by then.
	After int64 `json:"after,omitempty"`
}

// String is the yield's part of a run's message: "" when the targets were
// warm while yielding.
func (y *YieldResult) String() string {
	if y == nil || y.Ended == "" {
		return ""
	}
	return fmt.Sprintf("judged at full CPU weight after %d requests while yielding (%s)", y.After, y.Ended)
}

// yieldStall: a yielding target with no window complete for this long is
// starved, not warming (the node's CPU is all taken, and the least weight
// gets next to none of it: in the lab, with its two cores busy, a cold JVM
// at 1m answered 36 requests in 2.5 min, 10 s each): the yield ends. A
// window of 100 requests at the lab's slowest paced warm-up (7.5 qps, 5 %
// of requests taking 1 s) takes ~15 s.
const yieldStall = 30 * time.Second

// yieldPhase is where a run's yield stands.
type yieldPhase int

const (
	yieldNone      yieldPhase = iota // no Options.Yield, or it is over
	yieldOn                          // the targets yield
	yieldRestoring                   // Restore is running
)

// stall is how long a yielding target may go without a complete window
// (Yield.Stall, or yieldStall).
func (y *Yield) stall() time.Duration { return cmp.Or(y.Stall, yieldStall) }

// yieldBound is how long a run's targets yield at most: Yield.For, capped
// at half the deadline.
func yieldBound(y *Yield, deadline time.Duration) time.Duration {
	half := deadline / 2
	if y.For <= 0 || y.For > half {
		return half
	}
	return y.For
}

// yieldClock is a yield's two clocks: its bound (yieldBound) ends it,
// and starved looks for a target starved of CPU (checkStarved). Without a
// yield both channels are nil: the run's select never takes them.
type yieldClock struct {
	bound        time.Duration
	end, starved <-chan time.Time
	stop         func()
}

// startYield starts the yield's clocks, when the run yields
// (Options.Yield with a Restore).
func (c *coordinator) startYield() yieldClock {
	if c.opts.Yield == nil || c.opts.Yield.Restore == nil {
		return yieldClock{stop: func() {}}
	}
	c.yield, c.res.Yield = yieldOn, &YieldResult{}
	bound := yieldBound(c.opts.Yield, c.cfg.Deadline.D())
	end := time.NewTimer(time.Until(c.start.Add(bound)))
	look := time.NewTicker(c.opts.Yield.stall() / 6)
	now := time.Now()
	for _, st := range c.canary {
		st.lastWindow = now
	}
	return yieldClock{bound: bound, end: end.C, starved: look.C, stop: func() {
		end.Stop()
		look.Stop()
	}}
}

// endYield starts Restore (once) and records why; verdicts against a
// target stay deferred until it returned (onRestored).
func (c *coordinator) endYield(why string) {
	if c.yield != yieldOn {
		return
	}
	c.yield = yieldRestoring
	var after int64
	for _, st := range c.canary {
		after = max(after, st.rec.total.Load())
	}
	c.res.Yield.Ended, c.res.Yield.After = why, after
	c.opts.Logger.Info("not warm while yielding CPU; giving it back, judging at full CPU weight", "why", why, "requests", after)
	done := make(chan struct{})
	c.restoreDone = done
	go func() {
		defer close(done)
		c.opts.Yield.Restore()
	}()
}

// restoring fires once the Restore endYield started has returned; nil (a
// case the run's select never takes) unless one is running.
func (c *coordinator) restoring() <-chan struct{} {
	if c.yield != yieldRestoring {
		return nil
	}
	return c.restoreDone
}

// onRestored: the targets have their CPU back. Windows from here on are at
// full weight; the plateaus a verdict against a target needs start again
// (rule.Pod.Restart), its windows and blocks do not; its pace forgets
// what it measured starved (pacer.restart).
func (c *coordinator) onRestored() {
	c.yield = yieldNone
	for _, st := range c.canary {
		if !st.res.Converged {
			st.pod.Restart()
			st.pacer.restart()
		}
	}
}

// checkStarved ends the yield when a target not yet warm has had no window
// complete for yieldStall (since the load started, or its latest window).
func (c *coordinator) checkStarved(now time.Time) {
	if c.yield != yieldOn {
		return
	}
	for _, st := range c.canary {
		if st.res.Converged || st.done {
			continue
		}
		if since := now.Sub(st.lastWindow); since >= c.opts.Yield.stall() {
			c.endYield(fmt.Sprintf("%s starved: no window of %d requests complete in %s", st.res.Target, c.cfg.Window, since.Round(time.Second)))
			return
		}
	}
}

// deferVerdict says whether a verdict against a target must wait: its
// CPU is still lowered, or being given back.
func (c *coordinator) deferVerdict() bool { return c.yield != yieldNone }
