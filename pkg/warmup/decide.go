package warmup

import (
	"context"
	"fmt"
	"time"

	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// bound says when the stopping rule decided: after a window, or when a
// bound ended a target's warm-up before it converged.
type bound int

const (
	atWindow      bound = iota // after one of its windows (rule.Pod.Window)
	atMaxRequests              // its runner sent maxRequests (rule.Pod.AtBound)
	atDeadline                 // the run's deadline passed (rule.Pod.AtBound)
)

// apply acts on the stopping rule's decision about st: the one place a
// decision changes a target and, through it, the run. A rejection waits
// while the target yields its CPU (deferVerdict); a failure at the deadline
// is the run's, over every target (onDeadline).
func (c *coordinator) apply(st *targetState, d rule.Decision, at bound) {
	switch d.Kind {
	case rule.KeepLoading:
		st.waiting = d.Look
	case rule.Warm:
		st.waiting, st.res.Warm, st.res.Settled = d.Look, d.Reason, d.Settled
		c.markConverged(st)
		if c.cfg.Converging() {
			st.runner.stop()
		}
	case rule.RejectedSlower:
		st.waiting = d.Look
		c.reject(st, d.Reason)
	case rule.AcceptedNearStable:
		c.markConverged(st)
		st.res.NearStable = true
		if at == atMaxRequests {
			st.waiting = "accepted near stable at maxRequests: " + d.Reason
		}
	case rule.Failed:
		if at == atMaxRequests {
			c.fail(ErrNotConverged, fmt.Sprintf("%s reached maxRequests %d without converging (%s); %s",
				st.res.Target, c.cfg.MaxRequests, st.waiting, trend(st.res.Windows, 6)))
		}
	}
	if at == atWindow && d.Kind != rule.Warm && c.yield == yieldOn && c.cfg.MaxRequests > 0 {
		if last := st.res.Windows[len(st.res.Windows)-1]; 2*last.Requests >= c.cfg.MaxRequests {
			// The rest of maxRequests is for the judgement at full weight.
			c.endYield(fmt.Sprintf("%s: %d of maxRequests %d sent", st.res.Target, last.Requests, c.cfg.MaxRequests))
		}
	}
	switch {
	case d.Kind == rule.Warm:
		c.stopIfAllConverged(fmt.Sprintf("all %d targets converged", len(c.canary)))
	case d.Kind == rule.AcceptedNearStable && at == atMaxRequests:
		c.stopIfAllConverged(fmt.Sprintf("all %d targets converged; %s accepted near stable at maxRequests %d: %s", len(c.canary), st.res.Target, c.cfg.MaxRequests, d.Reason))
	}
}

// markConverged records st warm at its latest window.
func (c *coordinator) markConverged(st *targetState) {
	last := st.res.Windows[len(st.res.Windows)-1]
	st.res.Converged, st.res.ConvergedAfter, st.res.ConvergedWindow = true, last.Requests, last.Index
}

// reject acts on a rejection of st as a slower version: the first fails
// the run, unless st yields its CPU — then the yield ends, and the rule
// judges it again at full weight.
func (c *coordinator) reject(st *targetState, why string) {
	switch {
	case c.rejected != "":
	case c.deferVerdict():
		c.endYield(fmt.Sprintf("%s %s", st.res.Target, why))
	default:
		c.rejected = fmt.Sprintf("%s %s: a slower version, rejected before any user request reached it", st.res.Target, why)
		if !c.stopping {
			c.fail(ErrSlowerVersion, c.rejected)
		}
	}
}

// stopIfAllConverged ends the load once every target is warm (with
// untilConverged): requests in flight finish, and are counted.
func (c *coordinator) stopIfAllConverged(reason string) {
	if c.stopping || !c.cfg.Converging() || !c.allConverged() {
		return
	}
	c.stopping = true
	c.res.Reason = reason
	c.abortAll()
}

// onRunnerDone: a runner's run returned. A canary target that has not
// converged has sent its maxRequests: the rule decides it at that bound.
// Once no canary load is left, the stable pods' stops too.
func (c *coordinator) onRunnerDone(ev event) {
	c.running--
	st := c.stateOf(ev.done)
	if st == nil {
		return // a stable runner
	}
	st.done = true
	st.res.fortio = ev.results
	c.canaryRunning--
	if !st.res.Converged && !c.stopping && c.cfg.Converging() {
		c.apply(st, st.pod.AtBound(), atMaxRequests)
	}
	if c.canaryRunning == 0 {
		for _, r := range c.sruns {
			r.stop()
		}
		if c.res.Reason == "" {
			c.res.Reason = fmt.Sprintf("maxRequests %d sent to every target", c.cfg.MaxRequests)
		}
	}
}

// onDeadline: the run's context ended (its deadline, or the caller's
// cancel). At the deadline every target not yet warm is accepted near
// stable if each is (acceptNearStable), or the run did not converge.
func (c *coordinator) onDeadline(parent context.Context) {
	switch {
	case parent.Err() != nil:
		c.failure = fmt.Errorf("warm-up stopped: %w", parent.Err())
		c.res.Reason = "stopped: " + parent.Err().Error()
	case !c.stopping && c.cfg.Converging():
		if accepted := c.acceptAtDeadline(); accepted != "" {
			c.res.Reason = fmt.Sprintf("deadline %s passed; %s", c.cfg.Deadline, accepted)
			break
		}
		c.fail(ErrNotConverged, fmt.Sprintf("deadline %s passed before every target converged: %s", c.cfg.Deadline, c.pendingTrends()))
	case !c.stopping:
		c.res.Reason = fmt.Sprintf("deadline %s reached", c.cfg.Deadline)
	}
	c.hardStop()
}

// acceptAtDeadline marks every target not yet warm accepted near stable
// when the rule accepts each (rule.Pod.AtBound), and says so; "" when it
// accepts not all (nothing marked).
func (c *coordinator) acceptAtDeadline() string {
	var pending []*targetState
	var decisions []rule.Decision
	for _, st := range c.canary {
		if st.res.Converged {
			continue
		}
		d := st.pod.AtBound()
		if d.Kind != rule.AcceptedNearStable {
			return ""
		}
		pending, decisions = append(pending, st), append(decisions, d)
	}
	if len(pending) == 0 {
		return ""
	}
	var whys []string
	for i, st := range pending {
		c.apply(st, decisions[i], atDeadline)
		whys = append(whys, fmt.Sprintf("%s: %s", st.res.Target, decisions[i].Reason))
	}
	return fmt.Sprintf("%d target(s) accepted near stable (acceptNearStable): %v", len(pending), whys)
}

// fail ends the run with err, for reason: a hard stop.
func (c *coordinator) fail(err error, reason string) {
	c.res.Reason = reason
	c.failure = fmt.Errorf("%w: %s", err, reason)
	c.hardStop()
}

// hardStop sends no new request at once, gives requests in flight a moment
// to finish (so they are counted as the server saw them), then cuts the
// stragglers.
func (c *coordinator) hardStop() {
	if !c.hardStopped {
		time.AfterFunc(hardStopGrace, c.cancelRequests)
	}
	c.stopping, c.hardStopped = true, true
	c.abortAll()
}

// abortAll stops every runner (their requests in flight finish).
func (c *coordinator) abortAll() {
	for _, r := range c.runners {
		r.stop()
	}
}
