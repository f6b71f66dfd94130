package rollouts

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
)

// loadRuns are the load measurements (danki/latency source: load) running
// in the background: Run starts one, Resume polls it, Terminate and
// GarbageCollect stop it. They live in this process only: after a plugin
// restart Resume finds nothing and says so.
type loadRuns struct {
	mu   sync.Mutex
	byID map[string]*loadRun
}

// loadRun is one measurement's load.
type loadRun struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	status  string // progress while running
	verdict analysis.Verdict
}

// finishedLoadsKept bounds how long a finished measurement waits for the
// Resume that collects it (an AnalysisRun deleted meanwhile never comes).
const finishedLoadsKept = 30 * time.Minute

func newLoadRuns() *loadRuns { return &loadRuns{byID: map[string]*loadRun{}} }

// start runs analyze in the background under id, replacing (and stopping)
// any earlier run with the same id.
func (l *loadRuns) start(id string, analyze func(context.Context) analysis.Verdict) *loadRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &loadRun{cancel: cancel, done: make(chan struct{}), status: "starting"}
	ctx = analysis.WithProgress(ctx, func(s string) {
		r.mu.Lock()
		r.status = s
		r.mu.Unlock()
	})
	l.mu.Lock()
	if old := l.byID[id]; old != nil {
		old.cancel()
	}
	l.byID[id] = r
	l.mu.Unlock()
	go func() {
		defer close(r.done)
		v := analyze(ctx)
		r.mu.Lock()
		r.verdict = v
		r.mu.Unlock()
		time.AfterFunc(finishedLoadsKept, func() { l.forget(id, r) })
	}()
	return r
}

func (l *loadRuns) get(id string) *loadRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}

// forget drops id if it still is r.
func (l *loadRuns) forget(id string, r *loadRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID[id] == r {
		delete(l.byID, id)
	}
}

// stop cancels the runs whose id starts with prefix and waits up to wait
// for their load to stop; it returns how many it stopped.
func (l *loadRuns) stop(prefix string, wait time.Duration) int {
	l.mu.Lock()
	var runs []*loadRun
	for id, r := range l.byID {
		if strings.HasPrefix(id, prefix) {
			runs = append(runs, r)
			delete(l.byID, id)
		}
	}
	l.mu.Unlock()
	deadline := time.After(wait)
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		select {
		case <-r.done:
		case <-deadline:
			return len(runs)
		}
	}
	return len(runs)
}

// finished returns the verdict once the run is over.
func (r *loadRun) finished() (analysis.Verdict, bool) {
	select {
	case <-r.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.verdict, true
	default:
		return analysis.Verdict{}, false
	}
}

func (r *loadRun) progress() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}
