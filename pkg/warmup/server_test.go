package warmup

import (
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// newTestServer is a cold-starting pod stand-in on 127.0.0.1 with the
// health path /healthz.
func newTestServer(t testing.TB, delay func(n int64, firstOnConn bool) time.Duration) *testutil.ColdServer {
	t.Helper()
	s := testutil.NewColdServer(t, delay)
	s.HealthPath = "/healthz"
	return s
}

func target(s *testutil.ColdServer) Target {
	return Target{Name: "test", URL: s.URL}
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
// skipLongLoad skips, under -short, a test that drives whole warm-ups of
// real load for seconds. The fast loop keeps what decides (the rule's pure
// tests in package rule, the seeded zoo subset), one real warm-up end to
// end (TestConvergesOnDecayingLatency) and the quick runs; make test runs
// every one.
func skipLongLoad(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("seconds of real load (%s); make test runs it (skipped with -short)", what)
	}
}

func fastConfig() Config {
	return Config{
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
		MaxRequests:   2000,
		// Generous: the test machine has 2 shared cores, and scheduler
		// hiccups of tens of ms land in window maxima (p99 of 20 = max).
		Tolerance:         0.5,
		AbsoluteTolerance: config.Duration(3 * time.Millisecond),
		Seed:              1,
	}
}
