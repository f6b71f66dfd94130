package load

import (
	"context"
	"sync"
	"testing"
	"time"

	"fortio.org/fortio/periodic"

	"github.com/danki-dev/danki/internal/testutil"
)

// latencies is an AccessLogger that keeps every reported latency.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) Start(ctx context.Context, _ periodic.ThreadID, _ int64, _ time.Time) context.Context {
	return ctx
}

func (l *latencies) Report(_ context.Context, _ periodic.ThreadID, _ int64, _ time.Time, latency float64, _ bool, _ string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, time.Duration(latency*float64(time.Second)))
}

func (l *latencies) Info() string { return "test latencies" }

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// A paced Runner follows its Pace as it changes, and records every request
// with its own latency, not the wait for its turn.
func TestPacedRunnerFollowsPaceChanges(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(2*time.Millisecond))
	rec := &latencies{}
	pace := NewPace(20)
	r, err := New(Options{URL: srv.URL, Pace: pace, Connections: 4, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan periodic.RunnerResults)
	go func() { done <- r.Run() }()

	// At 20 qps, 1 s can hold at most ~21 requests, however slow the machine.
	time.Sleep(time.Second)
	slow := srv.Load()
	if slow > 23 || slow < 2 {
		t.Errorf("%d requests in the first second at 20 qps", slow)
	}
	pace.Set(400)
	testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() >= slow+200 })
	pace.Set(10)
	time.Sleep(300 * time.Millisecond) // let the faster turns already given finish
	before := srv.Load()
	time.Sleep(time.Second)
	if n := srv.Load() - before; n > 13 {
		t.Errorf("%d requests in a second after slowing down to 10 qps", n)
	}
	r.Stop()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2 s of Stop")
	}
	if got, served := int64(rec.count()), srv.Load(); got != served {
		t.Errorf("recorded %d requests, server served %d", got, served)
	}
	// Latencies are the requests' own (2 ms on loopback), not the 50–100 ms
	// waits for a turn at 10–20 qps.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	slowOnes := 0
	for _, l := range rec.all {
		if l > 40*time.Millisecond {
			slowOnes++
		}
	}
	if slowOnes > len(rec.all)/10 {
		t.Errorf("%d of %d recorded latencies above 40 ms for a 2 ms server: the wait for the turn was counted", slowOnes, len(rec.all))
	}
}

// Stop ends connections waiting for a slow turn at once, and the requests
// never sent are not recorded.
func TestPacedRunnerStopsWhileWaiting(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	rec := &latencies{}
	r, err := New(Options{URL: srv.URL, Pace: NewPace(0.2), Connections: 3, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); r.Run() }()
	testutil.WaitFor(t, 5*time.Second, func() bool { return rec.count() == 1 })
	start := time.Now()
	r.Stop() // the next turn is 5 s away
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2 s of Stop while waiting for a turn 5 s away")
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Run returned %s after Stop", took)
	}
	if rec.count() != 1 || srv.Load() != 1 {
		t.Errorf("recorded %d requests, server served %d; want the one sent", rec.count(), srv.Load())
	}
}

func TestPaceIgnoresNonPositiveRates(t *testing.T) {
	p := NewPace(5)
	p.Set(0)
	p.Set(-1)
	if p.QPS() != 5 {
		t.Errorf("QPS %g after Set(0) and Set(-1), want 5", p.QPS())
	}
	if _, err := New(Options{URL: "http://127.0.0.1:1/", Pace: NewPace(0)}); err == nil {
		t.Error("a Pace of 0 was accepted")
	}
}
