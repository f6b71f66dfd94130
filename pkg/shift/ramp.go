package shift

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/wellknown"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/utils/clock"
)

// ErrRampFailed is wrapped by the error of a ramp that hit MaxBreaches.
var ErrRampFailed = errors.New("ramp failed")

// Ramp drives a Plan on one Target: each Tick reads the VirtualService and
// the ramp state kept on it, decides with Plan.Next, and writes the new
// weight and state in one Update. It keeps nothing in memory, so a fresh
// Ramp (after a plugin restart) carries on where the last one stopped.
type Ramp struct {
	Shifter *Shifter
	Target  Target
	Plan    Plan
	// Gate judges each new weight; nil moves on time alone.
	Gate Gate
	// Canary names the canary being ramped (Argo: its pod-template hash;
	// may be empty). The gate's window start kept in the state belongs to
	// one canary: a different one starts a new window.
	Canary string
	// Clock tells the time and times Run's waits; nil is the real clock
	// (tests use a fake one).
	Clock clock.WithTicker
}

func (r *Ramp) clock() clock.WithTicker {
	if r.Clock != nil {
		return r.Clock
	}
	return clock.RealClock{}
}

// readWeights returns the managed routes' canary weights (lowest first
// wins: routes that disagree converge on the lowest, the safe direction)
// and whether every managed route and extra already has the wanted weights.
func readWeights(vs *networkingv1.VirtualService, t Target, m *matcher, want int, extras []Extra) (current int, atWant bool, err error) {
	stale, err := staleExtras(vs)
	if err != nil {
		return 0, false, err
	}
	mm := m.withExtras(extras, stale)
	routes, err := primaryRoutes(&vs.Spec, t, mm)
	if err != nil {
		return 0, false, err
	}
	current, atWant = 101, true
	wantExtras := map[Extra]int{}
	for _, e := range mm.extras {
		wantExtras[Extra{Host: e.Host, Subset: e.Subset}] = e.Weight
	}
	for _, ref := range routes {
		c, ex := routeWeights(&vs.Spec, ref, mm)
		current = min(current, c)
		if c != want || !maps.Equal(ex, wantExtras) || hasRole(&vs.Spec, ref, mm, roleStaleExtra) {
			atWant = false
		}
	}
	return current, atWant, nil
}

func hasRole(spec *networking.VirtualService, r routeRef, m *matcher, want role) bool {
	for _, d := range destinations(spec, r) {
		if ro, _ := m.classify(d.dest); ro == want {
			return true
		}
	}
	return false
}

// Tick makes at most one move toward target (percent) and keeps the ramp
// state on the VirtualService. It never sleeps. Target 0 aborts: weight 0
// at once and the ramp state cleared, whatever the annotation holds (it is
// not even read). Extras are set at their weights on every call (they are
// not ramped).
func (r *Ramp) Tick(ctx context.Context, target int, extras ...Extra) (Decision, error) {
	if target != 0 {
		// An abort needs no plan: a bad one must not keep users on the canary.
		var errs config.Errors
		errs.Add("ramp", r.Plan.Validate())
		if err := errs.Err(); err != nil {
			return Decision{}, fmt.Errorf("ramp on VirtualService %s: %w", r.Target, err)
		}
	}
	if err := validateExtras(target, extras); err != nil {
		return Decision{}, fmt.Errorf("ramp on VirtualService %s: %w", r.Target, err)
	}
	now := r.clock().Now()
	var (
		dec     Decision
		decided bool
		key     string
	)
	_, err := r.Shifter.update(ctx, r.Target, fmt.Sprintf("ramp canary weight to %d", target), func(vs *networkingv1.VirtualService) error {
		m, err := r.Shifter.matcher(ctx, r.Target)
		if err != nil {
			return err
		}
		current, _, err := readWeights(vs, r.Target, m, target, extras)
		if err != nil {
			return err
		}
		raw := vs.Annotations[wellknown.RampAnnotation]
		var prev *State
		if target != 0 {
			if prev, err = parseState(raw); err != nil {
				return err
			}
			if prev != nil && prev.Canary != r.Canary {
				// Another canary's gate window is not this one's.
				fresh := *prev
				fresh.GateSince, fresh.Canary = time.Time{}, r.Canary
				prev = &fresh
			}
		}
		// After a 409 the object is read again; decide again only if the
		// ramp itself moved meanwhile (the gate is not asked twice for the
		// same step).
		if k := fmt.Sprintf("%d|%s", current, raw); !decided || k != key {
			dec, decided, key = r.Plan.Next(ctx, prev, current, target, now, r.Gate), true, k
			if dec.State != nil {
				dec.State.Canary = r.Canary
			}
		}
		if err := applyWeights(vs, r.Target, m, dec.Weight, extras); err != nil {
			return err
		}
		setAnnotation(&vs.ObjectMeta, wellknown.RampAnnotation, dec.State.encode())
		return nil
	})
	if err != nil {
		return dec, err
	}
	log := r.Shifter.log.With("virtualService", r.Target.String(), "action", string(dec.Action), "from", dec.From, "weight", dec.Weight, "target", target)
	switch {
	case dec.StateReset != nil:
		log.Warn(dec.Reason, "stateReset", dec.StateReset)
	case dec.NoVerdict != nil:
		// Never silent: users sit on a weight nobody judged.
		log.Warn(dec.Reason, "noVerdict", dec.NoVerdict)
	case dec.Action == ActionHold || dec.Action == ActionDone:
		log.Debug(dec.Reason)
	default:
		log.Info(dec.Reason)
	}
	return dec, nil
}

// Verification is what Verify found.
type Verification struct {
	// Verified is true when every managed route is at the target, and the
	// ramp reached it with the gate passing there (always so for target 0).
	Verified bool
	// Weight is the managed routes' (lowest) canary weight now.
	Weight int
	// State is the ramp state on the VirtualService (nil if none, and for
	// target 0, where it is not read).
	State *State
	// Reason says what is still awaited.
	Reason string
}

// Verify reports whether the ramp toward target is complete. It changes
// nothing. A failed ramp returns an error wrapping ErrRampFailed that names
// the breach. Verifying 0 never reads the ramp state.
func (r *Ramp) Verify(ctx context.Context, target int, extras ...Extra) (Verification, error) {
	var v Verification
	if err := r.Target.Validate(); err != nil {
		return v, err
	}
	vs, err := r.Shifter.getVS(ctx, r.Target)
	if err != nil {
		return v, fmt.Errorf("verify weight on VirtualService %s: %w", r.Target, err)
	}
	m, err := r.Shifter.matcher(ctx, r.Target)
	if err != nil {
		return v, fmt.Errorf("verify weight on VirtualService %s: %w", r.Target, err)
	}
	current, atWant, err := readWeights(vs, r.Target, m, target, extras)
	if err != nil {
		return v, fmt.Errorf("verify weight on VirtualService %s: %w", r.Target, err)
	}
	v.Weight = current
	if target == 0 {
		v.Verified = atWant
		v.Reason = fmt.Sprintf("canary weight %d%%, want 0%%", current)
		return v, nil
	}
	if v.State, err = parseState(vs.Annotations[wellknown.RampAnnotation]); err != nil {
		// Unverified, not an error: Argo reads a VerifyWeight error as "no
		// verdict", and at the end of the steps would promote.
		v.Reason = fmt.Sprintf("ramp state unreadable: %v", err)
		return v, nil
	}
	st := v.State
	var problem error
	if st != nil {
		problem = st.Check(len(r.Plan.Weights) > 0, r.clock().Now())
	}
	switch {
	case st == nil || st.Target != target:
		v.Reason = fmt.Sprintf("no ramp toward %d%% yet (canary weight %d%%)", target, current)
	case problem != nil:
		// Never verified on a state nobody can trust; the next Tick restarts
		// the ramp from the current weight.
		v.Reason = fmt.Sprintf("ramp state inconsistent (%v): the next move restarts the ramp from %d%%", problem, current)
	case st.Phase == PhaseFailed:
		v.Reason = st.Reason
		return v, fmt.Errorf("%w: VirtualService %s: toward %d%%: %s; canary weight held at %d%%", ErrRampFailed, r.Target, target, st.Reason, current)
	case st.Phase == PhaseDone && atWant:
		v.Verified = true
		v.Reason = fmt.Sprintf("at %d%%, gate passed", target)
	default:
		v.Reason = st.Progress(current)
	}
	return v, nil
}

// Progress describes a ramp in progress at canary weight current.
func (st *State) Progress(current int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ramping to %d%%: at %d%% (last good %d%%", st.Target, current, st.LastGood)
	if st.Increment > 0 {
		fmt.Fprintf(&b, ", increment %d", st.Increment)
	}
	if st.Breaches > 0 {
		fmt.Fprintf(&b, ", %d breach(es), last: %s", st.Breaches, st.Reason)
	}
	switch {
	case !st.HoldSince.IsZero():
		fmt.Fprintf(&b, "; gate without a verdict since %s", st.HoldSince.UTC().Format(time.RFC3339))
	case st.AwaitVerdict:
		b.WriteString("; waiting for the gate to answer again")
	}
	b.WriteString(")")
	return b.String()
}

// Run ticks until the ramp is done, failed or aborted, or ctx ends, waiting
// between ticks at most poll (less when the next move is due sooner).
// progress, if not nil, sees every decision. A failed ramp returns an error
// wrapping ErrRampFailed; the weight stays at the last good weight. Ending
// ctx leaves the weight and the ramp state as they are: running again
// resumes.
func (r *Ramp) Run(ctx context.Context, target int, poll time.Duration, progress func(Decision), extras ...Extra) (Decision, error) {
	if poll <= 0 {
		poll = 5 * time.Second
	}
	for {
		d, err := r.Tick(ctx, target, extras...)
		if err != nil {
			return d, err
		}
		if progress != nil {
			progress(d)
		}
		switch d.Action {
		case ActionDone, ActionAbort:
			return d, nil
		case ActionFail:
			return d, fmt.Errorf("%w: VirtualService %s: %s", ErrRampFailed, r.Target, d.Reason)
		}
		wait := poll
		if d.Wait > 0 && d.Wait < wait {
			wait = d.Wait
		}
		t := r.clock().NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return d, ctx.Err()
		case <-t.C():
		}
	}
}
