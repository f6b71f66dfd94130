package warmupstep

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
)

// fakeYield stands for CPUYield: while it is "lowered" the canary server
// answers slower (the CPU it yields is what it needed), and it records the
// order of calls.
type fakeYield struct {
	lowered  atomic.Bool
	lowers   atomic.Int32
	restores atomic.Int32
	// cpuRequest, if set, is the template's request the lowered targets
	// carry, as CPUYield's do.
	cpuRequest float64
}

func (f *fakeYield) Lower(_ context.Context, canary []warmup.Target) ([]warmup.Target, string, bool) {
	f.lowers.Add(1)
	f.lowered.Store(true)
	out := slices.Clone(canary)
	for i := range out {
		out[i].CPURequest = f.cpuRequest
	}
	return out, "", true
}

func (f *fakeYield) Restore(context.Context) string {
	f.restores.Add(1)
	f.lowered.Store(false)
	return "CPU request 1m while warming, restored on 1 pod(s)"
}

// yieldJob warms canary next to stable, with y as its yield.
func yieldJob(canary, stable *testutil.ColdServer, y Yielder) Job {
	cfg := fastConfig()
	cfg.Deadline = config.Duration(20 * time.Second) // yields for 10 s at most
	// The yield ends at 3,000 requests at most; stable's windows come at
	// 500 qps, so a warm pod is judged warm well before.
	cfg.MaxRequests, cfg.StableQPS = 6000, 500
	reject := true // as the step's default with stable pods
	cfg.RejectSlowerVersion = &reject
	return Job{Config: cfg, Yield: y, FindTargets: func(ctx context.Context) ([]warmup.Target, []warmup.Target, error) {
		return warmup.FindTargets(ctx, warmup.TargetQuery{
			Canary: warmup.TargetSource{URLs: []string{canary.URL}, URLsField: "urls"},
			Stable: warmup.TargetSource{URLs: []string{stable.URL}, URLsField: "stableURLs"}, CompareToStable: true})
	}}
}

// A pod that is only slower while it yields (it lost the CPU to the users)
// is judged at full weight, in the same run, and passes there; the request
// is put back once, before the step reports it warm.
func TestYieldSlowerOnlyWhileYieldingIsJudgedAgain(t *testing.T) {
	y := &fakeYield{}
	canary := newTestServer(t, func(int64, bool) time.Duration {
		if y.lowered.Load() {
			return 20 * time.Millisecond
		}
		return time.Millisecond
	})
	stable := newTestServer(t, testutil.Flat(time.Millisecond))
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, yieldJob(canary, stable, y))
	st := waitFinal(t, s, key, time.Minute)
	if st.Phase != PhaseConverged {
		t.Fatalf("a pod slower only while yielding CPU failed: %s %s", st.Phase, st.Message)
	}
	if !strings.Contains(st.Message, "judged at full CPU weight after") || !strings.Contains(st.Message, "restored on 1 pod(s)") {
		t.Errorf("message does not say it was judged again at full weight and restored: %s", st.Message)
	}
	if y.lowers.Load() != 1 || y.restores.Load() != 1 {
		t.Errorf("lowered %d, restored %d times; want once each", y.lowers.Load(), y.restores.Load())
	}
}

// A pod warm while it yields is warm: one run, the request put back before
// the check after the warm-up and before it is reported warm.
func TestYieldWarmWhileYieldingStands(t *testing.T) {
	y := &fakeYield{}
	canary := newTestServer(t, testutil.Flat(time.Millisecond))
	stable := newTestServer(t, testutil.Flat(time.Millisecond))
	job := yieldJob(canary, stable, y)
	var loweredAtCheck atomic.Bool
	loweredAtCheck.Store(true)
	job.After = func(context.Context, []warmup.Target, func(string)) (string, error) {
		loweredAtCheck.Store(y.lowered.Load())
		return "checked", nil
	}
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, job)
	st := waitFinal(t, s, key, time.Minute)
	if st.Phase != PhaseConverged || strings.Contains(st.Message, "judged at full CPU weight") {
		t.Fatalf("want converged while yielding, in one run: %s %s", st.Phase, st.Message)
	}
	if loweredAtCheck.Load() {
		t.Error("the check after the warm-up ran while the pod still yielded its CPU")
	}
	if !strings.Contains(st.Message, "restored on 1 pod(s)") || y.restores.Load() != 1 {
		t.Errorf("restored %d times; message %s", y.restores.Load(), st.Message)
	}
}

// A version slower at full weight too is rejected after the judgement at
// full weight, and its request is put back all the same.
func TestYieldSlowerVersionStillRejected(t *testing.T) {
	y := &fakeYield{}
	canary := newTestServer(t, testutil.Flat(20*time.Millisecond))
	stable := newTestServer(t, testutil.Flat(time.Millisecond))
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, yieldJob(canary, stable, y))
	st := waitFinal(t, s, key, time.Minute)
	if st.Phase != PhaseFailed || !strings.Contains(st.Message, "judged at full CPU weight after") {
		t.Fatalf("want the slower version rejected after a judgement at full weight: %s %s", st.Phase, st.Message)
	}
	if y.restores.Load() != 1 || y.lowered.Load() {
		t.Errorf("restored %d times, still lowered %v", y.restores.Load(), y.lowered.Load())
	}
}

// A yielded pod carries its template's CPU request, but the step budgets
// none by default: the kernel's weight protects the users, and the budget
// would count a request's waiting as busy cores. In the lab a version with
// 5 % of its requests taking 1 s was paced at ~3 qps per pod and missed its
// deadline instead of being rejected. Here one request in 20 waits 100 ms,
// the request is 10m: by default the version is rejected as slower than
// stable; with a budget the tenant sets (a share of that request: 5m, < 1
// request/s at this latency) it is paced too slowly for a verdict.
func TestYieldedPodHasNoCPUBudgetByDefault(t *testing.T) {
	for _, c := range []struct {
		raw          string
		wantRejected bool
	}{
		{raw: ``, wantRejected: true},
		{raw: `{"cpuBudget": "50%"}`},
	} {
		parsed, err := ParseStepConfig([]byte(c.raw), *fastPolicy)
		if err != nil {
			t.Fatal(err)
		}
		y := &fakeYield{cpuRequest: 0.01}
		canary := newTestServer(t, func(n int64, _ bool) time.Duration {
			if n%20 == 0 {
				return 100 * time.Millisecond
			}
			return time.Millisecond
		})
		stable := newTestServer(t, testutil.Flat(time.Millisecond))
		job := yieldJob(canary, stable, y)
		job.Config.CPUBudget = parsed.CPUBudget
		s := newTestSupervisor()
		key := RunKey{Owner: "shop/cart", Revision: "h1"}
		s.Start(key, nil, job)
		st := waitFinal(t, s, key, time.Minute)
		rejected := strings.Contains(st.Message, "a slower version, rejected")
		if st.Phase != PhaseFailed || rejected != c.wantRejected {
			t.Errorf("config %q: want failed, rejected as a slower version %v: %s %s", c.raw, c.wantRejected, st.Phase, st.Message)
		}
		if !c.wantRejected && !strings.Contains(st.Message, "deadline") {
			t.Errorf("config %q: want the budget to pace it past its deadline: %s", c.raw, st.Message)
		}
	}
}
