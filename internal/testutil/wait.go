package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond every 10 ms until it holds, failing the test if it does
// not within timeout: tests wait for eventual states with a deadline.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
