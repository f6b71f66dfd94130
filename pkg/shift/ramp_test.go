package shift

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/wellknown"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// freshRamp is a new Ramp each call, as after a plugin restart: nothing
// survives in memory.
func freshRamp(s *Shifter, c clock.WithTicker, g Gate) *Ramp {
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	return &Ramp{Shifter: s, Target: tg, Plan: Plan{Step: 20, Interval: 30 * time.Second, MaxBreaches: 2}, Gate: g, Clock: c}
}

func rampState(t *testing.T, vs *networkingv1.VirtualService) State {
	t.Helper()
	var st State
	if err := json.Unmarshal([]byte(vs.Annotations[wellknown.RampAnnotation]), &st); err != nil {
		t.Fatalf("ramp annotation %q: %v", vs.Annotations[wellknown.RampAnnotation], err)
	}
	return st
}

func canaryWeight(vs *networkingv1.VirtualService) int32 { return vs.Spec.Http[1].Route[1].Weight }

func TestRampTicksPersistStateAcrossRestarts(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{pass}}

	d, err := freshRamp(s, c, g).Tick(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	st := rampState(t, vs)
	if d.Action != ActionMove || canaryWeight(vs) != 20 || vs.Spec.Http[1].Route[0].Weight != 80 {
		t.Fatalf("first tick %+v, weights %d/%d", d, vs.Spec.Http[1].Route[0].Weight, canaryWeight(vs))
	}
	if st.Target != 40 || st.Weight != 20 || st.LastGood != 0 || st.Increment != 20 || !st.LastChange.Equal(t0) || st.Phase != PhaseRamping {
		t.Fatalf("persisted state %+v", st)
	}
	// Verification holds Argo's step while ramping.
	v, err := freshRamp(s, c, g).Verify(ctx, 40)
	if err != nil || v.Verified || !strings.Contains(v.Reason, "ramping to 40%: at 20%") {
		t.Fatalf("verify while ramping: %+v %v", v, err)
	}

	// A restarted plugin within the interval holds.
	c.SetTime(t0.Add(10 * time.Second))
	if d, err = freshRamp(s, c, g).Tick(ctx, 40); err != nil || d.Action != ActionHold {
		t.Fatalf("tick within the interval after restart: %+v %v", d, err)
	}
	c.SetTime(t0.Add(30 * time.Second))
	if d, err = freshRamp(s, c, g).Tick(ctx, 40); err != nil || d.Action != ActionMove || d.Weight != 40 {
		t.Fatalf("tick after the interval: %+v %v", d, err)
	}
	c.SetTime(t0.Add(60 * time.Second))
	if d, err = freshRamp(s, c, g).Tick(ctx, 40); err != nil || d.Action != ActionDone {
		t.Fatalf("tick at the target: %+v %v", d, err)
	}
	if st := rampState(t, readVS(t, s, "reviews")); st.Phase != PhaseDone || st.LastGood != 40 {
		t.Fatalf("state at done %+v", st)
	}
	if v, err = freshRamp(s, c, g).Verify(ctx, 40); err != nil || !v.Verified {
		t.Fatalf("verify at done: %+v %v", v, err)
	}
	// The next Argo step's weight is not verified until ramped to.
	if v, err = freshRamp(s, c, g).Verify(ctx, 60); err != nil || v.Verified {
		t.Fatalf("verify of the next target: %+v %v", v, err)
	}
	// Everything but the managed weights and the annotation is untouched.
	got := readVS(t, s, "reviews")
	assertSpec(t, withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 40}), &got.Spec)
	if got.Annotations["owner"] != "team-a" {
		t.Fatal("foreign annotation lost")
	}
}

func TestRampFailureIsReportedByVerifyAndAbortClears(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{breach}}
	for range 4 {
		if _, err := freshRamp(s, c, g).Tick(ctx, 60); err != nil {
			t.Fatal(err)
		}
		c.Step(30 * time.Second)
	}
	vs := readVS(t, s, "reviews")
	if st := rampState(t, vs); st.Phase != PhaseFailed || canaryWeight(vs) != 0 {
		t.Fatalf("after 2 breaches (max 2): state %+v weight %d, want failed at 0", st, canaryWeight(vs))
	}
	v, err := freshRamp(s, c, g).Verify(ctx, 60)
	if !errors.Is(err, ErrRampFailed) || v.Verified {
		t.Fatalf("verify of a failed ramp: %+v %v, want ErrRampFailed", v, err)
	}
	assertErr(t, err, "breach 2/2 at 10%: p99 412ms > 250ms")

	d, err := freshRamp(s, c, g).Tick(ctx, 0)
	if err != nil || d.Action != ActionAbort {
		t.Fatalf("abort: %+v %v", d, err)
	}
	vs = readVS(t, s, "reviews")
	if _, ok := vs.Annotations[wellknown.RampAnnotation]; ok || canaryWeight(vs) != 0 {
		t.Fatalf("after abort: annotations %v weight %d", vs.Annotations, canaryWeight(vs))
	}
	if v, err := freshRamp(s, c, g).Verify(ctx, 0); err != nil || !v.Verified {
		t.Fatalf("verify 0 after abort: %+v %v", v, err)
	}
}

func TestRampAbortFromMidRampIsImmediate(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{pass}}
	for range 3 {
		if _, err := freshRamp(s, c, g).Tick(ctx, 100); err != nil {
			t.Fatal(err)
		}
		c.Step(30 * time.Second)
	}
	if w := canaryWeight(readVS(t, s, "reviews")); w != 60 {
		t.Fatalf("weight %d after three moves, want 60", w)
	}
	calls := g.calls
	if _, err := freshRamp(s, c, g).Tick(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if w := canaryWeight(readVS(t, s, "reviews")); w != 0 || g.calls != calls {
		t.Fatalf("abort left weight %d (gate calls %d → %d)", w, calls, g.calls)
	}
}

func TestRampRunLoopsToTheTarget(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testutil.NewStepClock(t0)
	r := freshRamp(s, c, nil)
	var moves []int
	d, err := r.Run(ctx, 50, 10*time.Second, func(d Decision) {
		if d.Action == ActionMove {
			moves = append(moves, d.Weight)
		}
	})
	if err != nil || d.Action != ActionDone {
		t.Fatalf("run: %+v %v", d, err)
	}
	if slept := c.Since(t0); !slices.Equal(moves, []int{20, 40, 50}) || slept < 90*time.Second {
		t.Fatalf("moves %v after sleeping %s, want [20 40 50] over ≥ 90s", moves, slept)
	}
}

func TestRampRunReportsFailure(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	r := freshRamp(s, testutil.NewStepClock(t0), &scriptedGate{answers: []verdict{breach}})
	_, err := r.Run(ctx, 50, time.Second, nil)
	if !errors.Is(err, ErrRampFailed) {
		t.Fatalf("run with a breaching gate: %v, want ErrRampFailed", err)
	}
	assertErr(t, err, "p99 412ms > 250ms")
}

// TestRampConflictAsksTheGateOnce: a 409 caused by an unrelated change is
// retried from a fresh read without asking the gate again, and the retry
// keeps the unrelated change.
func TestRampConflictAsksTheGateOnce(t *testing.T) {
	s, cs := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{pass}}
	if _, err := freshRamp(s, c, g).Tick(ctx, 40); err != nil { // 0 → 20, no gate
		t.Fatal(err)
	}
	c.Step(30 * time.Second)
	conflicts := 0
	cs.PrependReactor("update", "virtualservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			return false, nil, nil
		}
		conflicts++
		obj, _ := cs.Tracker().Get(vsResource, ns, "reviews")
		vs := obj.(*networkingv1.VirtualService).DeepCopy()
		vs.Spec.Hosts = append(vs.Spec.Hosts, "added.example.com")
		if err := cs.Tracker().Update(vsResource, vs, ns); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(vsResource.GroupResource(), "reviews", errors.New("modified"))
	})
	d, err := freshRamp(s, c, g).Tick(ctx, 40)
	if err != nil || d.Weight != 40 {
		t.Fatalf("tick through a conflict: %+v %v", d, err)
	}
	if g.calls != 1 || conflicts != 1 {
		t.Fatalf("gate asked %d times through %d conflict(s), want once", g.calls, conflicts)
	}
	vs := readVS(t, s, "reviews")
	if !slices.Contains(vs.Spec.Hosts, "added.example.com") || canaryWeight(vs) != 40 {
		t.Fatalf("after retry: hosts %v weight %d", vs.Spec.Hosts, canaryWeight(vs))
	}
}

func TestRampErrors(t *testing.T) {
	vs := virtualService("reviews", hostSpec())
	vs.Annotations[wellknown.RampAnnotation] = `{"phase":"Sideways"}`
	s, cs := newFake(t, vs)
	c := testingclock.NewFakeClock(t0)
	_, err := freshRamp(s, c, nil).Tick(ctx, 40)
	assertErr(t, err, "annotation danki.dev/ramp", `phase "Sideways"`, "delete the annotation")
	noWrites(t, cs)

	r := freshRamp(s, c, nil)
	r.Plan.Weights = []int{10}
	assertErr(t, func() error { _, err := r.Tick(ctx, 40); return err }(), "set one of them, not both")
	_, err = freshRamp(s, c, nil).Tick(ctx, 90, Extra{Host: "exp", Weight: 20})
	assertErr(t, err, "weights cannot sum to 100", "canary 90 + exp 20")
	noWrites(t, cs)
}
