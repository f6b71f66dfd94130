package rollouts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/warmup"
)

// loadRuns are the load measurements (danki/latency source: load) running
// in the background: Run starts one, Resume polls it, Terminate and
// GarbageCollect stop it. They live in this process only: after a plugin
// restart Resume finds nothing and says so. Argo calls neither Terminate
// nor GarbageCollect for an AnalysisRun that is deleted: each run checks
// its AnalysisRun every ownerEvery and stops once it is gone.
type loadRuns struct {
	mu   sync.Mutex
	byID map[string]*loadRun

	// argo reads the AnalysisRuns for the owner check; without a client
	// (no kubeconfig, no service account: a run outside a cluster) there
	// is no check.
	argo func() (argoclient.Interface, error)
	// ownerEvery is how often (warmup.OwnerCheckInterval; tests shorten
	// it).
	ownerEvery time.Duration
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

func newLoadRuns() *loadRuns {
	argo := &lazyArgo{}
	return &loadRuns{byID: map[string]*loadRun{}, argo: argo.get, ownerEvery: warmup.OwnerCheckInterval}
}

// start runs analyze in the background under id, replacing (and stopping)
// any earlier run with the same id. While it runs, run (the AnalysisRun
// the measurement belongs to) is checked every ownerEvery: deleted, or
// created again under its name, the load stops and the verdict is an Error
// saying so. log is the measurement's logger.
func (l *loadRuns) start(log *slog.Logger, run *v1alpha1.AnalysisRun, id string, analyze func(context.Context) analysis.Verdict) *loadRun {
	ctx, stopWith := context.WithCancelCause(context.Background())
	r := &loadRun{cancel: func() { stopWith(nil) }, done: make(chan struct{}), status: "starting"}
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
	if check := l.ownerCheck(run, log); check != nil {
		go warmup.WatchOwner(ctx, l.ownerEvery, check, log, stopWith)
	}
	go func() {
		defer close(r.done)
		v := analyze(ctx)
		if cause := context.Cause(ctx); errors.Is(cause, warmup.ErrOwnerGone) {
			v = analysis.Verdict{Phase: analysis.Error, Summary: "load stopped: " + cause.Error(), Error: cause.Error()}
			log.Info("danki/latency load test stopped", "reason", cause)
		}
		r.mu.Lock()
		r.verdict = v
		r.mu.Unlock()
		time.AfterFunc(finishedLoadsKept, func() { l.forget(id, r) })
	}()
	return r
}

// ownerCheck checks that run still exists as the same object (UID); nil
// when there is no run or no client to check it with.
func (l *loadRuns) ownerCheck(run *v1alpha1.AnalysisRun, log *slog.Logger) func(context.Context) error {
	if run == nil || run.Name == "" || l.argo == nil {
		return nil
	}
	argo, err := l.argo()
	if err != nil {
		log.Debug("danki/latency load test: its AnalysisRun is not checked while it runs", "reason", err)
		return nil
	}
	ns, name, uid := run.Namespace, run.Name, run.UID
	return func(ctx context.Context) error {
		cur, err := argo.ArgoprojV1alpha1().AnalysisRuns(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: AnalysisRun %s/%s was deleted", warmup.ErrOwnerGone, ns, name)
		case err != nil:
			return fmt.Errorf("get AnalysisRun %s/%s: %w", ns, name, err)
		case uid != "" && cur.UID != uid:
			return fmt.Errorf("%w: AnalysisRun %s/%s was deleted and created again (UID %s, the load's was %s)", warmup.ErrOwnerGone, ns, name, cur.UID, uid)
		case cur.DeletionTimestamp != nil:
			return fmt.Errorf("%w: AnalysisRun %s/%s is being deleted", warmup.ErrOwnerGone, ns, name)
		}
		return nil
	}
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
