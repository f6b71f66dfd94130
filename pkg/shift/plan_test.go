package shift

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// walk drives Plan.Next like a caller would: the weight it decides becomes
// the current weight, the state is kept, the clock advances by tick.
type walk struct {
	t       *testing.T
	plan    Plan
	gate    Gate
	state   *State
	current int
	now     time.Time
}

func (w *walk) next(target int) Decision {
	w.t.Helper()
	d := w.plan.Next(ctx, w.state, w.current, target, w.now, w.gate)
	w.state, w.current = d.State, d.Weight
	return d
}

func (w *walk) advance(d time.Duration) { w.now = w.now.Add(d) }

func TestRampMovesInStepsNoFasterThanInterval(t *testing.T) {
	g := &scriptedGate{answers: []verdict{pass}}
	w := &walk{t: t, plan: Plan{Step: 20, Interval: 30 * time.Second}, gate: g, now: t0}
	d := w.next(50)
	if d.Action != ActionMove || d.From != 0 || d.Weight != 20 || d.Wait != 30*time.Second {
		t.Fatalf("first move = %+v, want 0 → 20 at once, wait 30s", d)
	}
	if g.calls != 0 {
		t.Fatal("the starting weight is known good: the gate must not be asked")
	}
	var weights []int
	for range 20 {
		w.advance(10 * time.Second)
		d = w.next(50)
		if d.Action == ActionMove {
			weights = append(weights, d.Weight)
			if gap := w.now.Sub(t0); gap < time.Duration(len(weights))*30*time.Second {
				t.Fatalf("moved to %d after %s: faster than the 30s interval", d.Weight, gap)
			}
		}
		if d.Action == ActionDone {
			break
		}
		if d.Action == ActionHold && d.Wait > 20*time.Second {
			t.Fatalf("hold with wait %s, want ≤ the 20s left", d.Wait)
		}
	}
	if d.Action != ActionDone || w.current != 50 {
		t.Fatalf("ended with %+v at %d, want done at 50", d, w.current)
	}
	if !slices.Equal(weights, []int{40, 50}) {
		t.Fatalf("moves %v, want [40 50] (step 20, capped at the target)", weights)
	}
	if w.state.Phase != PhaseDone || w.state.LastGood != 50 || w.state.Target != 50 {
		t.Fatalf("final state %+v", w.state)
	}
	// Done is sticky: no more gate calls.
	calls := g.calls
	w.advance(time.Hour)
	if d := w.next(50); d.Action != ActionDone || g.calls != calls {
		t.Fatalf("after done: %+v, gate calls %d → %d", d, calls, g.calls)
	}
}

func TestRampHoldsWhileTheGateHasNoVerdict(t *testing.T) {
	g := &scriptedGate{answers: []verdict{{err: errors.New("3 samples, need 100")}, {err: errors.New("prometheus unreachable")}, pass}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Minute}, gate: g, now: t0}
	w.next(20) // 0 → 10
	for i := range 2 {
		w.advance(2 * time.Minute)
		d := w.next(20)
		if d.Action != ActionHold || d.Weight != 10 || !strings.Contains(d.Reason, "gate has no verdict yet") {
			t.Fatalf("gate error %d: %+v, want hold at 10 naming the missing verdict", i, d)
		}
		if w.state.Breaches != 0 {
			t.Fatal("no verdict counted as a breach")
		}
	}
	w.advance(time.Second)
	if d := w.next(20); d.Action != ActionMove || d.Weight != 20 {
		t.Fatalf("after a pass: %+v, want move to 20", d)
	}
}

func TestRampBacksOffHalvesIncrementAndFailsAfterMaxBreaches(t *testing.T) {
	g := &scriptedGate{answers: []verdict{pass, breach, breach, breach}}
	w := &walk{t: t, plan: Plan{Step: 20, Interval: 30 * time.Second, MaxBreaches: 3}, gate: g, now: t0}
	w.next(100) // 0 → 20
	w.advance(30 * time.Second)
	if d := w.next(100); d.Weight != 40 { // gate passes at 20
		t.Fatalf("want 20 → 40, got %+v", d)
	}
	w.advance(5 * time.Second) // a breach counts even before the interval ends
	d := w.next(100)
	if d.Action != ActionBackOff || d.Weight != 20 || w.state.Increment != 10 || w.state.Breaches != 1 {
		t.Fatalf("first breach: %+v state %+v, want back to 20 with increment 10", d, w.state)
	}
	if !strings.Contains(d.Reason, "p99 412ms > 250ms") || !strings.Contains(d.Reason, "breach 1/3 at 40%") {
		t.Fatalf("breach reason %q does not name the breach", d.Reason)
	}
	w.advance(29 * time.Second)
	if d := w.next(100); d.Action != ActionHold || d.Weight != 20 {
		t.Fatalf("back at the last good weight before the interval: %+v, want hold", d)
	}
	w.advance(time.Second)
	if d := w.next(100); d.Action != ActionMove || d.Weight != 30 {
		t.Fatalf("after back-off: %+v, want 20 → 30 (halved increment)", d)
	}
	w.advance(30 * time.Second)
	if d := w.next(100); d.Action != ActionBackOff || d.Weight != 20 || w.state.Increment != 5 {
		t.Fatalf("second breach: %+v, state %+v, want increment 5", d, w.state)
	}
	w.advance(30 * time.Second)
	w.next(100) // 20 → 25
	w.advance(30 * time.Second)
	d = w.next(100)
	if d.Action != ActionFail || d.Weight != 20 || w.state.Phase != PhaseFailed {
		t.Fatalf("third breach: %+v state %+v, want failed at last good 20", d, w.state)
	}
	if !strings.Contains(d.Reason, "breach 3/3 at 25%: p99 412ms > 250ms") {
		t.Fatalf("failure reason %q does not name the breach", d.Reason)
	}
	calls := g.calls
	w.advance(time.Hour)
	if d := w.next(100); d.Action != ActionFail || d.Weight != 20 || g.calls != calls {
		t.Fatalf("a failed ramp must stay failed without asking the gate: %+v", d)
	}
}

func TestRampIncrementNeverBelowOne(t *testing.T) {
	g := &scriptedGate{answers: []verdict{breach}}
	w := &walk{t: t, plan: Plan{Step: 1, Interval: time.Second, MaxBreaches: 5}, gate: g, now: t0}
	w.next(10)
	w.advance(time.Second)
	w.next(10)
	if w.state.Increment != 1 {
		t.Fatalf("increment %d after halving 1, want 1", w.state.Increment)
	}
}

func TestRampAbortIsImmediateAndClearsState(t *testing.T) {
	g := &scriptedGate{answers: []verdict{pass}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Hour}, gate: g, now: t0}
	w.next(50)
	d := w.next(0)
	if d.Action != ActionAbort || d.Weight != 0 || d.State != nil || g.calls != 0 {
		t.Fatalf("abort: %+v (gate calls %d), want weight 0 now, no state, no gate", d, g.calls)
	}
}

func TestRampWeightsLadder(t *testing.T) {
	w := &walk{t: t, plan: Plan{Weights: []int{5, 10, 25, 50, 100}, Interval: time.Second}, now: t0}
	var got []int
	for range 20 {
		d := w.next(30)
		if d.Action == ActionMove {
			got = append(got, d.Weight)
		}
		if d.Action == ActionDone {
			break
		}
		w.advance(time.Second)
	}
	if !slices.Equal(got, []int{5, 10, 25, 30}) {
		t.Fatalf("ladder moves %v, want [5 10 25 30]", got)
	}
	// The next Argo step continues on the ladder from there.
	got = nil
	for range 20 {
		w.advance(time.Second)
		d := w.next(60)
		if d.Action == ActionMove {
			got = append(got, d.Weight)
		}
		if d.Action == ActionDone {
			break
		}
	}
	if !slices.Equal(got, []int{50, 60}) {
		t.Fatalf("ladder moves %v, want [50 60]", got)
	}
}

func TestRampLoweringIsImmediateAndUngated(t *testing.T) {
	g := &scriptedGate{answers: []verdict{breach}}
	p := Plan{Step: 10}
	d := p.Next(ctx, &State{Target: 60, Weight: 60, LastGood: 60, Phase: PhaseDone, LastChange: t0}, 60, 20, t0.Add(time.Second), g)
	if d.Action != ActionMove || d.Weight != 20 || d.State.Phase != PhaseDone || g.calls != 0 {
		t.Fatalf("lowering: %+v (gate calls %d)", d, g.calls)
	}
}

func TestRampAdoptsAWeightChangedOutside(t *testing.T) {
	g := &scriptedGate{answers: []verdict{pass}}
	p := Plan{Step: 10, Interval: time.Second}
	prev := &State{Target: 50, Weight: 30, LastGood: 20, Increment: 10, Phase: PhaseRamping, LastChange: t0}
	d := p.Next(ctx, prev, 45, 50, t0.Add(time.Minute), g)
	// 45% was never judged: the gate is asked before it counts as good.
	if !strings.Contains(d.Reason, "changed outside danki (30% → 45%)") || d.State.LastGood != 45 || g.calls != 1 || d.Weight != 50 {
		t.Fatalf("outside change: %+v state %+v (gate calls %d), want 45 gated, then 50", d, d.State, g.calls)
	}
	// Had the gate breached there, the ramp would go back to 20, not 45.
	g = &scriptedGate{answers: []verdict{breach}}
	d = p.Next(ctx, prev, 45, 50, t0.Add(time.Minute), g)
	if d.Action != ActionBackOff || d.Weight != 20 {
		t.Fatalf("breach at an outside weight: %+v, want back to 20", d)
	}
}

func TestRampNewTargetStartsFromTheCurrentWeight(t *testing.T) {
	p := Plan{Step: 25, Interval: time.Minute}
	prev := &State{Target: 20, Weight: 20, LastGood: 20, Increment: 3, Breaches: 2, Phase: PhaseDone, LastChange: t0}
	d := p.Next(ctx, prev, 20, 60, t0.Add(10*time.Second), nil)
	if d.Action != ActionHold || d.State.Breaches != 0 || d.State.Increment != 25 || d.State.LastGood != 20 {
		t.Fatalf("new target within the interval: %+v state %+v, want hold with a fresh ramp", d, d.State)
	}
	d = p.Next(ctx, d.State, 20, 60, t0.Add(time.Minute), nil)
	if d.Action != ActionMove || d.Weight != 45 {
		t.Fatalf("new target: %+v, want 20 → 45", d)
	}
}

func TestPlanValidation(t *testing.T) {
	cases := []struct {
		plan Plan
		want string
	}{
		{Plan{Step: 101}, "step: must be 1–100 percentage points, got 101"},
		{Plan{Step: -1}, "step: must be 1–100 percentage points, got -1"},
		{Plan{Step: 10, Weights: []int{10}}, "weights: step is set too: set one of them, not both"},
		{Plan{Weights: []int{10, 5}}, "weights[1]: 5 must be greater than weights[0] = 10"},
		{Plan{Weights: []int{0}}, "weights[0]: must be 1–100 percent, got 0"},
		{Plan{Interval: -time.Second}, "interval: must not be negative, got -1s"},
		{Plan{MaxBreaches: -2}, "maxBreaches: must be at least 1, got -2"},
		{Plan{MaxHold: -time.Minute}, "maxHold: must be positive, got -1m0s"},
	}
	for _, c := range cases {
		assertErr(t, c.plan.Validate(), c.want)
	}
	// Every problem at once, each under its field.
	err := Plan{Step: 200, Interval: -time.Second, MaxBreaches: -1}.Validate()
	assertErr(t, err, "step: must be", "interval: must not be negative", "maxBreaches: must be at least 1")
	// Validate is pure: it neither fills defaults nor changes the ladder.
	p := Plan{Weights: []int{5, 10}}
	_ = p.Validate()
	if p.Step != 0 || p.MaxHold != 0 {
		t.Fatalf("Validate changed the plan: %+v", p)
	}
	// WithDefaults returns a copy: the caller's ladder is not shared.
	d := p.WithDefaults()
	d.Weights[0] = 99
	if p.Weights[0] != 5 || d.MaxHold != DefaultMaxHold || d.Step != 0 {
		t.Fatalf("WithDefaults: %+v from %+v", d, p)
	}
	if err := (Plan{}).Validate(); err != nil {
		t.Fatalf("zero plan (all defaults): %v", err)
	}
	if p := (Plan{}).WithDefaults(); p.Step != DefaultStep || p.Interval != 0 || p.MaxBreaches != DefaultMaxBreaches {
		t.Fatalf("defaults %+v", p)
	}
}
