package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Ramp defaults: Step and MaxBreaches fill zero fields of a Plan;
// DefaultInterval is what front ends use when no interval is given.
const (
	DefaultStep        = 10
	DefaultInterval    = 30 * time.Second
	DefaultMaxBreaches = 3
)

// Plan is how a ramp raises the canary weight.
type Plan struct {
	// Step is the increment in percentage points (1–100). Default
	// DefaultStep, unless Weights is set.
	Step int
	// Weights is an explicit ladder of canary weights (strictly increasing,
	// 1–100) used instead of Step; weights above the target are skipped and
	// the target is always the last stop.
	Weights []int
	// Interval is the least time between two weight changes, and so the
	// least time a weight is held before the gate's verdict moves it on. 0
	// moves as soon as the gate passes; front ends default it to
	// DefaultInterval.
	Interval time.Duration
	// MaxBreaches is how many gate breaches end the ramp as failed. Default
	// DefaultMaxBreaches.
	MaxBreaches int
}

// WithDefaults fills zero Step (unless Weights is set) and MaxBreaches.
func (p Plan) WithDefaults() Plan {
	if p.Step == 0 && len(p.Weights) == 0 {
		p.Step = DefaultStep
	}
	if p.MaxBreaches == 0 {
		p.MaxBreaches = DefaultMaxBreaches
	}
	return p
}

// Validate checks the plan (before defaults are applied: a zero field means
// "default").
func (p Plan) Validate() error {
	var errs []error
	if p.Step < 0 || p.Step > 100 {
		errs = append(errs, fmt.Errorf("ramp.step %d: must be 1–100 percentage points", p.Step))
	}
	if p.Step != 0 && len(p.Weights) > 0 {
		errs = append(errs, errors.New("ramp.step and ramp.weights: set one of them, not both"))
	}
	for i, w := range p.Weights {
		if w < 1 || w > 100 {
			errs = append(errs, fmt.Errorf("ramp.weights[%d] = %d: must be 1–100 percent", i, w))
		}
		if i > 0 && w <= p.Weights[i-1] {
			errs = append(errs, fmt.Errorf("ramp.weights[%d] = %d: must be greater than weights[%d] = %d (the ladder only rises)", i, w, i-1, p.Weights[i-1]))
		}
	}
	if p.Interval < 0 {
		errs = append(errs, fmt.Errorf("ramp.interval %s: must not be negative", p.Interval))
	}
	if p.MaxBreaches < 0 {
		errs = append(errs, fmt.Errorf("ramp.maxBreaches %d: must be at least 1", p.MaxBreaches))
	}
	return errors.Join(errs...)
}

// Phase of a ramp.
type Phase string

// Ramp phases.
const (
	PhaseRamping Phase = "Ramping" // moving toward the target
	PhaseDone    Phase = "Done"    // at the target, gate passed there
	PhaseFailed  Phase = "Failed"  // MaxBreaches breaches; back at the last good weight
)

// State is the ramp's memory, kept as JSON in the RampAnnotation on the
// VirtualService so that any process (a restarted plugin, the CLI) can carry
// on.
type State struct {
	// Target is the canary weight the ramp is heading for.
	Target int `json:"target"`
	// Weight is the canary weight danki last set; a different weight on the
	// VirtualService means someone else changed it.
	Weight int `json:"weight"`
	// LastGood is the highest weight known good: where the ramp started, or
	// where the gate last passed. A breach goes back to it.
	LastGood int `json:"lastGood"`
	// Increment caps the next move in percentage points; 0 means no cap but
	// the weights ladder. Each breach halves it.
	Increment int `json:"increment"`
	// Breaches counts gate breaches toward this target.
	Breaches int `json:"breaches"`
	// LastChange is when danki last changed the weight.
	LastChange time.Time `json:"lastChange,omitzero"`
	Phase      Phase     `json:"phase"`
	// Reason names the last breach.
	Reason string `json:"reason,omitempty"`
}

func parseState(raw string) (*State, error) {
	if raw == "" {
		return nil, nil
	}
	var st State
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: delete the annotation to restart the ramp from the current weight", RampAnnotation, err)
	}
	switch st.Phase {
	case PhaseRamping, PhaseDone, PhaseFailed:
	default:
		return nil, fmt.Errorf("annotation %s: phase %q is not Ramping, Done or Failed: delete the annotation to restart the ramp from the current weight", RampAnnotation, st.Phase)
	}
	return &st, nil
}

func (st *State) encode() string {
	if st == nil {
		return ""
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// Action is what a ramp decision does.
type Action string

// Ramp actions.
const (
	ActionHold    Action = "hold"     // keep the weight: interval not over, or no gate verdict yet
	ActionMove    Action = "move"     // change the weight toward the target
	ActionBackOff Action = "back-off" // gate breach: back to the last good weight, increment halved
	ActionDone    Action = "done"     // at the target and gated
	ActionFail    Action = "fail"     // MaxBreaches reached: stays at the last good weight
	ActionAbort   Action = "abort"    // target 0: weight 0 now, ramp state cleared
)

// Decision is one step of a ramp.
type Decision struct {
	Action Action
	// From is the canary weight before, Weight after the decision.
	From, Weight int
	// State is the ramp state to keep; nil clears it (abort).
	State *State
	// Reason says why, in words.
	Reason string
	// Wait is how long until the next step can change anything; 0 means
	// "ask again at your usual pace" (e.g. waiting for a gate verdict).
	Wait time.Duration
}

// Next decides the ramp's next step: from the kept state (nil if none), the
// canary weight now on the VirtualService, the target, the time and the
// gate (nil: no gate, the ramp moves on time alone). It is pure apart from
// asking the gate, and asks it only at a weight not yet known good. It
// never sleeps: a caller calls it again later.
func (p Plan) Next(ctx context.Context, prev *State, current, target int, now time.Time, gate Gate) Decision {
	p = p.WithDefaults()
	if target <= 0 {
		return Decision{Action: ActionAbort, From: current, Weight: 0,
			Reason: "abort: canary weight 0 at once (never ramped); ramp state cleared"}
	}
	st, note := p.resume(prev, current, target)
	d := Decision{From: current, Weight: current, State: &st}
	say := func(format string, args ...any) string {
		s := fmt.Sprintf(format, args...)
		if note != "" {
			s = note + "; " + s
		}
		return s
	}
	elapsed := now.Sub(st.LastChange)
	due := st.LastChange.IsZero() || elapsed >= p.Interval
	left := max(p.Interval-elapsed, 0)

	switch {
	case st.Phase == PhaseFailed:
		d.Action, d.Reason = ActionFail, say("ramp to %d%% failed: %s", target, st.Reason)
		return d
	case st.Phase == PhaseDone:
		d.Action, d.Reason = ActionDone, say("at %d%%, gate passed", target)
		return d
	case current > target:
		// Less canary traffic is always safe: no ramp, no gate.
		st.Weight, st.LastGood, st.Phase, st.LastChange = target, target, PhaseDone, now
		d.Action, d.Weight, d.Reason = ActionMove, target, say("lowered to %d%% at once (less canary traffic is never ramped)", target)
		return d
	case current == st.LastGood:
		// A known-good weight needs no verdict: only the interval holds it.
		if current == target {
			st.Phase = PhaseDone
			d.Action, d.Reason = ActionDone, say("already at %d%%", target)
			return d
		}
		if !due {
			d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%% (known good) for %s more before the next move", current, left.Round(time.Second))
			return d
		}
		return p.move(d, &st, current, target, now, say)
	}

	pass, why, err := check(ctx, gate)
	switch {
	case err != nil:
		d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%%: gate has no verdict yet: %v", current, err)
		return d
	case !pass:
		st.Breaches++
		jump := current - st.LastGood
		st.Increment = max(1, jump/2)
		st.Reason = fmt.Sprintf("gate breach %d/%d at %d%%: %s", st.Breaches, p.MaxBreaches, current, why)
		st.Weight, st.LastChange = st.LastGood, now
		d.Weight = st.LastGood
		if st.Breaches >= p.MaxBreaches {
			st.Phase = PhaseFailed
			d.Action, d.Reason = ActionFail, say("%s; back at the last good weight %d%%; ramp failed after %d breaches", st.Reason, st.LastGood, st.Breaches)
			return d
		}
		d.Action, d.Wait, d.Reason = ActionBackOff, p.Interval, say("%s; back to the last good weight %d%%, increment now %d", st.Reason, st.LastGood, st.Increment)
		return d
	case !due:
		d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%%: gate passes, %s left of the interval", current, left.Round(time.Second))
		return d
	}
	st.LastGood = current
	if current == target {
		st.Phase = PhaseDone
		d.Action, d.Reason = ActionDone, say("reached %d%%, gate passes", target)
		return d
	}
	return p.move(d, &st, current, target, now, say)
}

func (p Plan) move(d Decision, st *State, current, target int, now time.Time, say func(string, ...any) string) Decision {
	next := target
	if st.Increment > 0 {
		next = min(next, current+st.Increment)
	}
	for _, w := range p.Weights {
		if w > current {
			next = min(next, w)
			break
		}
	}
	st.Weight, st.LastChange = next, now
	d.Action, d.Weight, d.Wait = ActionMove, next, p.Interval
	d.Reason = say("%d%% → %d%% (target %d%%)", current, next, target)
	return d
}

// resume continues the kept state, or starts a new ramp when there is none
// or the target changed. A weight changed by someone else is taken as the
// new starting point, never as known good above the last good weight.
func (p Plan) resume(prev *State, current, target int) (State, string) {
	fresh := State{Target: target, Weight: current, LastGood: current, Increment: p.Step, Phase: PhaseRamping}
	switch {
	case prev == nil:
		return fresh, ""
	case prev.Target != target:
		fresh.LastChange = prev.LastChange // the interval runs from the last change, whichever ramp made it
		return fresh, fmt.Sprintf("new target %d%% (was %d%%)", target, prev.Target)
	case prev.Weight != current:
		st := *prev
		st.Weight = current
		st.LastGood = min(st.LastGood, current)
		if st.Phase == PhaseDone {
			st.Phase = PhaseRamping
		}
		return st, fmt.Sprintf("canary weight changed outside danki (%d%% → %d%%)", prev.Weight, current)
	}
	return *prev, ""
}

func check(ctx context.Context, gate Gate) (bool, string, error) {
	if gate == nil {
		return true, "", nil
	}
	return gate.Check(ctx)
}
