package rollouts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/jobs"
	"github.com/danki-dev/danki/pkg/warmup"
)

// loadJob is one load measurement (danki/latency source: load) in the
// background: its progress message while it runs, then its verdict.
type loadJob = jobs.Job[*jobs.Progress[analysis.Verdict]]

// loadRuns are the load measurements running in the background, on a
// jobs.Runner: Run starts one, Resume polls it, Terminate and
// GarbageCollect stop it. They live in this process only: after a plugin
// restart Resume finds nothing and says so. Argo calls neither Terminate
// nor GarbageCollect for an AnalysisRun that is deleted: each run checks
// its AnalysisRun every ownerEvery and stops once it is gone.
type loadRuns struct {
	*jobs.Runner[*jobs.Progress[analysis.Verdict]]

	// argo reads the AnalysisRuns for the owner check; without a client
	// (no kubeconfig, no service account: a run outside a cluster) there
	// is no check.
	argo func() (argoclient.Interface, error)
	// ownerEvery is how often (warmup.OwnerCheckInterval; tests shorten
	// it).
	ownerEvery time.Duration
}

// finishedLoadsKept bounds how long a finished measurement waits for the
// Resume that collects it (an AnalysisRun deleted meanwhile never comes).
const finishedLoadsKept = 30 * time.Minute

func newLoadRuns() *loadRuns {
	argo := &lazyArgo{}
	return &loadRuns{Runner: jobs.NewRunner[*jobs.Progress[analysis.Verdict]](finishedLoadsKept), argo: argo.get, ownerEvery: warmup.OwnerCheckInterval}
}

// start runs analyze in the background under id, replacing (and stopping)
// any earlier run with the same id. While it runs, run (the AnalysisRun
// the measurement belongs to) is checked every ownerEvery: deleted, or
// created again under its name, the load stops and the verdict is an Error
// saying so. log is the measurement's logger.
func (l *loadRuns) start(log *slog.Logger, run *v1alpha1.AnalysisRun, id string, analyze func(context.Context) analysis.Verdict) *loadJob {
	var watch func(context.Context, func(error))
	if check := l.ownerCheck(run, log); check != nil {
		watch = func(ctx context.Context, stop func(error)) { warmup.WatchOwner(ctx, l.ownerEvery, check, log, stop) }
	}
	return l.StartWatched(id, time.Time{}, jobs.NewProgress[analysis.Verdict]("starting"), watch, func(ctx context.Context, j *loadJob) {
		v := analyze(analysis.WithProgress(ctx, j.Value.Report))
		if cause := context.Cause(ctx); errors.Is(cause, warmup.ErrOwnerGone) {
			v = analysis.Verdict{Phase: analysis.Error, Summary: "load stopped: " + cause.Error(), Error: cause.Error()}
			log.Info("danki/latency load test stopped", "reason", cause)
		}
		j.Value.SetResult(v)
	})
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
