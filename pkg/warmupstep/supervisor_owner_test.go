package warmupstep

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/warmup"
)

// A run whose owner check reports the owner gone stops (Stopped, the
// reason in its message) and its load with it; a check that passes leaves
// it alone.
func TestSupervisorStopsWhenTheOwnerIsGone(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.MinRequests, cfg.MaxRequests, cfg.QPS = 1_000_000, 1_000_000, 100
	var gone atomic.Bool
	var checks atomic.Int64
	job := urlJob(cfg, srv)
	job.OwnerEvery = 20 * time.Millisecond
	job.Owner = func(context.Context) error {
		checks.Add(1)
		if gone.Load() {
			return fmt.Errorf("%w: Rollout shop/cart was deleted", warmup.ErrOwnerGone)
		}
		return nil
	}
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, job)
	testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 20 && checks.Load() > 3 })
	if st, _ := s.Status(key); st.Phase.Final() {
		t.Fatalf("owner checks that pass ended the run: %s %s", st.Phase, st.Message)
	}
	gone.Store(true)
	st := waitFinal(t, s, key, 10*time.Second)
	if st.Phase != PhaseStopped || !strings.Contains(st.Message, "Rollout shop/cart was deleted") {
		t.Fatalf("run ended %s %q; want Stopped with the reason", st.Phase, st.Message)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		before := srv.All()
		time.Sleep(200 * time.Millisecond)
		return srv.All() == before
	})
}

// Job.Guard gets the targets found and becomes the run's Config.Guard; a
// guard that cannot be set up fails the run before any load.
func TestSupervisorJobGuard(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	job := urlJob(cfg, srv)
	var got []warmup.Target
	job.Guard = func(_ context.Context, canary, _ []warmup.Target) (func(netip.Addr) error, error) {
		got = canary
		return nil, errors.New("list pods: forbidden")
	}
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, job)
	st := waitFinal(t, s, key, 10*time.Second)
	if st.Phase != PhaseFailed || !strings.Contains(st.Message, "pod guard: list pods: forbidden") {
		t.Fatalf("run ended %s %q; want Failed naming the guard's error", st.Phase, st.Message)
	}
	if len(got) != 1 || got[0].URL != srv.URL {
		t.Errorf("guard got targets %+v; want the server", got)
	}
	if srv.Load() != 0 {
		t.Errorf("%d requests before the guard was set up", srv.Load())
	}
}

// A check after the warm-up (the capacity check) gets the run's guard
// through RunGuard: its own load dials through the pod guard too.
func TestSupervisorAfterGetsTheRunGuard(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	job := urlJob(fastConfig(), srv)
	refused := errors.New("not the rollout's pod any more")
	job.Guard = func(context.Context, []warmup.Target, []warmup.Target) (func(netip.Addr) error, error) {
		return func(ip netip.Addr) error {
			if ip == netip.MustParseAddr("10.0.0.9") {
				return refused
			}
			return nil
		}, nil
	}
	var seen error
	job.After = func(ctx context.Context, _ []warmup.Target, _ func(string)) (string, error) {
		g := RunGuard(ctx)
		if g == nil {
			return "", errors.New("no run guard")
		}
		seen = g(netip.MustParseAddr("10.0.0.9"))
		return "checked", nil
	}
	s := newTestSupervisor()
	key := RunKey{Owner: "shop/cart", Revision: "h1"}
	s.Start(key, nil, job)
	st := waitFinal(t, s, key, 30*time.Second)
	if st.Phase != PhaseConverged {
		t.Fatalf("run ended %s %q; want Converged", st.Phase, st.Message)
	}
	if !errors.Is(seen, refused) {
		t.Errorf("RunGuard(10.0.0.9) in After = %v; want the job's guard refusing it", seen)
	}
	if RunGuard(context.Background()) != nil {
		t.Error("RunGuard outside a run: want nil")
	}
}
