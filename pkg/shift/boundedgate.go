package shift

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrGatePending is the no-verdict answer of a gate whose check did not end
// within its bound: the check goes on in the background and a later call
// takes its verdict. The ramp holds meanwhile (at most Plan.MaxHold, as for
// any other missing verdict).
var ErrGatePending = errors.New("the gate's check is still running")

// gateAnswerWithin bounds how long a Router call waits for its gate: a
// tenant's slow query (its timeout may be minutes) must not hold one of the
// front end's reconcile workers (Argo's controller has ten) that long.
const gateAnswerWithin = 3 * time.Second

// gateCheckTimeout bounds one background check, whatever the gate's own
// config says: the most a call ever waited for one before it ran in the
// background (callTimeout).
const gateCheckTimeout = callTimeout

// verdictKeptFor is how long a finished check's verdict waits for the call
// that takes it: a verdict older than this is stale (the rollout paused, or
// the front end stopped asking) and a fresh check starts instead.
const verdictKeptFor = time.Minute

// boundedGate runs its gate's checks in the background and answers each
// Check within wait: the verdict if the check ended, else ErrGatePending. At
// most one check per gate runs at a time; a call for another window (since)
// starts a new one.
type boundedGate struct {
	gate Gate
	wait time.Duration
	now  func() time.Time

	mu      sync.Mutex
	pending *gateCheck // running, or finished and not yet taken
}

// gateCheck is one background check; its results are set before done
// closes.
type gateCheck struct {
	since    time.Time
	done     chan struct{}
	finished time.Time
	pass     bool
	reason   string
	err      error
}

func newBoundedGate(g Gate, wait time.Duration, now func() time.Time) *boundedGate {
	return &boundedGate{gate: g, wait: wait, now: now}
}

// Check returns the verdict of the window from since: of a check started
// by an earlier call if it ended since, else of a new one if that ends
// within the bound.
func (b *boundedGate) Check(ctx context.Context, since time.Time) (bool, string, error) {
	c := b.checkFor(ctx, since)
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return false, "", fmt.Errorf("%w after %s (it may take up to %s): the ramp holds and takes its verdict on a later call", ErrGatePending, b.wait, gateCheckTimeout)
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
	b.mu.Lock()
	if b.pending == c {
		b.pending = nil
	}
	b.mu.Unlock()
	return c.pass, c.reason, c.err
}

// checkFor returns the check that answers since: the pending one if it is
// for the same window and not stale, else a new one started now.
func (b *boundedGate) checkFor(ctx context.Context, since time.Time) *gateCheck {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.pending; c != nil && c.since.Equal(since) && !b.stale(c) {
		return c
	}
	c := &gateCheck{since: since, done: make(chan struct{})}
	b.pending = c
	// The check outlives the call that started it: its context keeps the
	// call's values (the rollout's namespace) but not its cancellation.
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gateCheckTimeout)
	go func() {
		defer cancel()
		c.pass, c.reason, c.err = b.gate.Check(checkCtx, since)
		c.finished = b.now()
		close(c.done)
	}()
	return c
}

// stale reports whether c finished longer than verdictKeptFor ago. Called
// with b.mu held.
func (b *boundedGate) stale(c *gateCheck) bool {
	select {
	case <-c.done:
		return b.now().Sub(c.finished) > verdictKeptFor
	default:
		return false
	}
}
