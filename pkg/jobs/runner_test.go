package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// block is a job function that runs until its context ends and records
// the cause.
func block(causes chan<- error) func(ctx context.Context, j *Job[string]) {
	return func(ctx context.Context, _ *Job[string]) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
	}
}

func TestRunnerStartGetAndResult(t *testing.T) {
	r := NewRunner[*Progress[int]](time.Hour)
	release := make(chan struct{})
	j := r.Start("a/1", time.Time{}, NewProgress[int]("starting"), func(_ context.Context, j *Job[*Progress[int]]) {
		j.Value.Report("half way")
		<-release
		j.Value.SetResult(42)
	})
	got, ok := r.Get("a/1")
	if !ok || got != j {
		t.Fatalf("Get = %v, %v; want the started job", got, ok)
	}
	if _, done := Result(j); done {
		t.Fatal("a running job has a result")
	}
	close(release)
	<-j.Done()
	if v, done := Result(j); !done || v != 42 || j.Value.Message() != "half way" {
		t.Fatalf("Result = %d, %v, message %q; want 42 after the job", v, done, j.Value.Message())
	}
	if _, ok := j.Ended(); !ok {
		t.Error("a finished job has no end time")
	}
	// Still there to be collected until forgotten.
	if _, ok := r.Get("a/1"); !ok {
		t.Fatal("finished job gone before Keep")
	}
	r.Forget("a/1", j)
	if _, ok := r.Get("a/1"); ok {
		t.Fatal("forgotten job still there")
	}
}

// A second Start of a key replaces the first and stops it; Forget of the
// replaced job leaves the new one.
func TestRunnerDedupesByKey(t *testing.T) {
	r := NewRunner[string](time.Hour)
	causes := make(chan error, 2)
	first := r.Start("a/1", time.Time{}, "first", block(causes))
	second := r.Start("a/1", time.Time{}, "second", block(causes))
	<-first.Done()
	if err := <-causes; !errors.Is(err, context.Canceled) {
		t.Errorf("replaced job's cause %v; want cancelled", err)
	}
	r.Forget("a/1", first)
	if j, ok := r.Get("a/1"); !ok || j != second || j.Value != "second" {
		t.Fatalf("Get = %v, %v; want the second job", j, ok)
	}
	if jobs := r.Jobs(); len(jobs) != 1 {
		t.Fatalf("%d jobs; want 1", len(jobs))
	}
	if second.Finished() {
		t.Fatal("the replacing job stopped")
	}
	r.Stop("a/", time.Minute)
}

// Stop stops every job under a prefix, waits for them and counts the
// running ones; jobs of other prefixes go on. Cancel does the same
// without waiting. StopWith's cause reaches the job.
func TestRunnerStop(t *testing.T) {
	r := NewRunner[string](time.Hour)
	causes := make(chan error, 4)
	a1 := r.Start("shop/a/1", time.Time{}, "", block(causes))
	a2 := r.Start("shop/a/2", time.Time{}, "", block(causes))
	done := r.Start("shop/a/3", time.Time{}, "", func(context.Context, *Job[string]) {})
	<-done.Done()
	other := r.Start("shop/ab/1", time.Time{}, "", block(causes))
	if n := r.Stop("shop/a/", time.Minute); n != 2 {
		t.Errorf("Stop = %d; want the 2 running jobs", n)
	}
	if !a1.Finished() || !a2.Finished() {
		t.Error("Stop returned before its jobs ended")
	}
	for _, key := range []string{"shop/a/1", "shop/a/2", "shop/a/3"} {
		if _, ok := r.Get(key); ok {
			t.Errorf("%s still there after Stop", key)
		}
	}
	if other.Finished() {
		t.Fatal("a job of another prefix stopped")
	}
	gone := errors.New("owner gone")
	other.StopWith(gone)
	<-other.Done()
	if err := <-causes; err == nil {
		t.Fatal("no cause")
	}
	<-causes
	if err := <-causes; !errors.Is(err, gone) {
		t.Errorf("cause %v; want StopWith's", err)
	}
	c := r.Start("x/1", time.Time{}, "", block(causes))
	if n := r.Cancel("x/"); n != 1 {
		t.Errorf("Cancel = %d; want 1", n)
	}
	<-c.Done()
}

// A finished job is forgotten once it ended more than Keep ago (by the
// Runner's clock); a running one never is.
func TestRunnerExpiry(t *testing.T) {
	r := NewRunner[string](time.Hour)
	fake := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	r.Clock = fake
	causes := make(chan error, 1)
	finished := r.Start("a/1", time.Time{}, "", func(context.Context, *Job[string]) {})
	running := r.Start("b/1", time.Time{}, "", block(causes))
	<-finished.Done()
	if ended, _ := finished.Ended(); !ended.Equal(fake.Now()) {
		t.Fatalf("ended at %v, want the Runner's clock (%v)", ended, fake.Now())
	}
	fake.SetTime(fake.Now().Add(time.Hour))
	if _, ok := r.Get("a/1"); !ok {
		t.Fatal("forgotten at exactly Keep")
	}
	fake.SetTime(fake.Now().Add(time.Second))
	if _, ok := r.Get("a/1"); ok {
		t.Fatal("finished job kept past Keep")
	}
	if _, ok := r.Get("b/1"); !ok {
		t.Fatal("running job expired")
	}
	running.Cancel()
	<-running.Done()
}

// A deadline ends the job's context.
func TestRunnerDeadline(t *testing.T) {
	r := NewRunner[string](time.Hour)
	causes := make(chan error, 1)
	j := r.Start("a/1", time.Now().Add(-time.Second), "", block(causes))
	<-j.Done()
	if err := <-causes; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cause %v; want the deadline", err)
	}
}

// A watch runs beside the job with its context: its stop reaches the job
// as the cause, and it ends with the job.
func TestRunnerWatch(t *testing.T) {
	r := NewRunner[string](time.Hour)
	gone := errors.New("owner gone")
	watchEnded := make(chan struct{})
	causes := make(chan error, 1)
	j := r.StartWatched("a/1", time.Time{}, "", func(ctx context.Context, stop func(error)) {
		defer close(watchEnded)
		stop(gone)
		<-ctx.Done()
	}, block(causes))
	<-j.Done()
	if err := <-causes; !errors.Is(err, gone) {
		t.Errorf("cause %v; want the watch's", err)
	}
	<-watchEnded
}
