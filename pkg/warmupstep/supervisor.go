package warmupstep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/jobs"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Supervisor limits.
const (
	// MaxRestarts bounds how often a run is started again because the
	// process that ran it restarted (Start with a previous Status that is
	// not final).
	MaxRestarts = 3
	// FinishedTTL is how long a finished run stays in memory to answer
	// Start and Status.
	FinishedTTL = time.Hour
	// StopWait bounds how long Stop waits for a run's load to stop.
	StopWait = 5 * time.Second
	// deadlineGrace lets Run's own deadline (which reports the latency
	// trend) fire before the run's context ends; the grace only bounds
	// finding the targets.
	deadlineGrace = 10 * time.Second
)

// RunKey identifies a supervised warm-up: its owner (for the step plugin the
// Rollout, "namespace/name"), the revision being warmed (the canary's
// pod-template hash) and the step.
type RunKey struct {
	Owner    string
	Revision string
	Step     int32
}

// String is the run ID kept in Status: owner/revision/step.
func (k RunKey) String() string { return fmt.Sprintf("%s/%s/%d", k.Owner, k.Revision, k.Step) }

// Job is a warm-up for the Supervisor to run.
type Job struct {
	// Config is the warm-up config; Start applies its defaults.
	Config warmup.Config
	// FindTargets finds the canary (and, for CompareToStable, stable)
	// targets. It runs in the background; ctx ends at the deadline (plus a
	// grace) or when the run is stopped. warmup.FindTargets with a
	// TargetQuery is the usual implementation.
	FindTargets func(ctx context.Context) (canary, stable []warmup.Target, err error)
	// After, if set, runs once every target converged, within the same
	// deadline (e.g. the capacity check on a warm canary pod): report shows
	// its progress in the status message, its summary is added to the
	// converged message, and its error fails the run.
	After func(ctx context.Context, canary []warmup.Target, report func(string)) (summary string, err error)
	// Main, if set, replaces the synthetic load (e.g. the mirror source:
	// warm-up on mirrored user traffic): it runs after the targets are
	// found, reports its progress like After, its summary is the converged
	// message and its error fails the run. After still runs once it
	// succeeded.
	Main func(ctx context.Context, canary []warmup.Target, report func(string)) (summary string, err error)
	// Neighbours, if set, is the users' own latency on stable for the
	// neighbour guard (warmup.Options.Neighbours).
	Neighbours warmup.NeighbourSignal
	// Owner, if set, checks every OwnerEvery (default warmup.OwnerCheckInterval)
	// while the run goes on that its owner still wants it (for the step
	// plugin: the Rollout exists, with the same UID and canary hash). An
	// error wrapping warmup.ErrOwnerGone, or failures for
	// warmup.OwnerUnknownLimit, stop
	// the run: PhaseStopped, the reason in the message. Nothing else is
	// undone (warmup.WatchOwner).
	Owner      func(ctx context.Context) error
	OwnerEvery time.Duration
	// Guard, if set, builds the run's Config.Guard once the targets are
	// found (warmup.NewPodGuard: the run's own pods only, re-read while it runs);
	// ctx ends with the run. Its error fails the run. An existing
	// Config.Guard is asked first.
	Guard func(ctx context.Context, canary, stable []warmup.Target) (func(netip.Addr) error, error)
	// Yield, if set, lowers the canary pods' CPU weight while they warm
	// (Step.CPUYield); the run puts it back before After, before it
	// reports them warm, and whatever its outcome. A verdict against a pod
	// while it yields waits for its full weight (warmup.Yield).
	Yield Yielder
}

// Yielder lowers and restores the CPU requests of a run's canary pods
// (CPUYield).
type Yielder interface {
	// Lower lowers them and returns the targets to warm (their CPU
	// requests as at full weight, for a cpuBudget share), a note on what
	// could not yield ("" when all did), and whether any pod yields.
	Lower(ctx context.Context, canary []warmup.Target) (targets []warmup.Target, note string, lowered bool)
	// Restore puts back what Lower lowered (even after ctx ended) and
	// returns a note for the step's message ("" when nothing was lowered).
	Restore(ctx context.Context) string
}

// yielding is a run's Yielder as it goes: restore runs once.
type yielding struct {
	y       Yielder
	lowered bool
	note    string // Lower's note, then Restore's
	once    sync.Once
}

// startYield lowers the canary pods' CPU weight when the job asks for it
// and returns the targets to warm.
func startYield(ctx context.Context, job Job, canary []warmup.Target) (*yielding, []warmup.Target) {
	ys := &yielding{y: job.Yield}
	if job.Yield != nil {
		canary, ys.note, ys.lowered = job.Yield.Lower(ctx, canary)
	}
	return ys, canary
}

// restore puts the CPU requests back (once) and returns the note for the
// step's message: "" with nothing to say, else "; …".
func (ys *yielding) restore(ctx context.Context) string {
	ys.once.Do(func() {
		if ys.y == nil || !ys.lowered {
			return
		}
		n := ys.y.Restore(ctx)
		if ys.note != "" && n != "" {
			ys.note += "; " + n
		} else if n != "" {
			ys.note = n
		}
	})
	if ys.note == "" {
		return ""
	}
	return "; " + ys.note
}

// Observer sees what the supervised warm-ups did: pkg/metrics.Plugin
// implements it for the plugin's metrics endpoint.
type Observer interface {
	// WarmupEnded is called once per run this Supervisor started, when it
	// ends: its outcome (warmup.OutcomeOf's words) and how long it ran.
	WarmupEnded(outcome string, elapsed time.Duration)
	// WarmupRequests adds warm-up requests sent to canary targets, as
	// they go out (at every window).
	WarmupRequests(n int64)
}

// Supervisor runs warm-ups in the background for callers that poll: the Argo
// Rollouts step plugin calls Run again and again while a step runs, from
// several workers at once, and its process may restart in the middle. Each
// run is keyed by RunKey; Start is idempotent, Status reports, Stop stops.
// Finished runs are forgotten FinishedTTL after they end (the jobs.Runner's
// expiry). It is safe for concurrent use.
type Supervisor struct {
	log *slog.Logger
	// Observer, if set, sees every run end and the requests it sent
	// (danki's own metrics; set it before the first Start).
	Observer Observer

	// mu makes Start's look-up, replacement and start one step: two
	// workers polling the same step start one run.
	mu   sync.Mutex
	runs *jobs.Runner[*supervisedRun]
}

// NewSupervisor returns a Supervisor that logs to log (nil: slog.Default()).
func NewSupervisor(log *slog.Logger) *Supervisor {
	if log == nil {
		log = slog.Default()
	}
	return &Supervisor{log: log, runs: jobs.NewRunner[*supervisedRun](FinishedTTL)}
}

// ownerPrefix is the runner key prefix of every run of owner.
func ownerPrefix(owner string) string { return owner + "/" }

// Start starts the warm-up of key in the background and returns its status
// at once; it never waits for the load. Called again for the same key it
// starts nothing and reports the run's progress.
//
// previous is the status the caller kept from an earlier call (nil if none).
// A final previous status of the same run is returned as it is. A previous
// status that is not final, for a run this Supervisor does not have, means
// the process that ran it is gone: the warm-up starts again within the
// original deadline (the pods keep what they learned) and Restarts counts
// up; after MaxRestarts restarts, or past the deadline, the run fails
// instead. Starting a key replaces (stops) any other run of the same owner.
func (s *Supervisor) Start(key RunKey, previous *Status, job Job) Status {
	cfg := job.Config.WithDefaults()
	id := key.String()
	log := s.log.With("owner", key.Owner, "revision", key.Revision, "step", key.Step)
	if previous != nil && previous.RunID != id {
		previous = nil // another run's status: not ours to resume
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.runs.Get(id); ok {
		if !j.Finished() || previous != nil {
			return j.Value.snapshot()
		}
		// A finished run the caller no longer knows about: a retry.
		s.runs.Forget(id, j)
	}
	status := Status{RunID: id, CanaryHash: key.Revision, Step: key.Step, StartedAt: time.Now().UTC(), Phase: PhaseResolving}
	if previous != nil {
		if previous.Phase.Final() {
			return *previous
		}
		status.StartedAt, status.Restarts = previous.StartedAt, previous.Restarts+1
		log.Info("restarting warm-up after a restart of its process", "restarts", status.Restarts, "startedAt", previous.StartedAt)
	}
	remaining := cfg.Deadline.D() - time.Since(status.StartedAt)
	switch {
	case status.Restarts > MaxRestarts:
		status.Phase, status.Message = PhaseFailed, fmt.Sprintf("warm-up restarted %d times because the plugin process restarted; giving up", status.Restarts-1)
		return status
	case remaining <= 0:
		status.Phase, status.Message = PhaseFailed, fmt.Sprintf("deadline %s passed (warm-up started %s, restarted after a plugin restart)", cfg.Deadline, status.StartedAt.Format(time.RFC3339))
		return status
	}
	// A new revision or step replaces the owner's other runs (cancel does
	// not wait: their load stops within hardStopGrace).
	s.runs.Cancel(ownerPrefix(key.Owner))
	r := &supervisedRun{key: key, status: status, pods: map[string]*PodProgress{}, observer: s.Observer}
	var watch func(context.Context, func(error))
	if job.Owner != nil {
		watch = func(ctx context.Context, stop func(error)) {
			warmup.WatchOwner(ctx, job.OwnerEvery, job.Owner, log, stop)
		}
	}
	j := s.runs.StartWatched(id, status.StartedAt.Add(cfg.Deadline.D()+deadlineGrace), r, watch, func(ctx context.Context, j *jobs.Job[*supervisedRun]) {
		j.Value.execute(ctx, log, cfg, job)
	})
	log.Info("warm-up started", "remaining", remaining.Round(time.Second))
	return j.Value.snapshot()
}

// Status returns the status of key's run, if this Supervisor has it.
func (s *Supervisor) Status(key RunKey) (Status, bool) {
	j, ok := s.runs.Get(key.String())
	if !ok {
		return Status{}, false
	}
	return j.Value.snapshot(), true
}

// Stop stops and forgets every run of owner and returns how many were still
// running. It returns once their load has stopped (no more requests go
// out), or after StopWait.
func (s *Supervisor) Stop(owner string) int {
	n := s.runs.Stop(ownerPrefix(owner), StopWait)
	if n > 0 {
		s.log.Info("warm-up stopped", "owner", owner, "runs", n)
	}
	return n
}

// Keys lists the runs in memory, running or finished.
func (s *Supervisor) Keys() []RunKey {
	var keys []RunKey
	for _, j := range s.runs.Jobs() {
		keys = append(keys, j.Value.key)
	}
	return keys
}

// supervisedRun is the state of one warm-up running (or finished) in the
// background; the jobs.Runner owns its lifetime.
type supervisedRun struct {
	key RunKey

	observer Observer // nil: none

	mu     sync.Mutex
	status Status
	pods   map[string]*PodProgress
	sent   int64 // requests passed to observer
}

func (r *supervisedRun) snapshot() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Pods, st.Trend = slices.Clone(st.Pods), slices.Clone(st.Trend)
	return st
}

func (r *supervisedRun) set(phase Phase, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Phase, r.status.Message = phase, msg
}

// execute runs job; its owner check (Job.Owner) runs beside it as the
// job's watch (Supervisor.Start).
func (r *supervisedRun) execute(ctx context.Context, log *slog.Logger, cfg warmup.Config, job Job) {
	// The run's outcome for the Observer, once the deferred calls below
	// settled its phase; failure is the load's error, which says more than
	// the phase (not converged, rejected).
	var failure error
	if r.observer != nil {
		started := time.Now()
		defer func() { r.observer.WarmupEnded(outcomeOf(r.snapshot().Phase, failure), time.Since(started)) }()
	}
	// A run its owner check stopped ends Stopped with the reason, whatever
	// the load made of its cancelled context.
	defer func() {
		if cause := context.Cause(ctx); errors.Is(cause, warmup.ErrOwnerGone) {
			if r.snapshot().Phase != PhaseConverged {
				r.set(PhaseStopped, "warm-up stopped: "+cause.Error())
			}
		}
	}()
	canary, stable, err := job.FindTargets(ctx)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			r.set(PhaseStopped, "warm-up stopped while finding pods")
			return
		}
		log.Warn("warm-up failed to find pods", "err", err)
		r.set(PhaseFailed, err.Error())
		return
	}
	run := cfg
	deadline, _ := ctx.Deadline()
	run.Deadline = config.Duration(time.Until(deadline) - deadlineGrace)
	if run.Deadline <= 0 {
		r.set(PhaseFailed, fmt.Sprintf("deadline %s passed while finding pods", cfg.Deadline))
		return
	}
	if job.Guard != nil {
		guard, err := job.Guard(ctx, canary, stable)
		if err != nil {
			if ctx.Err() != nil {
				r.set(PhaseStopped, "warm-up stopped while setting up its pod guard")
				return
			}
			log.Warn("warm-up failed to set up its pod guard", "err", err)
			r.set(PhaseFailed, "pod guard: "+err.Error())
			return
		}
		run.Guard = warmup.GuardChain(run.Guard, guard)
	}
	names := make([]string, 0, len(canary))
	r.mu.Lock()
	for _, t := range canary {
		names = append(names, t.String())
		r.pods[t.String()] = &PodProgress{Name: t.String()}
	}
	r.mu.Unlock()
	ys, canary := startYield(ctx, job, canary)
	defer ys.restore(ctx)
	if job.Main != nil {
		failure = r.executeMain(ctx, log, canary, job, ys)
		return
	}
	r.set(PhaseHealth, fmt.Sprintf("waiting for %d pod(s) to answer %s", len(canary), run.HealthCheck(canary)))
	log.Info("warming pods", "pods", names, "stable", len(stable), "yieldCPU", ys.lowered)
	opts := warmup.Options{Stable: stable, Logger: log, OnProgress: r.onProgress, Neighbours: job.Neighbours}
	if ys.lowered {
		// Warm while yielding is warm; a verdict against a pod waits for
		// its CPU to come back, in the same run (warmup.Yield).
		opts.Yield = &warmup.Yield{Restore: func() { ys.restore(ctx) }}
	}
	res, err := warmup.Run(ctx, run, canary, opts)
	again := ""
	if res != nil && res.Yield.String() != "" {
		again = "; " + res.Yield.String()
	}
	yieldNote := ys.restore(ctx)
	switch {
	case err == nil && job.After != nil:
		log.Info("warm-up converged; checking", "summary", res.Summary())
		msg := "warm-up " + res.Summary() + again + yieldNote
		r.set(PhaseChecking, msg)
		summary, err := job.After(withRunGuard(ctx, run.Guard), canary, func(p string) { r.set(PhaseChecking, p) })
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			r.set(PhaseStopped, "stopped during the check after the warm-up")
		case err != nil:
			log.Warn("check after the warm-up failed", "err", err)
			r.set(PhaseFailed, err.Error())
		default:
			r.set(PhaseConverged, msg+"; "+summary)
		}
	case err == nil:
		log.Info("warm-up converged", "summary", res.Summary())
		r.set(PhaseConverged, "warm-up "+res.Summary()+again+yieldNote)
	case errors.Is(err, context.Canceled):
		r.set(PhaseStopped, "warm-up stopped: "+err.Error())
	default:
		failure = err
		msg := err.Error()
		if res != nil {
			msg = fmt.Sprintf("warm-up failed: %s (%d requests)", res.Reason, res.Requests())
		}
		msg += again + yieldNote
		log.Warn("warm-up failed", "err", err)
		r.set(PhaseFailed, msg)
	}
}

// executeMain runs Job.Main (instead of the synthetic load), then
// Job.After.
func (r *supervisedRun) executeMain(ctx context.Context, log *slog.Logger, canary []warmup.Target, job Job, ys *yielding) error {
	report := func(p string) { r.set(PhaseLoad, p) }
	r.set(PhaseLoad, "starting")
	summary, err := job.Main(ctx, canary, report)
	summary += ys.restore(ctx)
	if err == nil && job.After != nil {
		var more string
		r.set(PhaseChecking, summary)
		more, err = job.After(ctx, canary, func(p string) { r.set(PhaseChecking, p) })
		summary += "; " + more
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		r.set(PhaseStopped, "warm-up stopped")
	case err != nil:
		log.Warn("warm-up failed", "err", err)
		r.set(PhaseFailed, err.Error()+ys.restore(ctx))
	default:
		log.Info("warm-up converged", "summary", summary)
		r.set(PhaseConverged, summary)
	}
	return err
}

// outcomeOf is a finished run's outcome: its phase, refined by the load's
// error for a failed one.
func outcomeOf(phase Phase, failure error) string {
	switch phase {
	case PhaseConverged:
		return warmup.OutcomeWarm
	case PhaseStopped:
		return warmup.OutcomeStopped
	}
	if failure != nil {
		if o := warmup.OutcomeOf(failure); o != warmup.OutcomeWarm && o != warmup.OutcomeStopped {
			return o
		}
	}
	return warmup.OutcomeFailed
}

// onProgress folds a warm-up snapshot into the status.
func (r *supervisedRun) onProgress(p warmup.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.fold(p, r.pods)
	// Progress.Requests counts the canary's requests so far (0 at phase
	// changes): the Observer gets what is new.
	if r.observer != nil && !p.Stable && p.Requests > r.sent {
		r.observer.WarmupRequests(p.Requests - r.sent)
		r.sent = p.Requests
	}
}

type runGuardKey struct{}

func withRunGuard(ctx context.Context, guard func(netip.Addr) error) context.Context {
	return context.WithValue(ctx, runGuardKey{}, guard)
}

// RunGuard is the guard of the run whose Job.After is called with ctx (the
// pod guard of Job.Guard, after the config's own), nil outside one: a check
// that sends load of its own (the capacity check) dials through it too, so
// a pod replaced since the warm-up gets none of it.
func RunGuard(ctx context.Context) func(netip.Addr) error {
	g, _ := ctx.Value(runGuardKey{}).(func(netip.Addr) error)
	return g
}
