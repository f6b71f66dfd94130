package jobs

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Runner runs background jobs keyed by string, each carrying a value V
// (the caller's state of the job: its status, its result). Keys are
// hierarchical by convention ("owner/…"), so Stop and Cancel act on a
// prefix. It is safe for concurrent use.
type Runner[V any] struct {
	// keep is how long a finished job stays to answer Get: the poll that
	// collects it may come late, or never (its owner was deleted).
	keep time.Duration
	// Clock tells when a job ended and judges expiry by it; tests set a
	// fake one before the first Start.
	Clock clock.PassiveClock

	mu   sync.Mutex
	jobs map[string]*Job[V]
}

// NewRunner returns a Runner that forgets a finished job keep after it
// ended.
func NewRunner[V any](keep time.Duration) *Runner[V] {
	return &Runner[V]{keep: keep, Clock: clock.RealClock{}, jobs: map[string]*Job[V]{}}
}

// Job is one job running (or finished) in the background.
type Job[V any] struct {
	// Key is the job's key in its Runner.
	Key string
	// Value is the caller's state of the job, set by Start.
	Value V

	stop    context.CancelCauseFunc
	release context.CancelFunc // the deadline's timer
	done    chan struct{}

	mu    sync.Mutex
	ended time.Time
}

// Start runs fn in the background as key's job and returns the job at
// once. Any earlier job of key is stopped (not waited for) and replaced.
// fn's context ends at deadline (none if zero), when the job is stopped,
// or with the cause given to StopWith; once fn returns the job is
// finished and is forgotten Keep later.
func (r *Runner[V]) Start(key string, deadline time.Time, value V, fn func(ctx context.Context, j *Job[V])) *Job[V] {
	return r.StartWatched(key, deadline, value, nil, fn)
}

// StartWatched is Start with a watch (nil: none) running beside fn for as
// long as the job runs: it gets the job's context and stops the job with a
// reason (e.g. warmup.WatchOwner: its owner is gone), which fn finds in
// context.Cause.
func (r *Runner[V]) StartWatched(key string, deadline time.Time, value V, watch func(ctx context.Context, stop func(cause error)), fn func(ctx context.Context, j *Job[V])) *Job[V] {
	ctx, release := context.Background(), context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, release = context.WithDeadline(ctx, deadline)
	}
	ctx, stop := context.WithCancelCause(ctx)
	j := &Job[V]{Key: key, Value: value, stop: stop, release: release, done: make(chan struct{})}
	r.mu.Lock()
	r.expireLocked()
	if old := r.jobs[key]; old != nil {
		old.Cancel()
	}
	r.jobs[key] = j
	r.mu.Unlock()
	if watch != nil {
		go watch(ctx, j.StopWith)
	}
	go func() {
		defer j.Cancel()
		defer func() {
			j.mu.Lock()
			j.ended = r.Clock.Now()
			j.mu.Unlock()
			close(j.done)
		}()
		fn(ctx, j)
	}()
	return j
}

// Get returns key's job, running or finished, if the Runner has it.
func (r *Runner[V]) Get(key string) (*Job[V], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked()
	j, ok := r.jobs[key]
	return j, ok
}

// Forget drops key's job if it still is j (a later Start may have replaced
// it); a running job goes on, unlisted.
func (r *Runner[V]) Forget(key string, j *Job[V]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs[key] == j {
		delete(r.jobs, key)
	}
}

// Jobs lists the jobs in memory, running or finished, by key.
func (r *Runner[V]) Jobs() []*Job[V] {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked()
	var jobs []*Job[V]
	for _, j := range r.jobs {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *Job[V]) int { return cmp.Compare(a.Key, b.Key) })
	return jobs
}

// Cancel stops and forgets every job whose key starts with prefix without
// waiting for them, and returns how many were still running.
func (r *Runner[V]) Cancel(prefix string) int {
	return len(r.take(prefix))
}

// Stop stops and forgets every job whose key starts with prefix and
// returns how many were still running. It returns once their work ended,
// or after wait.
func (r *Runner[V]) Stop(prefix string, wait time.Duration) int {
	running := r.take(prefix)
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for _, j := range running {
		select {
		case <-j.done:
		case <-timeout.C:
			return len(running)
		}
	}
	return len(running)
}

// take cancels and removes the jobs under prefix; it returns the ones that
// were running.
func (r *Runner[V]) take(prefix string) []*Job[V] {
	r.mu.Lock()
	defer r.mu.Unlock()
	var running []*Job[V]
	for key, j := range r.jobs {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if !j.Finished() {
			running = append(running, j)
		}
		j.Cancel()
		delete(r.jobs, key)
	}
	return running
}

// expireLocked forgets the jobs that finished more than keep ago.
func (r *Runner[V]) expireLocked() {
	now := r.Clock.Now()
	for key, j := range r.jobs {
		if ended, ok := j.Ended(); ok && now.Sub(ended) > r.keep {
			delete(r.jobs, key)
		}
	}
}

// Cancel stops the job without a cause; it does not wait.
func (j *Job[V]) Cancel() { j.stop(nil); j.release() }

// StopWith stops the job with a reason its function finds in
// context.Cause (e.g. its owner is gone); it does not wait.
func (j *Job[V]) StopWith(cause error) { j.stop(cause) }

// Done is closed once the job's function returned.
func (j *Job[V]) Done() <-chan struct{} { return j.done }

// Finished reports whether the job's function returned.
func (j *Job[V]) Finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// Ended is when the job's function returned, if it did.
func (j *Job[V]) Ended() (time.Time, bool) {
	if !j.Finished() {
		return time.Time{}, false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended, true
}
