package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// Ramp defaults: Step, MaxBreaches and MaxHold fill zero fields of a Plan;
// DefaultInterval is what front ends use when no interval is given.
const (
	DefaultStep        = 10
	DefaultInterval    = 30 * time.Second
	DefaultMaxBreaches = 3
	// DefaultMaxHold bounds a hold for want of a gate verdict: long enough
	// to ride out a Prometheus restart or a few scrape gaps, short enough
	// that users do not sit for long on a weight nobody judged.
	DefaultMaxHold = 5 * time.Minute
)

// Plan is how a ramp raises the canary weight. A zero field means its
// default: WithDefaults fills them in, Validate accepts them.
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
	// MaxHold is how long the ramp holds a weight while the gate has no
	// verdict (source down, too few samples). Then it goes back to the last
	// good weight and counts a breach; from there it moves on only once the
	// gate answers again. Default DefaultMaxHold.
	MaxHold time.Duration
}

// WithDefaults returns a copy with zero Step (unless Weights is set),
// MaxBreaches and MaxHold filled in.
func (p Plan) WithDefaults() Plan {
	if p.Step == 0 && len(p.Weights) == 0 {
		p.Step = DefaultStep
	}
	if p.MaxBreaches == 0 {
		p.MaxBreaches = DefaultMaxBreaches
	}
	if p.MaxHold == 0 {
		p.MaxHold = DefaultMaxHold
	}
	p.Weights = slices.Clone(p.Weights)
	return p
}

// Validate reports every problem of the plan, each under its field name
// (step, weights[i], interval, maxBreaches, maxHold), joined; nil if none.
// It changes nothing. Zero fields mean "default" and are valid.
func (p Plan) Validate() error {
	var errs config.Errors
	if p.Step < 0 || p.Step > 100 {
		errs.Addf("step", "must be 1–100 percentage points, got %d", p.Step)
	}
	if p.Step != 0 && len(p.Weights) > 0 {
		errs.Addf("weights", "step is set too: set one of them, not both")
	}
	for i, w := range p.Weights {
		field := fmt.Sprintf("weights[%d]", i)
		if w < 1 || w > 100 {
			errs.Addf(field, "must be 1–100 percent, got %d", w)
		}
		if i > 0 && w <= p.Weights[i-1] {
			errs.Addf(field, "%d must be greater than weights[%d] = %d (the ladder only rises)", w, i-1, p.Weights[i-1])
		}
	}
	if p.Interval < 0 {
		errs.Addf("interval", "must not be negative, got %s", p.Interval)
	}
	if p.MaxBreaches < 0 {
		errs.Addf("maxBreaches", "must be at least 1, got %d", p.MaxBreaches)
	}
	if p.MaxHold < 0 {
		errs.Addf("maxHold", "must be positive, got %s", p.MaxHold)
	}
	return errs.Err()
}

// Phase of a ramp.
type Phase string

// Ramp phases.
const (
	PhaseRamping Phase = "Ramping" // moving toward the target
	PhaseDone    Phase = "Done"    // at the target, gate passed there
	PhaseFailed  Phase = "Failed"  // MaxBreaches breaches; back at the last good weight
)

// State is the ramp's memory, kept as JSON in the wellknown.RampAnnotation on the
// VirtualService so that any process (a restarted plugin, the CLI) can carry
// on. It is checked, never trusted: a state that breaks its invariants
// (Check) restarts the ramp from the current weight.
type State struct {
	// Target is the canary weight the ramp is heading for.
	Target int `json:"target"`
	// Weight is the canary weight danki last set; a different weight on the
	// VirtualService means someone else changed it.
	Weight int `json:"weight"`
	// LastGood is the highest weight known good: where the ramp started, or
	// where the gate last passed. A breach goes back to it.
	LastGood int `json:"lastGood"`
	// Increment caps the next move in percentage points; 0 (only with a
	// weights ladder) means no cap but the ladder. Each breach halves it.
	Increment int `json:"increment"`
	// Breaches counts gate breaches toward this target, holds that reached
	// MaxHold included.
	Breaches int `json:"breaches"`
	// LastChange is when danki last changed the weight.
	LastChange time.Time `json:"lastChange,omitzero"`
	Phase      Phase     `json:"phase"`
	// Reason names the last breach.
	Reason string `json:"reason,omitempty"`
	// HoldSince is when the gate last began having no verdict at this
	// weight; zero while it has one. A hold ends at HoldSince + MaxHold.
	HoldSince time.Time `json:"holdSince,omitzero"`
	// AwaitVerdict is set when the ramp went back to the last good weight
	// because a hold reached MaxHold: it moves on from there only once the
	// gate answers again, so an outage never raises the canary.
	AwaitVerdict bool `json:"awaitVerdict,omitempty"`
	// GateSince is the start of the gate's window, passed to every
	// Gate.Check: when this canary's ramp first headed above 0. Kept here
	// so that a restarted process judges the same cumulative window.
	GateSince time.Time `json:"gateSince,omitzero"`
	// Canary names the canary GateSince belongs to (Argo: its pod-template
	// hash); a new canary starts a new window.
	Canary string `json:"canary,omitempty"`
}

// parseState reads the annotation's JSON. Unreadable JSON or an unknown
// phase is an error; a readable state may still break its invariants
// (State.Check).
func parseState(raw string) (*State, error) {
	if raw == "" {
		return nil, nil
	}
	var st State
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: delete the annotation to restart the ramp from the current weight", wellknown.RampAnnotation, err)
	}
	switch st.Phase {
	case PhaseRamping, PhaseDone, PhaseFailed:
	default:
		return nil, fmt.Errorf("annotation %s: phase %q is not Ramping, Done or Failed: delete the annotation to restart the ramp from the current weight", wellknown.RampAnnotation, st.Phase)
	}
	return &st, nil
}

// clockSkew is how far in the future a kept time may lie (another
// process's clock) before the state counts as inconsistent: a time far
// ahead would hold the ramp (interval, MaxHold) for as long.
const clockSkew = time.Minute

// Check reports every broken invariant of a kept state, joined; nil if it
// is consistent. ladder says whether the plan climbs a weights ladder (the
// only case where Increment 0, "no cap", is valid); now bounds the kept
// times. A ramp only ever writes consistent states, so a violation means
// someone edited the annotation, or another version of danki wrote it.
func (st *State) Check(ladder bool, now time.Time) error {
	var errs config.Errors
	if st.Target < 1 || st.Target > 100 {
		errs.Addf("target", "%d is not 1–100", st.Target)
	}
	if st.Weight < 0 || st.Weight > 100 {
		errs.Addf("weight", "%d is not 0–100", st.Weight)
	} else if st.Weight > st.Target && st.Target >= 1 {
		errs.Addf("weight", "%d is above the target %d", st.Weight, st.Target)
	}
	if st.LastGood < 0 || st.LastGood > st.Weight {
		errs.Addf("lastGood", "%d is not 0–weight (%d)", st.LastGood, st.Weight)
	}
	if st.Increment < 0 || st.Increment > 100 || (st.Increment == 0 && !ladder) {
		errs.Addf("increment", "%d is not 1–100 (0 only with a weights ladder)", st.Increment)
	}
	if st.Breaches < 0 {
		errs.Addf("breaches", "%d is negative", st.Breaches)
	}
	switch st.Phase {
	case PhaseRamping:
	case PhaseDone:
		if st.LastGood != st.Target || st.Weight != st.Target {
			errs.Addf("phase", "Done, but weight %d and lastGood %d are not the target %d", st.Weight, st.LastGood, st.Target)
		}
	case PhaseFailed:
	default:
		errs.Addf("phase", "%q is not Ramping, Done or Failed", st.Phase)
	}
	if st.AwaitVerdict && st.Weight != st.LastGood {
		errs.Addf("awaitVerdict", "set, but weight %d is not the last good weight %d", st.Weight, st.LastGood)
	}
	for _, t := range []struct {
		field string
		at    time.Time
	}{{"lastChange", st.LastChange}, {"holdSince", st.HoldSince}, {"gateSince", st.GateSince}} {
		if t.at.After(now.Add(clockSkew)) {
			errs.Addf(t.field, "%s is in the future (now %s)", t.at.Format(time.RFC3339), now.Format(time.RFC3339))
		}
	}
	return errs.Err()
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
	ActionBackOff Action = "back-off" // gate breach (or MaxHold without a verdict): back to the last good weight
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
	// NoVerdict is the gate's error when this decision was made for want
	// of a verdict (a hold, or the back-off or failure after MaxHold); nil
	// otherwise. Front ends warn about it: it names the outage.
	NoVerdict error
	// StateReset is why the kept state was discarded (it broke its
	// invariants) and the ramp restarted from the current weight; nil
	// otherwise.
	StateReset error
	// Breach: this decision counted a breach (the back-off or failure it
	// makes); NoVerdict set means the gate had none for MaxHold, else it
	// failed.
	Breach bool
}

// Next decides the ramp's next step: from the kept state (nil if none), the
// canary weight now on the VirtualService, the target, the time and the
// gate (nil: no gate, the ramp moves on time alone). It is pure apart from
// asking the gate, and asks it only at a weight not yet known good (or, after
// a hold reached MaxHold, at the last good weight until it answers). It
// never sleeps: a caller calls it again later.
//
// Whatever the kept state holds, the decided weight is 0–100 and a back-off
// never raises the canary: a state that breaks its invariants is replaced by
// a fresh ramp from the current weight (Decision.StateReset says why).
func (p Plan) Next(ctx context.Context, prev *State, current, target int, now time.Time, gate Gate) Decision {
	p = p.WithDefaults()
	if target <= 0 {
		return Decision{Action: ActionAbort, From: current, Weight: 0,
			Reason: "abort: canary weight 0 at once (never ramped); ramp state cleared"}
	}
	st, note, reset := p.resume(prev, current, target, now)
	if st.GateSince.IsZero() {
		st.GateSince = now
	}
	d := Decision{From: current, Weight: current, State: &st, StateReset: reset}
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
		st.HoldSince, st.AwaitVerdict = time.Time{}, false
		d.Action, d.Weight, d.Reason = ActionMove, target, say("lowered to %d%% at once (less canary traffic is never ramped)", target)
		return d
	case current == st.LastGood:
		// A known-good weight needs no verdict: only the interval holds it.
		if current == target {
			st.Phase, st.HoldSince, st.AwaitVerdict = PhaseDone, time.Time{}, false
			d.Action, d.Reason = ActionDone, say("already at %d%%", target)
			return d
		}
		if st.AwaitVerdict {
			// Back here because the gate had no verdict for MaxHold: move
			// on only once it answers again. Inconclusive (too few canary
			// requests) is an answer: the source can be read again, and at
			// the last good weight — often 0, where the canary gets no
			// users — there may never be enough requests for more. The
			// next rung is judged as usual.
			_, why, err := check(ctx, gate, st.GateSince)
			if err != nil && !errors.Is(err, analysis.ErrInconclusive) {
				return p.noVerdict(d, &st, current, now, err, say)
			}
			st.AwaitVerdict, st.HoldSince = false, time.Time{}
			note = joinNote(note, fmt.Sprintf("the gate answers again (%s)", why))
		}
		if !due {
			d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%% (known good) for %s more before the next move", current, left.Round(time.Second))
			return d
		}
		return p.move(d, &st, current, target, now, say)
	}

	pass, why, err := check(ctx, gate, st.GateSince)
	switch {
	case err != nil && !due:
		// A gate without a verdict inside the interval is how every rung
		// starts (too few canary requests yet): the ramp holds anyway, so
		// this is no outage. The no-verdict clock (maxHold), the Warn log
		// and the event start when the interval is over.
		st.HoldSince = time.Time{}
		d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%%: gate has no verdict yet, %s left of the interval: %v", current, left.Round(time.Second), err)
		return d
	case err != nil:
		return p.noVerdict(d, &st, current, now, err, say)
	case !pass:
		st.HoldSince, st.AwaitVerdict = time.Time{}, false
		st.Breaches++
		jump := current - st.LastGood
		st.Increment = max(1, jump/2)
		st.Reason = fmt.Sprintf("gate breach %d/%d at %d%%: %s", st.Breaches, p.MaxBreaches, current, why)
		return p.backOff(d, &st, now, say, fmt.Sprintf("increment now %d", st.Increment))
	case !due:
		st.HoldSince = time.Time{}
		d.Action, d.Wait, d.Reason = ActionHold, left, say("holding %d%%: gate passes, %s left of the interval", current, left.Round(time.Second))
		return d
	}
	st.LastGood, st.HoldSince = current, time.Time{}
	if current == target {
		st.Phase = PhaseDone
		d.Action, d.Reason = ActionDone, say("reached %d%%, gate passes", target)
		return d
	}
	return p.move(d, &st, current, target, now, say)
}

// noVerdict holds the weight while the gate has no verdict, at most
// MaxHold; then it counts a breach and goes back to the last good weight (or,
// already there, stays), where the ramp waits for the gate to answer.
func (p Plan) noVerdict(d Decision, st *State, current int, now time.Time, err error, say func(string, ...any) string) Decision {
	d.NoVerdict = err
	if st.HoldSince.IsZero() {
		st.HoldSince = now
	}
	held := now.Sub(st.HoldSince)
	if held < p.MaxHold {
		left := p.MaxHold - held
		if d.Wait <= 0 || d.Wait > left {
			d.Wait = left
		}
		after := fmt.Sprintf("back to the last good weight %d%%", st.LastGood)
		if current == st.LastGood {
			after = "a breach is counted"
		}
		d.Action = ActionHold
		d.Reason = say("holding %d%%: gate has no verdict yet, for %s (%s left of maxHold %s, then %s): %v",
			current, held.Round(time.Second), left.Round(time.Second), p.MaxHold, after, err)
		return d
	}
	st.Breaches++
	st.HoldSince = time.Time{}
	st.AwaitVerdict = true
	st.Reason = fmt.Sprintf("gate breach %d/%d at %d%%: no verdict for %s (maxHold %s): %v", st.Breaches, p.MaxBreaches, current, held.Round(time.Second), p.MaxHold, err)
	return p.backOff(d, st, now, say, "moving on once the gate answers again")
}

// backOff puts the weight back at the last good weight after a breach
// recorded in st.Reason, or fails the ramp at MaxBreaches.
func (p Plan) backOff(d Decision, st *State, now time.Time, say func(string, ...any) string, next string) Decision {
	if d.From != st.LastGood {
		st.LastChange = now
	}
	st.Weight = st.LastGood
	d.Weight = st.LastGood
	d.Breach = true
	if st.Breaches >= p.MaxBreaches {
		st.Phase, st.AwaitVerdict = PhaseFailed, false
		d.Action, d.Wait, d.Reason = ActionFail, 0, say("%s; back at the last good weight %d%%; ramp failed after %d breaches", st.Reason, st.LastGood, st.Breaches)
		return d
	}
	d.Action, d.Wait, d.Reason = ActionBackOff, p.Interval, say("%s; back to the last good weight %d%%, %s", st.Reason, st.LastGood, next)
	return d
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
	st.Weight, st.LastChange, st.HoldSince = next, now, time.Time{}
	d.Action, d.Weight, d.Wait = ActionMove, next, p.Interval
	d.Reason = say("%d%% → %d%% (target %d%%)", current, next, target)
	return d
}

// resume continues the kept state, or starts a new ramp when there is none,
// the target changed, or the kept state breaks its invariants (then reset
// says why, and the new ramp first holds the interval). A weight changed by
// someone else is taken as the new starting point, never as known good above
// the last good weight.
func (p Plan) resume(prev *State, current, target int, now time.Time) (st State, note string, reset error) {
	fresh := State{Target: target, Weight: current, LastGood: current, Increment: p.Step, Phase: PhaseRamping}
	if prev != nil {
		if err := prev.Check(len(p.Weights) > 0, now); err != nil {
			fresh.LastChange, fresh.GateSince = now, now
			reset = fmt.Errorf("ramp state in annotation %s is inconsistent (%w): restarted the ramp from the current weight %d%%", wellknown.RampAnnotation, err, current)
			return fresh, fmt.Sprintf("ramp state inconsistent, restarted from %d%%", current), reset
		}
	}
	switch {
	case prev == nil:
		return fresh, "", nil
	case prev.Target != target:
		fresh.LastChange = prev.LastChange // the interval runs from the last change, whichever ramp made it
		fresh.GateSince = prev.GateSince   // one window for the canary, across its targets
		fresh.Canary = prev.Canary
		return fresh, fmt.Sprintf("new target %d%% (was %d%%)", target, prev.Target), nil
	case prev.Weight != current:
		st := *prev
		st.Weight = current
		st.LastGood = min(st.LastGood, current)
		st.HoldSince, st.AwaitVerdict = time.Time{}, false
		if st.Phase == PhaseDone {
			st.Phase = PhaseRamping
		}
		return st, fmt.Sprintf("canary weight changed outside danki (%d%% → %d%%)", prev.Weight, current), nil
	}
	return *prev, "", nil
}

func joinNote(note, more string) string {
	if note == "" {
		return more
	}
	return note + "; " + more
}

func check(ctx context.Context, gate Gate, since time.Time) (bool, string, error) {
	if gate == nil {
		return true, "", nil
	}
	return gate.Check(ctx, since)
}
