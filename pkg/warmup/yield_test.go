package warmup

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
)

// The judgement at full weight carries on the run (Options.Yield): the
// windows sent while yielding count, so a warm-up that needs more requests
// than are left after the yield still ends warm. Two runs (yield, then
// judge afresh) could not: minRequests 1,100 after the yield took 1,000 of
// maxRequests 2,000.
func TestYieldKeepsTheWindows(t *testing.T) {
	cfg := fastConfig()
	cfg.MinRequests, cfg.MaxRequests = 1100, 2000
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	var restores atomic.Int32
	res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{Yield: &Yield{Restore: func() { restores.Add(1) }}})
	if err != nil || !res.Converged {
		t.Fatalf("err = %v, want warm in the same run\n%s", err, table(res))
	}
	if restores.Load() != 1 || !strings.Contains(res.Yield.Ended, "of maxRequests 2000 sent") || res.Yield.After < 1000 {
		t.Fatalf("restored %d times, yield %+v; want one restore at half of maxRequests", restores.Load(), res.Yield)
	}
	tr := res.Targets[0]
	for i, w := range tr.Windows {
		if w.Index != i+1 {
			t.Fatalf("window %d has index %d: the run started again", i+1, w.Index)
		}
	}
	if tr.ConvergedAfter <= res.Yield.After || tr.ConvergedAfter >= cfg.MaxRequests {
		t.Errorf("converged after %d requests; want after the restore (%d) and before maxRequests", tr.ConvergedAfter, res.Yield.After)
	}
	if !strings.Contains(res.Yield.String(), "judged at full CPU weight after") {
		t.Errorf("Yield.String() = %q", res.Yield.String())
	}
}

// A pod warm while it yields is warm: Run gives nothing back (the caller
// does), and says nothing about a judgement at full weight. The yield
// ends at half of maxRequests, here after 2,000 requests: room for the
// plateau the rule asks of a pod that got faster — on a loaded machine its
// first windows' p99s (scheduler hiccups at its start) are several times
// its later ones, and with maxRequests 2,000 it failed in 1 run in 5 under
// two busy loops.
func TestYieldWarmWhileYielding(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.MaxRequests = 4000
	var restores atomic.Int32
	res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{Yield: &Yield{Restore: func() { restores.Add(1) }}})
	if err != nil || !res.Converged || restores.Load() != 0 || res.Yield.String() != "" {
		t.Fatalf("err = %v, restores %d, yield %+v; want warm while yielding, nothing restored by Run\n%s", err, restores.Load(), res.Yield, table(res))
	}
}

// A verdict against a yielding pod waits for its CPU: slower than stable
// only while it yields, it is warm after the restore (which ran once, at
// the rejection), in the same run; slower at full weight too, it is
// rejected after it.
func TestYieldDefersRejection(t *testing.T) {
	skipLongLoad(t, "a yielded warm-up, then one at full weight")
	for _, tc := range []struct {
		name        string
		slowAtFull  bool
		wantWarm    bool
		wantInError string
	}{{name: "slower only while yielding", wantWarm: true}, {name: "slower at full weight too", slowAtFull: true, wantInError: "slower than stable"}} {
		t.Run(tc.name, func(t *testing.T) {
			var lowered atomic.Bool
			lowered.Store(true)
			canary := newTestServer(t, func(n int64, _ bool) time.Duration {
				if (lowered.Load() || tc.slowAtFull) && n%20 == 0 { // 5 % of requests +100 ms
					return 101 * time.Millisecond
				}
				return time.Millisecond
			})
			stable := newTestServer(t, testutil.Flat(time.Millisecond))
			cfg := fastConfig()
			cfg.StableQPS, cfg.MaxRequests = 500, 10000
			var restores atomic.Int32
			res, err := Run(context.Background(), cfg, []Target{target(canary)}, Options{Stable: []Target{target(stable)},
				Yield: &Yield{Restore: func() { restores.Add(1); lowered.Store(false) }}})
			if restores.Load() != 1 || res.Yield == nil || !strings.Contains(res.Yield.Ended, "× stable's") {
				t.Fatalf("restored %d times, yield %+v; want one restore, at the rejection while yielding\n%s", restores.Load(), res.Yield, table(res))
			}
			if tc.wantWarm && (err != nil || !res.Converged) {
				t.Fatalf("err = %v; want warm at full weight\n%s", err, table(res))
			}
			if !tc.wantWarm && (err == nil || !strings.Contains(err.Error(), tc.wantInError) || res.Targets[0].Requests <= res.Yield.After) {
				t.Fatalf("err = %v after %d requests (restored at %d); want rejected at full weight\n%s", err, res.Targets[0].Requests, res.Yield.After, table(res))
			}
		})
	}
}

// A target starved while it yields (no window complete for Yield.Stall:
// the node's CPU all taken, the least weight gets next to none) gets its
// CPU back long before half the deadline, and warms at full weight.
func TestYieldEndsWhenStarved(t *testing.T) {
	skipLongLoad(t, "a yielded pod starved, then loaded at full weight")
	var lowered atomic.Bool
	lowered.Store(true)
	srv := newTestServer(t, func(int64, bool) time.Duration {
		if lowered.Load() {
			return 500 * time.Millisecond // 2 connections: 4 qps, a window of 20 in 5 s
		}
		return time.Millisecond
	})
	cfg := fastConfig()
	cfg.Deadline = config.Duration(time.Minute) // half: 30 s
	var restoredAt atomic.Int64
	start := time.Now()
	res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{Yield: &Yield{Stall: 2 * time.Second,
		Restore: func() { restoredAt.Store(int64(time.Since(start))); lowered.Store(false) }}})
	if err != nil || !res.Converged {
		t.Fatalf("err = %v; want warm at full weight\n%s", err, table(res))
	}
	if !strings.Contains(res.Yield.Ended, "starved: no window of 20 requests complete in") {
		t.Fatalf("yield %+v; want it ended as starved", res.Yield)
	}
	if at := time.Duration(restoredAt.Load()); at == 0 || at > 10*time.Second {
		t.Fatalf("restored after %s; want soon after the 2 s stall, far before half the deadline", at)
	}
}
