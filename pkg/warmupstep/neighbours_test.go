package warmupstep

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Moved from pkg/warmup's pace tests: the step's Status folds the guard's
// progress into its message, and Status lives here now.

func target(s *testutil.ColdServer) warmup.Target {
	return warmup.Target{Name: "test", URL: s.URL}
}

// The neighbour guard lowers the pace when stable's latency rises, says
// so in the progress, and lets the pace climb back once stable recovers.
func TestNeighbourGuardBacksOffAndRecovers(t *testing.T) {
	var slow atomic.Bool
	stable := newTestServer(t, func(int64, bool) time.Duration {
		if slow.Load() {
			return 25 * time.Millisecond
		}
		return time.Millisecond
	})
	canary := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS = 200, 25
	cfg.StableQPS = 100 // a look every 0.2 s
	// Well under the 25 ms of a slow stable, well over the noise of a busy
	// machine.
	cfg.NeighbourFloor = config.Duration(8 * time.Millisecond)
	cfg.MinRequests, cfg.MaxRequests = 1_000_000, 1_000_000
	cfg.Deadline = config.Duration(60 * time.Second)

	var mu sync.Mutex
	var last warmup.Progress
	var said []string
	st := &Status{}
	pods := map[string]*PodProgress{}
	progress := func(p warmup.Progress) {
		mu.Lock()
		defer mu.Unlock()
		st.fold(p, pods)
		if p.Neighbours != "" {
			said = append(said, p.Neighbours)
		}
		if !p.Stable && p.Target != "" {
			last = p
		}
	}
	snapshot := func() (warmup.Progress, []string, Status) {
		mu.Lock()
		defer mu.Unlock()
		return last, slices.Clone(said), *st
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res *warmup.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := warmup.Run(ctx, cfg, []warmup.Target{target(canary)}, warmup.Options{Stable: []warmup.Target{target(stable)}, OnProgress: progress})
		done <- outcome{res, err}
	}()

	waitFor := func(what string, cond func(p warmup.Progress, said []string) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			p, s, _ := snapshot()
			if cond(p, s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 20 s; last progress %+v, guard said %q", what, p, s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("full pace", func(p warmup.Progress, _ []string) bool { return p.Pace == 200 && p.PaceCap == 0 })
	before := len(func() []string { _, s, _ := snapshot(); return s }())
	slow.Store(true)
	waitFor("back-off", func(p warmup.Progress, s []string) bool {
		return p.PaceCap > 0 && p.PaceCap <= 50 && p.Pace <= p.PaceCap && len(s) > before
	})
	// Held down: while stable stays slow, the canary gets at most the cap.
	p, s, status := snapshot()
	if !regexp.MustCompile(`^stable p90 [0-9.]+ms above [0-9.]+ms \(its baseline .*\): warm-up pace halved to [0-9.]+ qps per pod \(back-off [0-9]+\)$`).MatchString(s[len(s)-1]) {
		t.Errorf("back-off message %q, want stable's p90 and the new pace", s[len(s)-1])
	}
	if status.Backoffs == 0 || !strings.Contains(status.Message, guardNote+"stable p90") {
		t.Errorf("status: %d back-offs, message %q; want the back-off in the step's message", status.Backoffs, status.Message)
	}
	n0, t0 := canary.Load(), time.Now()
	time.Sleep(time.Second)
	if rate := float64(canary.Load()-n0) / time.Since(t0).Seconds(); rate > 2*p.PaceCap+10 {
		t.Errorf("canary got %.0f qps under a cap of %g", rate, p.PaceCap)
	}
	slow.Store(false)
	waitFor("recovery", func(p warmup.Progress, s []string) bool {
		return p.PaceCap == 0 && p.Pace == 200 && strings.Contains(s[len(s)-1], "free to ramp up to 200 qps per pod again")
	})
	cancel()
	out := <-done
	if !errors.Is(out.err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", out.err)
	}
	if len(out.res.Backoffs) == 0 || out.res.Backoffs[0].StableP90 < 20*time.Millisecond || !strings.Contains(out.res.Summary(), "neighbour guard backed off") {
		t.Errorf("result back-offs %+v, summary %q", out.res.Backoffs, out.res.Summary())
	}
}
