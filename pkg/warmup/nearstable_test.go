package warmup

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/config"
)

// slowTail answers in 2 ms, but every tenth request takes base + extra ×
// e^(−n/tau) more: a tail that keeps improving slowly while the typical
// request is long warm (#14: a good version failed at its deadline so).
func slowTail(base, extra time.Duration, tau float64) func(int64, bool) time.Duration {
	return func(n int64, _ bool) time.Duration {
		if n%10 != 0 {
			return 2 * time.Millisecond
		}
		return base + time.Duration(float64(extra)*math.Exp(-float64(n)/tau))
	}
}

// nearStableConfig: a stopping rule strict enough to see a slow tail as
// still improving, a deadline that ends the warm-up before it stops, and
// stable loaded fast enough to have windows by then.
func nearStableConfig() Config {
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS, cfg.Connections = 300, 300, 2
	cfg.Tolerance, cfg.AbsoluteTolerance = 0.05, config.Duration(time.Millisecond)
	cfg.Deadline = config.Duration(4 * time.Second)
	cfg.StableQPS = 100
	off := false
	cfg.NeighbourGuard = &off
	return cfg
}

// A canary whose tail still improves at the deadline, but sits near
// stable's, is warm; one whose tail is far above stable's fails as before.
func TestDeadlineAcceptsACanaryNearStable(t *testing.T) {
	if testing.Short() {
		t.Skip("~10 s of load (skipped with -short)")
	}
	// The near canary's tail falls ~8 ms between the rule's two blocks at
	// the deadline (33 → 25 ms at 1,000 requests, 30 → 23 ms at 1,200):
	// far more than the tolerance, and more than a loaded CI machine's
	// sleep overshoot moves a block's median p99 (with a 1 ms fall it
	// once converged there). It ends near 23 ms, under 2 × stable's 15.
	stable := newTestServer(t, slowTail(15*time.Millisecond, 0, 1))
	near := newTestServer(t, slowTail(16*time.Millisecond, 24*time.Millisecond, 800))
	res, err := Run(context.Background(), nearStableConfig(), []Target{target(near)}, Options{Stable: []Target{target(stable)}})
	if err != nil {
		t.Fatalf("near stable at the deadline: %v\n%s", err, table(res))
	}
	tr := res.Targets[0]
	if !res.Converged || !tr.Converged || !tr.NearStable || !strings.Contains(res.Reason, "accepted near stable") || !strings.Contains(res.Reason, "still p99") {
		t.Fatalf("want accepted near stable while its p99 still improved: converged %v, nearStable %v, reason %q\n%s", tr.Converged, tr.NearStable, res.Reason, table(res))
	}
	t.Logf("accepted: %s", res.Reason)

	far := newTestServer(t, slowTail(60*time.Millisecond, 40*time.Millisecond, 2500))
	res, err = Run(context.Background(), nearStableConfig(), []Target{target(far)}, Options{Stable: []Target{target(stable)}})
	if !errors.Is(err, ErrNotConverged) || res.Targets[0].NearStable {
		t.Fatalf("a tail 4× stable's at the deadline: err %v; want ErrNotConverged\n%s", err, table(res))
	}

	off := false
	cfg := nearStableConfig()
	cfg.AcceptNearStable = &off
	fresh := newTestServer(t, slowTail(16*time.Millisecond, 24*time.Millisecond, 800)) // a cold one again
	if _, err := Run(context.Background(), cfg, []Target{target(fresh)}, Options{Stable: []Target{target(stable)}}); !errors.Is(err, ErrNotConverged) {
		t.Fatalf("acceptNearStable false: err %v; want ErrNotConverged at the deadline", err)
	}
}
