package load

import (
	"context"
	"sync"
	"time"

	"fortio.org/fortio/periodic"
)

// Pace is a request rate shared by the connections of one Runner that may
// change while the Runner runs (Set): the warm-up starts a cold pod at a low
// rate and raises it as the pod keeps up. fortio's periodic runner fixes its
// rate for the whole run, so a Runner with a Pace runs periodic unpaced and
// each connection waits for its turn here before it sends.
//
// Turns are spaced 1/QPS apart across all connections. As with a fixed
// rate (NoCatchUp), a stall is not made up with a burst: when every
// connection was busy for longer than an interval, the schedule restarts
// from now. A change of rate applies at once, also to connections already
// waiting.
type Pace struct {
	mu   sync.Mutex
	qps  float64
	last time.Time // when the latest turn was given
	// changed is closed (and replaced) by Set, so waiting connections
	// recompute their turn at the new rate.
	changed chan struct{}
}

// NewPace returns a pace of qps requests per second (summed over all
// connections); qps must be > 0 (New refuses it otherwise).
func NewPace(qps float64) *Pace {
	return &Pace{qps: qps, changed: make(chan struct{})}
}

// Set changes the rate; a qps that is not > 0 is ignored.
func (p *Pace) Set(qps float64) {
	if !(qps > 0) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if qps == p.qps {
		return
	}
	p.qps = qps
	close(p.changed)
	p.changed = make(chan struct{})
}

// QPS returns the current rate.
func (p *Pace) QPS() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.qps
}

// wait blocks until it is the caller's turn to send (true) or stop is
// closed (false).
func (p *Pace) wait(stop <-chan struct{}) bool {
	for {
		p.mu.Lock()
		now := time.Now()
		interval := time.Duration(float64(time.Second) / p.qps)
		turn := p.last.Add(interval)
		if !turn.After(now) {
			if now.Sub(turn) < interval {
				p.last = turn // woken a little late: keep the schedule
			} else {
				p.last = now // a stall: start again from now, no burst
			}
			p.mu.Unlock()
			return true
		}
		changed := p.changed
		p.mu.Unlock()
		timer := time.NewTimer(turn.Sub(now))
		select {
		case <-stop:
			timer.Stop()
			return false
		case <-changed:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// measured is one paced request as fetch saw it: when it was sent and how
// long it took, or that it was never sent (the Runner stopped while it
// waited for its turn). periodic times its Runnable as a whole, the wait for
// the turn included; pacedRecorder reports these figures instead.
type measured struct {
	start   time.Time
	latency time.Duration
	unsent  bool
}

type measuredKey struct{}

// pacedRecorder is the AccessLogger of a paced Runner: it hands every
// request actually sent to the Options.Recorder with its own latency, and
// drops the iteration periodic counts when a connection was stopped while
// waiting for its turn.
//
// A Runner with a budget (Options.MaxRequests) but no Pace uses it too,
// with paced false: it only drops the calls that sent nothing and keeps
// periodic's own latency.
type pacedRecorder struct {
	inner periodic.AccessLogger
	paced bool
}

func (r pacedRecorder) Start(ctx context.Context, id periodic.ThreadID, iter int64, start time.Time) context.Context {
	if r.inner != nil {
		ctx = r.inner.Start(ctx, id, iter, start)
	}
	return context.WithValue(ctx, measuredKey{}, &measured{})
}

func (r pacedRecorder) Report(ctx context.Context, id periodic.ThreadID, iter int64, start time.Time, latency float64, ok bool, details string) {
	m, _ := ctx.Value(measuredKey{}).(*measured)
	if r.inner == nil || m == nil || m.unsent {
		return
	}
	if !r.paced {
		r.inner.Report(ctx, id, iter, start, latency, ok, details)
		return
	}
	r.inner.Report(ctx, id, iter, m.start, m.latency.Seconds(), ok, details)
}

func (r pacedRecorder) Info() string {
	if r.inner == nil {
		return "paced"
	}
	return r.inner.Info()
}
