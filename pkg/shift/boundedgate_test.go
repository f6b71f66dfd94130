package shift

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowGate answers each check once release is closed (at once if it is
// nil), counting the checks it started and seeing whether a check's
// context ended before it answered.
type slowGate struct {
	release   chan struct{}
	started   atomic.Int32
	cancelled atomic.Int32
}

func (g *slowGate) Check(ctx context.Context, since time.Time) (bool, string, error) {
	g.started.Add(1)
	if g.release != nil {
		select {
		case <-g.release:
		case <-ctx.Done():
			g.cancelled.Add(1)
			return false, "", ctx.Err()
		}
	}
	return true, "p99 holds", nil
}

func TestBoundedGateAnswersPendingThenTheVerdict(t *testing.T) {
	slow := &slowGate{release: make(chan struct{})}
	g := newBoundedGate(slow, 20*time.Millisecond, time.Now)
	since := time.Unix(1000, 0)

	// The caller's own context ends as soon as it has its answer, as a
	// Router call's does: the check must go on regardless.
	ctx, cancel := context.WithCancel(context.Background())
	pass, _, err := g.Check(ctx, since)
	cancel()
	if !errors.Is(err, ErrGatePending) || pass {
		t.Fatalf("first check of a slow gate = (%v, %v), want ErrGatePending", pass, err)
	}
	if _, _, err := g.Check(context.Background(), since); !errors.Is(err, ErrGatePending) {
		t.Fatalf("second check while the first runs = %v, want ErrGatePending", err)
	}
	if n := slow.started.Load(); n != 1 {
		t.Fatalf("%d checks started for one window, want 1 (a pending check is waited for, not repeated)", n)
	}
	close(slow.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		pass, reason, err := g.Check(context.Background(), since)
		if err == nil {
			if !pass || reason != "p99 holds" {
				t.Fatalf("verdict = (%v, %q), want the gate's pass", pass, reason)
			}
			break
		}
		if !errors.Is(err, ErrGatePending) || time.Now().After(deadline) {
			t.Fatalf("after release: %v", err)
		}
	}
	if n := slow.cancelled.Load(); n != 0 {
		t.Fatalf("the background check was cancelled %d times with its caller", n)
	}
	if n := slow.started.Load(); n != 1 {
		t.Fatalf("%d checks started, want the one whose verdict was taken", n)
	}
	// Taken: the next call checks afresh.
	if _, _, err := g.Check(context.Background(), since); err != nil {
		t.Fatal(err)
	}
	if n := slow.started.Load(); n != 2 {
		t.Fatalf("%d checks started, want a fresh one after the verdict was taken", n)
	}
}

func TestBoundedGateDropsAStaleVerdict(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(5000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	slow := &slowGate{release: make(chan struct{})}
	g := newBoundedGate(slow, 10*time.Millisecond, clock)
	since := time.Unix(1000, 0)
	if _, _, err := g.Check(context.Background(), since); !errors.Is(err, ErrGatePending) {
		t.Fatalf("first check = %v, want ErrGatePending", err)
	}
	close(slow.release)
	// Let the check finish, then age its verdict past verdictKeptFor.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		c := g.pending
		g.mu.Unlock()
		select {
		case <-c.done:
		default:
			if time.Now().After(deadline) {
				t.Fatal("the released check never finished")
			}
			time.Sleep(time.Millisecond)
			continue
		}
		break
	}
	mu.Lock()
	now = now.Add(verdictKeptFor + time.Second)
	mu.Unlock()
	if _, _, err := g.Check(context.Background(), since); err != nil {
		t.Fatal(err)
	}
	if n := slow.started.Load(); n != 2 {
		t.Fatalf("%d checks started, want a fresh one instead of the stale verdict", n)
	}
}

func TestBoundedGateNewWindowStartsANewCheck(t *testing.T) {
	slow := &slowGate{release: make(chan struct{})}
	g := newBoundedGate(slow, 10*time.Millisecond, time.Now)
	_, _, _ = g.Check(context.Background(), time.Unix(1000, 0))
	_, _, _ = g.Check(context.Background(), time.Unix(2000, 0))
	if n := slow.started.Load(); n != 2 {
		t.Fatalf("%d checks started, want one per window", n)
	}
	close(slow.release)
}
