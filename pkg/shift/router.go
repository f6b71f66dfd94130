package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Reasons of the Warning events a Router records on a rollout.
const (
	// RampFailedReason: the gated ramp failed and danki aborted the rollout.
	RampFailedReason = "DankiRampFailed"
	// GateNoVerdictReason: the ramp holds (or went back to the last good
	// weight) because the gate has no verdict; the message names the cause.
	GateNoVerdictReason = "DankiGateNoVerdict"
	// RampStateResetReason: the ramp state on the VirtualService broke its
	// invariants; the ramp restarted from the current weight.
	RampStateResetReason = "DankiRampStateReset"
)

// holdEventInterval is the least time between two GateNoVerdict events of
// one rollout while it holds: a front end like Argo's controller asks for
// the weight every few seconds.
const holdEventInterval = time.Minute

// callTimeout bounds one call once it holds its VirtualService: a front
// end's caller may have no timeout of its own (Argo's controller has none,
// and blocks a reconcile worker meanwhile).
const callTimeout = 30 * time.Second

// Recorder records a Warning event on the rollout a call is for. A failure
// is only logged: events explain, they must not fail the call.
type Recorder interface {
	Warn(ctx context.Context, reason, message string) error
}

// Aborter aborts the rollout a call is for: every user back on stable, as
// the rollout's owner does it (Argo: status.abort). Its error says what
// permission or object is missing.
type Aborter interface {
	Abort(ctx context.Context) error
}

// Rollout is the rollout a Router call is for.
type Rollout struct {
	// Key names it (namespace/name): its gate and event rate limit are kept
	// under it.
	Key string
	// Canary names the canary (Argo: its pod-template hash; may be empty):
	// the gate's window belongs to one canary.
	Canary string
	// Aborted: the rollout is aborted already; a failed ramp does not abort
	// it again.
	Aborted bool
	Binding Binding
	// Events and Aborter act on the rollout; nil Events only logs.
	Events  Recorder
	Aborter Aborter
}

// Observer sees what a Router decided and did: pkg/metrics.Plugin
// implements it for the plugin's metrics endpoint.
type Observer interface {
	// RampDecision is called once per SetWeight call's decision: its
	// action (Action's words) and, when it counted a breach, the breach's
	// cause: "slo" (the gate failed) or "no_verdict" (none for maxHold).
	RampDecision(action, breach string)
	// RampAbort is called when the Router aborted a rollout whose ramp
	// failed; err is the abort's own error (nil: aborted).
	RampAbort(err error)
}

// Router is a gated traffic router for a front end that calls it
// repeatedly and concurrently, for many rollouts (the danki/istio plugin):
// it serialises calls per VirtualService, builds each rollout's gate once,
// makes at most one ramp move per call, aborts a rollout whose ramp failed
// and records what its users must see as events. The ramp state lives on
// the VirtualService, so a fresh Router carries on where the last stopped.
type Router struct {
	// Now is the ramp's clock and GateFor builds a rollout's gate from its
	// Binding's Gate (default GateFromConfig); tests replace them.
	Now     func() time.Time
	GateFor func(raw json.RawMessage) (Gate, error)
	// Observer, if set, sees every ramp decision and abort (danki's own
	// metrics; set it before the first call).
	Observer Observer

	name string
	log  *slog.Logger

	mu      sync.Mutex
	shifter *Shifter
	locks   map[string]chan struct{} // by VirtualService: held while a call works on it
	gates   map[string]Gate          // by rollout key and gate config
	// lastEvent rate-limits the events recorded while a ramp holds:
	// rollout key and reason → when the last one was recorded.
	lastEvent map[string]time.Time
}

// nowClock is the real clock reading the time from now (Router.Now). The
// Router's ramps only Tick: they read the time and never wait.
type nowClock struct {
	clock.RealClock
	now func() time.Time
}

func (c nowClock) Now() time.Time                  { return c.now() }
func (c nowClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }

// NewRouter returns a Router whose messages start with name (the plugin's,
// "danki/istio"). It needs a Shifter (Use) before its first call.
func NewRouter(name string, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Router{Now: time.Now, GateFor: GateFromConfig, name: name, log: log,
		locks: map[string]chan struct{}{}, gates: map[string]Gate{}, lastEvent: map[string]time.Time{}}
}

// Use sets the Shifter the router works through, once the front end has
// its clients.
func (r *Router) Use(s *Shifter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shifter = s
}

// do runs fn under the VirtualService's lock with a bounded context: calls
// for one VirtualService are serialised, different ones run in parallel. A
// call waits for the lock at most callTimeout too, so no call's answer
// waits on a queue of others.
func (r *Router) do(ctx context.Context, op string, ro Rollout, fn func(ctx context.Context, s *Shifter, log *slog.Logger) error) error {
	key := ro.Binding.Target.String()
	r.mu.Lock()
	s := r.shifter
	lock, ok := r.locks[key]
	if !ok {
		lock = make(chan struct{}, 1)
		r.locks[key] = lock
	}
	r.mu.Unlock()
	if s == nil {
		return errors.New("no Shifter: the router is not set up")
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("VirtualService %s: another call has held it for over %s; try again", key, callTimeout)
	}
	defer func() { <-lock }()
	return fn(ctx, s, r.log.With("rollout", ro.Key, "op", op, "virtualService", key))
}

// gate returns the rollout's latency gate, built once per configuration.
// It keeps no window: the ramp passes the window start kept in its state.
func (r *Router) gate(ro Rollout) (Gate, error) {
	b := ro.Binding
	key := ro.Key + "\x00" + string(b.Gate)
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.gates[key]; ok {
		return g, nil
	}
	g, err := r.GateFor(b.Gate)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.gateField, err)
	}
	if g != nil {
		g = newBoundedGate(g, gateAnswerWithin, r.Now)
	}
	for k := range r.gates { // one gate per rollout: drop the old configuration's
		if strings.HasPrefix(k, ro.Key+"\x00") {
			delete(r.gates, k)
		}
	}
	r.gates[key] = g
	return g, nil
}

// ramp returns the rollout's ramp toward target. Target 0 (before the first
// weight, e.g. while a warm-up runs, or an abort) needs no gate. The gate's
// cumulative window starts at the first move of this canary toward a real
// target (kept in the ramp state as gateSince, with the canary's name), so
// it never counts the previous canary's last requests, which share the
// canary Service's metrics, and it survives a restarted process.
func (r *Router) ramp(ro Rollout, s *Shifter, target int) (*Ramp, error) {
	var g Gate
	if target > 0 {
		var err error
		if g, err = r.gate(ro); err != nil {
			return nil, err
		}
	}
	b := ro.Binding
	return &Ramp{Shifter: s, Target: b.Target, Plan: b.Plan, Gate: g, Canary: ro.Canary, Clock: nowClock{now: r.Now}}, nil
}

// SetWeight starts or continues the ramp toward weight: at most one move
// per call, never blocking on the ramp's interval. Weight 0 (abort, or a
// finished rollout) is set at once.
func (r *Router) SetWeight(ctx context.Context, ro Rollout, weight int, extras ...Extra) error {
	return r.do(ctx, "SetWeight", ro, func(ctx context.Context, s *Shifter, log *slog.Logger) error {
		rmp, err := r.ramp(ro, s, weight)
		if err != nil {
			return err
		}
		d, err := rmp.Tick(ctx, weight, extras...)
		if err != nil {
			return err
		}
		log.Debug("ramp step", "action", string(d.Action), "from", d.From, "weight", d.Weight, "target", weight, "reason", d.Reason)
		if r.Observer != nil {
			r.Observer.RampDecision(string(d.Action), breachCause(d))
		}
		r.report(ctx, ro, d, log)
		return nil
	})
}

// breachCause is the cause of the breach d counted ("" for none).
func breachCause(d Decision) string {
	switch {
	case !d.Breach:
		return ""
	case d.NoVerdict != nil:
		return "no_verdict"
	}
	return "slo"
}

// report records what users of the rollout must see: a reset ramp state,
// and a hold for want of a gate verdict (rate-limited; the back-off after
// maxHold always).
func (r *Router) report(ctx context.Context, ro Rollout, d Decision, log *slog.Logger) {
	if d.StateReset != nil {
		r.event(ctx, ro, RampStateResetReason, fmt.Sprintf("%s: %v", r.name, d.StateReset), log)
	}
	if d.NoVerdict == nil {
		return
	}
	if d.Action == ActionHold {
		key := ro.Key + "\x00" + GateNoVerdictReason
		now := r.Now()
		r.mu.Lock()
		last, seen := r.lastEvent[key]
		due := !seen || now.Sub(last) >= holdEventInterval || now.Before(last)
		if due {
			r.lastEvent[key] = now
		}
		r.mu.Unlock()
		if !due {
			return
		}
	}
	r.event(ctx, ro, GateNoVerdictReason, fmt.Sprintf("%s: %s", r.name, d.Reason), log)
}

// VerifyWeight reports whether the ramp has reached weight with the gate
// passing there. A failed ramp (the gate breached maxBreaches times) is not
// verified, never an error: an error reads as "no verdict", and a front end
// like Argo's controller promotes at the end of the steps on one. It aborts
// the rollout instead, so that every user goes back to stable, and records
// an event naming the breach. If the abort itself fails, the event and the
// log say why: still never verified.
func (r *Router) VerifyWeight(ctx context.Context, ro Rollout, weight int, extras ...Extra) (bool, error) {
	verified := false
	err := r.do(ctx, "VerifyWeight", ro, func(ctx context.Context, s *Shifter, log *slog.Logger) error {
		rmp, err := r.ramp(ro, s, weight)
		if err != nil {
			return err
		}
		v, err := rmp.Verify(ctx, weight, extras...)
		if errors.Is(err, ErrRampFailed) {
			if !ro.Aborted {
				r.abort(ctx, ro, err, log)
			}
			return nil
		}
		if err != nil {
			return err
		}
		verified = v.Verified
		log.Debug("verify weight", "desired", weight, "verified", v.Verified, "weight", v.Weight, "reason", v.Reason)
		return nil
	})
	return verified, err
}

// abort aborts the rollout and records a Warning event naming the breach:
// the owner's own abort message cannot say why. Failures are logged and put
// into the event, never returned: the caller holds the step either way.
func (r *Router) abort(ctx context.Context, ro Rollout, breach error, log *slog.Logger) {
	msg := fmt.Sprintf("%s aborted the rollout: %v", r.name, breach)
	err := errors.New("no Aborter for this rollout")
	if ro.Aborter != nil {
		err = ro.Aborter.Abort(ctx)
	}
	if r.Observer != nil {
		r.Observer.RampAbort(err)
	}
	if err != nil {
		msg = fmt.Sprintf("%s could not abort the rollout (%v); the step stays unverified: %v", r.name, err, breach)
		log.Error("ramp failed; aborting the rollout failed", "err", err, "breach", breach)
	} else {
		log.Warn("ramp failed: rollout aborted", "breach", breach)
	}
	r.event(ctx, ro, RampFailedReason, msg, log)
}

func (r *Router) event(ctx context.Context, ro Rollout, reason, msg string, log *slog.Logger) {
	if ro.Events == nil {
		log.Warn("nowhere to record the event", "reason", reason, "message", msg)
		return
	}
	if err := ro.Events.Warn(ctx, reason, msg); err != nil {
		log.Error("record the event", "err", err, "reason", reason, "message", msg)
	}
}

// UpdateHashes keeps the DestinationRule subsets' pod-template-hash labels
// in step with the canary and stable pods (subset-level routing only).
func (r *Router) UpdateHashes(ctx context.Context, ro Rollout, canaryHash, stableHash string, extras ...ExtraSubset) error {
	return r.do(ctx, "UpdateHash", ro, func(ctx context.Context, s *Shifter, _ *slog.Logger) error {
		return s.UpdateHashes(ctx, ro.Binding.Target, canaryHash, stableHash, extras...)
	})
}

// SetHeaderRoute adds, replaces or (with no match) removes a header route.
func (r *Router) SetHeaderRoute(ctx context.Context, ro Rollout, route HeaderRoute) error {
	return r.do(ctx, "SetHeaderRoute", ro, func(ctx context.Context, s *Shifter, _ *slog.Logger) error {
		return s.SetHeaderRoute(ctx, ro.Binding.Target, route)
	})
}

// SetMirrorRoute adds, replaces or (with no match) removes a mirror route.
func (r *Router) SetMirrorRoute(ctx context.Context, ro Rollout, route MirrorRoute) error {
	return r.do(ctx, "SetMirrorRoute", ro, func(ctx context.Context, s *Shifter, _ *slog.Logger) error {
		return s.SetMirrorRoute(ctx, ro.Binding.Target, route)
	})
}

// RemoveManagedRoutes removes the header and mirror routes: the managed
// routes and also.
func (r *Router) RemoveManagedRoutes(ctx context.Context, ro Rollout, also ...string) error {
	return r.do(ctx, "RemoveManagedRoutes", ro, func(ctx context.Context, s *Shifter, _ *slog.Logger) error {
		return s.RemoveManagedRoutes(ctx, ro.Binding.Target, also...)
	})
}
