package shift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/wellknown"
	testingclock "k8s.io/utils/clock/testing"
)

// TestAbortIgnoresTheStoredState: going to 0 works whatever the ramp
// annotation holds, and clears it (issue #12: a corrupt annotation made the
// plugin's SetWeight(0) fail and the canary kept its weight).
func TestAbortIgnoresTheStoredState(t *testing.T) {
	for name, raw := range map[string]string{
		"not JSON":      "{not json",
		"unknown phase": `{"phase":"Sideways"}`,
		"inconsistent":  `{"target":60,"weight":20,"lastGood":90,"increment":-5,"phase":"Done"}`,
		"wrong type":    `{"target":"sixty"}`,
	} {
		t.Run(name, func(t *testing.T) {
			vs := virtualService("reviews", withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 40}))
			vs.Annotations[wellknown.RampAnnotation] = raw
			s, _ := newFake(t, vs)
			c := testingclock.NewFakeClock(t0)
			r := freshRamp(s, c, &scriptedGate{answers: []verdict{pass}})
			r.Plan.Step = -1 // not even a bad plan may keep users on the canary
			d, err := r.Tick(ctx, 0)
			if err != nil || d.Action != ActionAbort {
				t.Fatalf("Tick(0) with annotation %s: %+v %v, want an abort", raw, d, err)
			}
			got := readVS(t, s, "reviews")
			if _, ok := got.Annotations[wellknown.RampAnnotation]; ok || canaryWeight(got) != 0 || got.Spec.Http[1].Route[0].Weight != 100 {
				t.Fatalf("after the abort: annotation %q, weights %d/%d; want cleared and 100/0",
					got.Annotations[wellknown.RampAnnotation], got.Spec.Http[1].Route[0].Weight, canaryWeight(got))
			}
			// Verify(0) never reads the state either.
			vs2 := virtualService("reviews", hostSpec())
			vs2.Annotations[wellknown.RampAnnotation] = raw
			s2, _ := newFake(t, vs2)
			if v, err := freshRamp(s2, c, nil).Verify(ctx, 0); err != nil || !v.Verified {
				t.Fatalf("Verify(0) with annotation %s: %+v %v", raw, v, err)
			}
		})
	}
}

// TestGetShowsACorruptStateInsteadOfFailing: `danki shift get` is how one
// finds out what is wrong; it must not fail on the annotation.
func TestGetShowsACorruptStateInsteadOfFailing(t *testing.T) {
	vs := virtualService("reviews", hostSpec())
	vs.Annotations[wellknown.RampAnnotation] = "{not json"
	s, _ := newFake(t, vs)
	st, err := s.Get(ctx, hostTarget())
	if err != nil {
		t.Fatalf("Get with a corrupt ramp annotation: %v", err)
	}
	if st.Ramp != nil || !strings.Contains(st.RampProblem, "annotation danki.dev/ramp") || st.CanaryWeight != 0 || len(st.Routes) != 7 {
		t.Fatalf("status %+v: want the routes, no ramp, and the problem named", st)
	}
	vs = virtualService("reviews", hostSpec())
	vs.Annotations[wellknown.RampAnnotation] = `{"target":60,"weight":20,"lastGood":50,"increment":10,"phase":"Ramping"}`
	s, _ = newFake(t, vs)
	if st, err = s.Get(ctx, hostTarget()); err != nil || st.Ramp == nil || !strings.Contains(st.RampProblem, "lastGood: 50 is not 0–weight (20)") {
		t.Fatalf("inconsistent state: %+v %v", st, err)
	}
}

// TestGetShowsALoneDestinationAsIstioRoutesIt: a route's only destination
// gets all of its traffic, whatever weight (usually none) is written.
func TestGetShowsALoneDestinationAsIstioRoutesIt(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	st, err := s.Get(ctx, hostTarget())
	if err != nil {
		t.Fatal(err)
	}
	health := st.Routes[0]
	if health.Name != "health" || len(health.Destinations) != 1 || health.Destinations[0].Weight != 100 {
		t.Fatalf("lone destination %+v: want weight 100 (written 0)", health)
	}
	if p := st.Routes[1]; p.Destinations[0].Weight != 100 || p.Destinations[1].Weight != 0 {
		t.Fatalf("split route %+v: weights must stay as written", p)
	}
}

// TestInconsistentStateRestartsTheRamp: a parseable state that breaks its
// invariants is not trusted: before the fix, lastGood above the weight made
// a breach raise the canary, and increment 0 jumped straight to the target.
func TestInconsistentStateRestartsTheRamp(t *testing.T) {
	p := Plan{Step: 10, Interval: time.Minute}
	now := t0.Add(time.Hour)
	cases := []struct {
		name  string
		prev  State
		gate  verdict
		field string
	}{
		{"lastGood above the weight", State{Target: 60, Weight: 20, LastGood: 50, Increment: 10, Phase: PhaseRamping, LastChange: t0}, breach, "lastGood"},
		{"increment 0 without a ladder", State{Target: 60, Weight: 20, LastGood: 20, Phase: PhaseRamping, LastChange: t0}, pass, "increment"},
		{"negative increment", State{Target: 60, Weight: 20, LastGood: 10, Increment: -3, Phase: PhaseRamping, LastChange: t0}, pass, "increment"},
		{"target out of range", State{Target: 400, Weight: 20, LastGood: 20, Increment: 10, Phase: PhaseRamping, LastChange: t0}, pass, "target"},
		{"weight above the target", State{Target: 60, Weight: 80, LastGood: 20, Increment: 10, Phase: PhaseRamping, LastChange: t0}, pass, "weight"},
		{"awaiting a verdict above the last good weight", State{Target: 60, Weight: 20, LastGood: 10, Increment: 10, Phase: PhaseRamping, LastChange: t0, AwaitVerdict: true}, pass, "awaitVerdict"},
		{"consistent, for contrast", State{Target: 60, Weight: 20, LastGood: 20, Increment: 10, Phase: PhaseRamping, LastChange: t0}, pass, ""},
		{"done below the target", State{Target: 60, Weight: 20, LastGood: 20, Increment: 10, Phase: PhaseDone, LastChange: t0}, pass, "phase"},
		{"last change in the future", State{Target: 60, Weight: 20, LastGood: 20, Increment: 10, Phase: PhaseRamping, LastChange: now.Add(24 * time.Hour)}, pass, "lastChange"},
		{"negative breaches", State{Target: 60, Weight: 20, LastGood: 0, Increment: 10, Breaches: -4, Phase: PhaseRamping, LastChange: t0}, breach, "breaches"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.field == "" { // a consistent state, for contrast: it is kept
				d := p.Next(ctx, &c.prev, 20, 60, now, &scriptedGate{answers: []verdict{c.gate}})
				if d.StateReset != nil || d.Weight != 30 {
					t.Fatalf("consistent state: %+v", d)
				}
				return
			}
			g := &scriptedGate{answers: []verdict{c.gate}}
			d := p.Next(ctx, &c.prev, 20, 60, now, g)
			if d.StateReset == nil || !strings.Contains(d.StateReset.Error(), c.field+":") || !strings.Contains(d.StateReset.Error(), "restarted the ramp from the current weight 20%") {
				t.Fatalf("decision %+v: want a reset naming %q", d, c.field)
			}
			if d.Weight != 20 || d.Action != ActionHold || g.calls != 0 {
				t.Fatalf("decision %+v (gate calls %d): want a hold at the current 20%% (a fresh ramp, known good, interval first)", d, g.calls)
			}
			if st := d.State; st.LastGood != 20 || st.Weight != 20 || st.Increment != 10 || st.Breaches != 0 || !st.LastChange.Equal(now) || st.Check(false, now) != nil {
				t.Fatalf("restarted state %+v", st)
			}
			// It carries on as a fresh ramp.
			d = p.Next(ctx, d.State, 20, 60, now.Add(time.Minute), g)
			if d.Action != ActionMove || d.Weight != 30 {
				t.Fatalf("after the reset: %+v, want 20 → 30", d)
			}
		})
	}
}

// TestNoVerdictHoldIsBounded: while the gate has no verdict the ramp holds
// at most MaxHold, then goes back to the last good weight and counts a
// breach; from there it moves on only once the gate answers again, and
// holds without a verdict keep counting breaches until the ramp fails.
func TestNoVerdictHoldIsBounded(t *testing.T) {
	down := verdict{err: errors.New("Post http://prometheus:9090/api/v1/query: connection refused")}
	g := &scriptedGate{answers: []verdict{down}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Minute, MaxHold: 3 * time.Minute, MaxBreaches: 3}, gate: g, now: t0}
	w.next(30) // 0 → 10: 0 is known good
	w.advance(time.Minute)
	if d := w.next(30); d.Action != ActionHold || w.current != 10 || !w.state.HoldSince.Equal(w.now) {
		t.Fatalf("first answer without a verdict at 10: %+v state %+v, want a hold from now", d, w.state)
	}
	for range 2 {
		w.advance(time.Minute)
		d := w.next(30)
		if d.Action != ActionHold || d.Weight != 10 || d.NoVerdict == nil || !strings.Contains(d.Reason, "connection refused") || !strings.Contains(d.Reason, "maxHold 3m0s") {
			t.Fatalf("hold without a verdict: %+v", d)
		}
		if d.Wait <= 0 || d.Wait > 3*time.Minute {
			t.Fatalf("hold wait %s: want at most the rest of maxHold", d.Wait)
		}
	}
	w.advance(time.Minute) // 3 min since the first no-verdict answer
	d := w.next(30)
	if d.Action != ActionBackOff || d.Weight != 0 || w.state.Breaches != 1 || !w.state.AwaitVerdict || d.NoVerdict == nil {
		t.Fatalf("after maxHold: %+v state %+v, want back to 0 with a breach counted", d, w.state)
	}
	if !strings.Contains(d.Reason, "gate breach 1/3 at 10%: no verdict for 3m0s (maxHold 3m0s)") {
		t.Fatalf("back-off reason %q", d.Reason)
	}
	// Still no verdict: the weight never rises, even after the interval.
	for range 2 {
		w.advance(time.Minute)
		if d := w.next(30); d.Weight != 0 || d.Action != ActionHold || d.NoVerdict == nil {
			t.Fatalf("at the last good weight without a verdict: %+v", d)
		}
	}
	// The gate answers again: the ramp moves on.
	g.answers, g.calls = []verdict{pass}, 0
	w.advance(time.Minute)
	if d := w.next(30); d.Action != ActionMove || d.Weight != 10 || w.state.AwaitVerdict || d.NoVerdict != nil {
		t.Fatalf("once the gate answers: %+v state %+v, want 0 → 10", d, w.state)
	}
	w.advance(time.Minute)
	if d := w.next(30); d.Action != ActionMove || d.Weight != 20 {
		t.Fatalf("with verdicts: %+v, want 10 → 20", d)
	}
}

func TestNoVerdictForeverFailsTheRamp(t *testing.T) {
	g := &scriptedGate{answers: []verdict{{err: errors.New("no data")}}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Minute, MaxHold: 2 * time.Minute, MaxBreaches: 2}, gate: g, now: t0}
	var d Decision
	for range 30 {
		d = w.next(30)
		if w.current > 10 {
			t.Fatalf("the weight rose to %d without a verdict", w.current)
		}
		if d.Action == ActionFail {
			break
		}
		w.advance(30 * time.Second)
	}
	if d.Action != ActionFail || d.Weight != 0 || !strings.Contains(d.Reason, "gate breach 2/2 at 0%: no verdict") || d.NoVerdict == nil {
		t.Fatalf("after two maxHolds without a verdict: %+v, want the ramp failed at 0", d)
	}
}

// TestRampTickWarnsWhileHolding: a hold for want of a verdict is logged at
// Warn (it was Debug: silent) with the cause.
func TestRampTickWarnsWhileHolding(t *testing.T) {
	logs := &records{}
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	s.log = slog.New(logs)
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{{err: errors.New("prometheus unreachable")}}}
	if _, err := freshRamp(s, c, g).Tick(ctx, 40); err != nil { // 0 → 20
		t.Fatal(err)
	}
	c.Step(30 * time.Second)
	if d, err := freshRamp(s, c, g).Tick(ctx, 40); err != nil || d.Action != ActionHold {
		t.Fatalf("%+v %v", d, err)
	}
	if !logs.has(slog.LevelWarn, "prometheus unreachable") {
		t.Fatalf("no Warn naming the cause; logs: %v", logs.all())
	}
}

type records struct {
	mu   sync.Mutex
	recs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
	r.recs = append(r.recs, line)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) has(level slog.Level, text string) bool {
	for _, l := range r.all() {
		if strings.HasPrefix(l, level.String()+" ") && strings.Contains(l, text) {
			return true
		}
	}
	return false
}
func (r *records) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.recs...)
}

// TestGateWindowSurvivesRestarts: the gate's window start lives in the ramp
// state, so a restarted process judges the same cumulative window; a new
// target keeps it, a new canary or an abort starts a new one.
func TestGateWindowSurvivesRestarts(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{pass}}
	tick := func(target int, canary string) Decision {
		t.Helper()
		r := freshRamp(s, c, g) // a fresh Ramp each time: nothing in memory
		r.Canary = canary
		d, err := r.Tick(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tick(40, "abc") // 0 → 20: the window starts now
	for range 3 {
		c.Step(30 * time.Second)
		tick(40, "abc")
	}
	c.Step(30 * time.Second)
	tick(60, "abc") // the next Argo step: same canary, same window
	c.Step(30 * time.Second)
	tick(60, "abc")
	if len(g.sinces) < 2 {
		t.Fatalf("gate asked %d times", len(g.sinces))
	}
	for i, since := range g.sinces {
		if !since.Equal(t0) {
			t.Fatalf("check %d judged the window from %s, want %s (the first move of this canary)", i, since, t0)
		}
	}
	// A new canary starts its own window.
	c.Step(30 * time.Second)
	newCanary := c.Now()
	tick(80, "def")
	c.Step(30 * time.Second)
	tick(80, "def")
	if last := g.sinces[len(g.sinces)-1]; !last.Equal(newCanary) {
		t.Fatalf("a new canary judged from %s, want %s", last, newCanary)
	}
	if st := rampState(t, readVS(t, s, "reviews")); !st.GateSince.Equal(newCanary) || st.Canary != "def" {
		t.Fatalf("kept state %+v", st)
	}
	// An abort clears it: the next ramp starts a new window.
	tick(0, "def")
	c.Step(time.Minute)
	restart := c.Now()
	tick(20, "def")
	if st := rampState(t, readVS(t, s, "reviews")); !st.GateSince.Equal(restart) {
		t.Fatalf("after an abort the window starts at %s, want %s", st.GateSince, restart)
	}
}

// TestNoVerdictInsideTheIntervalIsNoOutage: every rung starts with too few
// canary requests for a verdict. Inside the interval the ramp holds anyway,
// so that is a quiet hold (no NoVerdict, so no Warn log and no event, and no
// maxHold clock); once the interval is over, a gate still without a verdict
// is an outage and the maxHold clock starts.
func TestNoVerdictInsideTheIntervalIsNoOutage(t *testing.T) {
	noData := verdict{err: errors.New("canary: no data yet")}
	g := &scriptedGate{answers: []verdict{noData}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Minute, MaxHold: 3 * time.Minute, MaxBreaches: 3}, gate: g, now: t0}
	w.next(30) // 0 → 10: 0 is known good
	w.advance(20 * time.Second)
	d := w.next(30)
	if d.Action != ActionHold || d.Weight != 10 || d.NoVerdict != nil || !w.state.HoldSince.IsZero() {
		t.Fatalf("no verdict 20 s into the interval: %+v state %+v, want a quiet hold without the maxHold clock", d, w.state)
	}
	if d.Wait <= 0 || d.Wait > 40*time.Second || !strings.Contains(d.Reason, "left of the interval") {
		t.Fatalf("quiet hold: wait %s, reason %q: want the rest of the interval", d.Wait, d.Reason)
	}
	w.advance(40 * time.Second) // the interval is over
	d = w.next(30)
	if d.Action != ActionHold || d.NoVerdict == nil || !w.state.HoldSince.Equal(w.now) {
		t.Fatalf("no verdict after the interval: %+v state %+v, want a no-verdict hold from now", d, w.state)
	}
}

// TestAfterTheOutageInconclusiveIsAnAnswer: back at the last good weight 0
// after maxHold without a verdict, the canary gets no users, so a gate that
// can be read again answers Inconclusive (too few canary requests) for
// ever. That is an answer: the ramp moves on to the next rung instead of
// counting breaches until it fails (found in the lab: Prometheus restarted,
// the rollout was aborted anyway).
func TestAfterTheOutageInconclusiveIsAnAnswer(t *testing.T) {
	down := verdict{err: errors.New("latency analysis failed to measure: prometheus unreachable")}
	g := &scriptedGate{answers: []verdict{down}}
	w := &walk{t: t, plan: Plan{Step: 10, Interval: time.Minute, MaxHold: time.Minute, MaxBreaches: 3}, gate: g, now: t0}
	w.next(30) // 0 → 10
	w.advance(time.Minute)
	w.next(30) // the interval is over: the no-verdict hold starts
	w.advance(time.Minute)
	if d := w.next(30); d.Action != ActionBackOff || d.Weight != 0 || !w.state.AwaitVerdict {
		t.Fatalf("after maxHold: %+v state %+v, want back to 0, awaiting a verdict", d, w.state)
	}
	g.answers, g.calls = []verdict{{err: fmt.Errorf("%w: canary has 0 requests in the window", analysis.ErrInconclusive)}}, 0
	w.advance(time.Minute)
	if d := w.next(30); d.Action != ActionMove || d.Weight != 10 || w.state.AwaitVerdict || w.state.Breaches != 1 {
		t.Fatalf("the gate answers Inconclusive at 0: %+v state %+v, want 0 → 10 with the one breach kept", d, w.state)
	}
}

// TestAbortIgnoresACorruptExtrasAnnotation: the extras annotation is stored
// state too; going to 0 must not depend on it, and clears it. A weight
// above 0 still refuses it, naming the annotation.
func TestAbortIgnoresACorruptExtrasAnnotation(t *testing.T) {
	vs := virtualService("reviews", withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 40}))
	vs.Annotations[wellknown.ExtrasAnnotation] = "{not json"
	s, _ := newFake(t, vs)
	if err := s.SetWeight(ctx, hostTarget(), 20); err == nil || !strings.Contains(err.Error(), "annotation "+wellknown.ExtrasAnnotation) {
		t.Fatalf("SetWeight(20) with a corrupt extras annotation: err = %v, want it named", err)
	}
	if err := s.SetWeight(ctx, hostTarget(), 0); err != nil {
		t.Fatalf("SetWeight(0) with a corrupt extras annotation: %v", err)
	}
	got := readVS(t, s, "reviews")
	if _, ok := got.Annotations[wellknown.ExtrasAnnotation]; ok || canaryWeight(got) != 0 || got.Spec.Http[1].Route[0].Weight != 100 {
		t.Fatalf("after the abort: annotation %q, weights %d/%d; want cleared and 100/0",
			got.Annotations[wellknown.ExtrasAnnotation], got.Spec.Http[1].Route[0].Weight, canaryWeight(got))
	}
}
