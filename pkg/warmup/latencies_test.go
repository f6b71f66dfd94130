package warmup

import (
	"context"
	"testing"
	"time"
)

// A warm-up run keeps no request's latency unless asked to: its windows
// carry summaries only, and Latencies is empty; with KeepLatencies it has
// every request's.
func TestRunKeepsNoLatencies(t *testing.T) {
	if testing.Short() {
		t.Skip("two short runs of load (skipped with -short)")
	}
	srv := newTestServer(t, func(int64, bool) time.Duration { return time.Millisecond })
	cfg := fastConfig()
	for _, keep := range []bool{false, true} {
		res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{KeepLatencies: keep})
		if err != nil {
			t.Fatalf("keep %v: %v", keep, err)
		}
		tr := res.Targets[0]
		got := len(tr.Latencies())
		if want := map[bool]int{false: 0, true: int(tr.Requests)}[keep]; got != want {
			t.Errorf("KeepLatencies %v: %d latencies kept after %d requests, want %d", keep, got, tr.Requests, want)
		}
	}
}
