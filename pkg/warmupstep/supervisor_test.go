package warmupstep

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/warmup"
)

func newTestSupervisor() *Supervisor {
	return NewSupervisor(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// urlJob warms the test server as a Job.
func urlJob(cfg warmup.Config, srv *testutil.ColdServer) Job {
	return Job{Config: cfg, FindTargets: func(ctx context.Context) ([]warmup.Target, []warmup.Target, error) {
		return warmup.FindTargets(ctx, warmup.TargetQuery{Canary: warmup.TargetSource{URLs: []string{srv.URL}, URLsField: "urls"}})
	}}
}

// waitFinal polls Status until the run's phase is final.
func waitFinal(t *testing.T, s *Supervisor, key RunKey, timeout time.Duration) Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, ok := s.Status(key)
		if !ok {
			t.Fatalf("run %s not in memory", key)
		}
		if st.Phase.Final() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not final after %s: %s %s", key, timeout, st.Phase, st.Message)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSupervisorStartIsIdempotent(t *testing.T) {
	srv := newTestServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 40))
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1", Step: 0}
	first := s.Start(key, nil, urlJob(fastConfig(), srv))
	if first.RunID != "shop/cart/h1/0" || first.Phase.Final() || first.StartedAt.IsZero() {
		t.Fatalf("first status %+v", first)
	}
	again := s.Start(key, &first, urlJob(fastConfig(), srv))
	if again.StartedAt != first.StartedAt || again.Restarts != 0 {
		t.Errorf("second Start began another run: %+v", again)
	}
	final := waitFinal(t, s, key, 30*time.Second)
	if final.Phase != PhaseConverged || final.Converged != 1 || final.Requests == 0 || final.Windows < 3 || final.FirstP99 == "" || len(final.Pods) != 1 {
		t.Errorf("final status %+v", final)
	}
	if len(final.Trend) == 0 || len(final.Trend) > trendLength {
		t.Errorf("p99 trend %v, want 1..%d windows", final.Trend, trendLength)
	}
	if keys := s.Keys(); len(keys) != 1 {
		t.Errorf("runs in memory %v, want one", keys)
	}
	// The caller still holds the run's status: reported, no new load.
	before := srv.Load()
	if st := s.Start(key, &final, urlJob(fastConfig(), srv)); st.Phase != PhaseConverged || srv.Load() != before {
		t.Errorf("Start after the end: %s, %d new requests", st.Phase, srv.Load()-before)
	}
}

func TestSupervisorResumesAfterRestart(t *testing.T) {
	srv := newTestServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 40))
	key := RunKey{Owner: "shop/cart", Revision: "h1", Step: 2}
	cfg := fastConfig()
	cfg.Deadline = 60e9

	// The process that ran the warm-up is gone: a fresh Supervisor gets
	// only the status the caller kept.
	running := Status{RunID: key.String(), StartedAt: time.Now().Add(-time.Second).UTC(), Phase: PhaseLoad}
	s := newTestSupervisor()
	st := s.Start(key, &running, urlJob(cfg, srv))
	if st.Restarts != 1 || !st.StartedAt.Equal(running.StartedAt) || st.Phase.Final() {
		t.Fatalf("resumed status %+v, want restarts 1 and the original start", st)
	}
	if final := waitFinal(t, s, key, 30*time.Second); final.Phase != PhaseConverged || final.Restarts != 1 {
		t.Errorf("resumed run: %s %s (restarts %d)", final.Phase, final.Message, final.Restarts)
	}

	// A final status is reported as it is, without load.
	before := srv.Load()
	done := Status{RunID: key.String(), StartedAt: running.StartedAt, Phase: PhaseFailed, Message: "earlier failure"}
	if st := newTestSupervisor().Start(key, &done, urlJob(cfg, srv)); st.Phase != PhaseFailed || st.Message != "earlier failure" || srv.Load() != before {
		t.Errorf("final status: %+v, %d new requests", st, srv.Load()-before)
	}
	// Restarted too often, or past the deadline: failed, not wedged.
	tooMany := running
	tooMany.Restarts = MaxRestarts
	if st := newTestSupervisor().Start(key, &tooMany, urlJob(cfg, srv)); st.Phase != PhaseFailed || !strings.Contains(st.Message, "restarted") {
		t.Errorf("too many restarts: %s %s", st.Phase, st.Message)
	}
	late := running
	late.StartedAt = time.Now().Add(-2 * time.Minute)
	if st := newTestSupervisor().Start(key, &late, urlJob(cfg, srv)); st.Phase != PhaseFailed || !strings.Contains(st.Message, "deadline 1m0s passed") {
		t.Errorf("past deadline: %s %s", st.Phase, st.Message)
	}
	// Another run's status is no reason to resume.
	other := running
	other.RunID = "shop/cart/h0/2"
	fresh := newTestSupervisor()
	if st := fresh.Start(key, &other, urlJob(cfg, srv)); st.Restarts != 0 || !st.StartedAt.After(running.StartedAt) {
		t.Errorf("another run's status changed this run: %+v", st)
	}
	fresh.Stop(key.Owner)
}

func TestSupervisorStopWaitsForLoadToStop(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(2*time.Millisecond))
	cfg := fastConfig()
	cfg.MinRequests, cfg.MaxRequests, cfg.QPS = 1_000_000, 1_000_000, 200
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, urlJob(cfg, srv))
	testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 50 })
	start := time.Now()
	if n := s.Stop("shop/other"); n != 0 {
		t.Errorf("Stop of another owner stopped %d runs", n)
	}
	if n := s.Stop("shop/cart"); n != 1 {
		t.Errorf("Stop = %d, want 1 running warm-up stopped", n)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Stop took %s, want the load stopped within a second", took)
	}
	after := srv.Load()
	time.Sleep(300 * time.Millisecond)
	if late := srv.Load() - after; late != 0 {
		t.Errorf("server got %d requests after Stop returned", late)
	}
	if _, ok := s.Status(key); ok {
		t.Error("a stopped run is still in memory")
	}
}

func TestSupervisorNewRevisionReplacesRun(t *testing.T) {
	old, next := newTestServer(t, testutil.Flat(2*time.Millisecond)), newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.MinRequests, cfg.MaxRequests, cfg.QPS = 1_000_000, 1_000_000, 200
	s := newTestSupervisor()
	s.Start(RunKey{Owner: "shop/cart", Revision: "h1"}, nil, urlJob(cfg, old))
	s.Start(RunKey{Owner: "shop/web", Revision: "h1"}, nil, urlJob(cfg, next))
	testutil.WaitFor(t, 10*time.Second, func() bool { return old.Load() > 20 })
	s.Start(RunKey{Owner: "shop/cart", Revision: "h2"}, nil, urlJob(cfg, next))
	if keys := s.Keys(); len(keys) != 2 || keys[0].Revision != "h2" || keys[1].Owner != "shop/web" {
		t.Errorf("runs %v, want shop/cart/h2 and shop/web/h1", keys)
	}
	// The old revision's load stops within hardStopGrace.
	time.Sleep(hardStopGrace + 200*time.Millisecond)
	after := old.Load()
	time.Sleep(300 * time.Millisecond)
	if late := old.Load() - after; late != 0 {
		t.Errorf("the replaced run sent %d more requests", late)
	}
	s.Stop("shop/cart")
	s.Stop("shop/web")
}

func TestSupervisorForgetsFinishedRuns(t *testing.T) {
	srv := newTestServer(t, nil)
	s := newTestSupervisor()
	fake := clocktesting.NewFakePassiveClock(time.Now())
	s.runs.Clock = fake
	failing := Job{Config: fastConfig(), FindTargets: func(context.Context) ([]warmup.Target, []warmup.Target, error) {
		return nil, nil, context.DeadlineExceeded
	}}
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, failing)
	if st := waitFinal(t, s, key, 5*time.Second); st.Phase != PhaseFailed {
		t.Fatalf("failing job: %+v", st)
	}
	// A caller that lost the status retries: the run starts again.
	if st := s.Start(key, nil, urlJob(fastConfig(), srv)); st.Phase.Final() {
		t.Errorf("retry of a finished run: %+v", st)
	}
	waitFinal(t, s, key, 30*time.Second)
	// Past FinishedTTL a finished run is forgotten at the next Start.
	fake.SetTime(fake.Now().Add(FinishedTTL + time.Minute))
	s.Start(RunKey{Owner: "shop/web", Revision: "h1"}, nil, failing)
	if _, ok := s.Status(key); ok {
		t.Error("finished run still in memory after FinishedTTL")
	}
}
