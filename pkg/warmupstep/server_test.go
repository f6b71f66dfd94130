package warmupstep

import (
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// The supervisor tests' stand-ins, as pkg/warmup's tests have them.

// newTestServer is a cold-starting pod stand-in on 127.0.0.1 with the
// health path /healthz.
func newTestServer(t testing.TB, delay func(n int64, firstOnConn bool) time.Duration) *testutil.ColdServer {
	t.Helper()
	s := testutil.NewColdServer(t, delay)
	s.HealthPath = "/healthz"
	return s
}

// fastPolicy is the command line's policy with higher caps: fast tests
// send 1000 qps to a local server, and some run "until stopped" with a
// request cap nobody reaches.
var fastPolicy = func() *policy.Policy {
	p := policy.Local()
	p.Limits.QPS, p.Limits.Requests = 2000, 10_000_000
	return &p
}()

// fastConfig is a small, quick warm-up config for tests.
func fastConfig() warmup.Config {
	return warmup.Config{
		Policy:        fastPolicy,
		HealthPath:    "/healthz",
		HealthTimeout: config.Duration(5 * time.Second),
		QPS:           1000,
		Connections:   2,
		Timeout:       config.Duration(5 * time.Second),
		Deadline:      config.Duration(30 * time.Second),
		Window:        20,
		StableWindows: 3,
		MinRequests:   60,
		// Room for a restart or two of the plateau: a decaying pod
		// converges at ~1,250 requests, and a scheduler hiccup in an
		// earlier block (a look that finds it still improving) restarts
		// that, up to ~1,940 on the 2 shared cores (pkg/warmup's
		// TestConvergesOnDecayingLatency); 2,000 once failed a run so.
		MaxRequests: 4000,
		// Generous: the test machine has 2 shared cores, and scheduler
		// hiccups of tens of ms land in window maxima (p99 of 20 = max).
		Tolerance:         0.5,
		AbsoluteTolerance: config.Duration(3 * time.Millisecond),
		Seed:              1,
	}
}

// hardStopGrace is pkg/warmup's bound on requests in flight after a hard
// stop (coordinator.go): a replaced run's load ends within it.
const hardStopGrace = 500 * time.Millisecond
