package warmup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/warmup/rule"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// userAgent is sent on warm-up and health requests.
const userAgent = "danki-warmup (fortio)"

// ErrNotConverged is wrapped by the error of a warm-up that hit its deadline
// or request cap before every target's latency converged.
var ErrNotConverged = errors.New("latency did not converge")

// ErrSlowerVersion is wrapped by the error of a warm-up that rejected the
// new version: converged, but slower than stable (Config.RejectSlowerVersion).
var ErrSlowerVersion = errors.New("slower than stable")

// ErrTargetFailing is wrapped by the error of a warm-up stopped because a
// target failed every one of many requests in a row.
var ErrTargetFailing = errors.New("target failing")

// ErrTemplate is wrapped by the error of a warm-up none of whose requests
// to a target could be sent: their templates failed to render.
var ErrTemplate = errors.New("request templates failed")

// Options tune a Run beyond the Config.
type Options struct {
	// Stable are the stable pods, loaded side by side at StableQPS with
	// Config.CompareToStable or RejectSlowerVersion (on by default when
	// there are stable pods).
	Stable []Target
	// OnProgress is called after every completed window and at phase
	// changes, from one goroutine at a time. Keep it quick: load keeps
	// running, but windows queue up behind it.
	OnProgress func(Progress)
	// Logger receives debug logs; nil means slog.Default().
	Logger *slog.Logger
	// Neighbours, if set, is where the neighbour guard
	// (Config.NeighbourGuard) reads the users' own latency on stable, every
	// guardPoll: the latency gate's metrics source. It is watched beside
	// the stable probe (when stable pods are given), each with its own
	// baseline; either one backs off.
	Neighbours NeighbourSignal
	// Yield, if set, says the targets start with their CPU lowered and
	// how to give it back (Yield: convergence while yielding stands, a
	// verdict against a target is judged at full weight, in the same run).
	Yield *Yield
	// JudgeAgainstStable judges the targets against Stable even without
	// CompareToStable or RejectSlowerVersion, and rejects nothing: a target
	// as fast as the stable pods (p50 within Tolerance, p99 within
	// StableRatio of theirs) is warm; one whose own latency stopped
	// improving with its p50 within StableRatio of theirs is warm once
	// that plateau has lasted half its warm-up (as next to stable); one
	// further off (a slower node, or between two JIT tiers: the gate
	// cannot tell), and one whose neighbours have not answered
	// StableWindows windows yet, is judged on its own plateau, as without
	// stable. The warm gate sets it with a pod's Ready neighbours of the
	// same workload — the same version, warm.
	JudgeAgainstStable bool
	// KeepLatencies keeps every request's latency for
	// TargetResult.Latencies (exact figures over a fixed count: the
	// analysis' load source, the capacity check). Without it a run keeps
	// only the windows' summaries and the stopping rule's bounded
	// histograms, whatever maxRequests (see package rule's blockPool).
	KeepLatencies bool
}

// Phase is the stage a warm-up is in.
type Phase string

// Phases reported in Progress.
const (
	PhaseHealth Phase = "health" // waiting for targets to answer the health check (HTTP or gRPC)
	PhaseLoad   Phase = "load"   // sending warm-up load
	PhaseDone   Phase = "done"   // load stopped
)

// Progress is a snapshot sent to Options.OnProgress.
type Progress struct {
	Phase   Phase
	Elapsed time.Duration
	// Target is the target whose window just completed ("stable" for the
	// stable pool); empty for phase changes.
	Target string
	Stable bool
	Window WindowStats
	// TargetConverged says whether Target has converged; Waiting says why
	// not yet, Warm by which rule it is warm (TargetResult.Warm).
	TargetConverged bool
	Waiting, Warm   string
	// Targets and ConvergedTargets count canary targets.
	Targets, ConvergedTargets int
	// Requests counts warm-up requests to all canary targets so far.
	Requests int64
	// StableP99 is the stable pool's latest window p99 (0 if none yet).
	StableP99 time.Duration
	// Pace is Target's pace now, in requests per second (the ramp, see
	// Config.StartQPS).
	Pace float64
	// Neighbours is set on the snapshot at which the neighbour guard
	// changed the cap on the pace (Config.NeighbourGuard): what it saw and
	// did. Backoffs counts its back-offs so far; PaceCap is the cap on
	// every target's pace while it is below qps (0: no cap).
	Neighbours string
	Backoffs   int
	PaceCap    float64
}

// Run warms the targets until their latency converges (see the package
// documentation), the deadline passes, a target reaches MaxRequests, or ctx
// ends. It always returns a Result (nil only for invalid input) describing
// what was measured; the error wraps ErrUnhealthy, ErrNotConverged or
// ctx.Err() when the warm-up did not succeed.
func Run(ctx context.Context, cfg Config, targets []Target, opts Options) (*Result, error) {
	p, err := prepare(cfg, targets, opts)
	if err != nil {
		return nil, err
	}
	cfg, opts = p.cfg, p.opts
	targets, warmed := splitWarmed(targets)
	if len(targets) == 0 {
		return allWarmed(cfg, warmed), nil
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}

	start := time.Now()
	res := &Result{Config: cfg, Start: start, Seed: seed}
	for _, t := range targets {
		res.Targets = append(res.Targets, TargetResult{Target: t})
	}
	emit := func(p Progress) {
		if opts.OnProgress != nil {
			p.Elapsed = time.Since(start)
			p.Targets = len(targets)
			opts.OnProgress(p)
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Deadline.D())
	defer cancel()

	// Which pods get mTLS: on copies, the caller's targets stay as given.
	targets, opts.Stable = slices.Clone(targets), slices.Clone(opts.Stable)
	routes, err := cfg.resolvePeers(runCtx, targets, opts.Stable)
	if err != nil {
		res.Elapsed, res.Reason = time.Since(start), err.Error()
		return res, err
	}
	sess := &session{Config: &cfg, routes: routes}
	for i, t := range targets {
		res.Targets[i].Target = t
	}
	if len(routes.peers) > 0 {
		res.Mesh = cfg.policy().Mesh.Self()
	}

	emit(Progress{Phase: PhaseHealth})
	if err := p.ready(runCtx, sess, targets, opts.Stable); err != nil {
		res.Elapsed, res.Reason = time.Since(start), err.Error()
		if ctx.Err() != nil {
			res.Reason = "stopped while waiting for health: " + ctx.Err().Error()
			return res, fmt.Errorf("warm-up stopped: %w", ctx.Err())
		}
		return res, err
	}
	opts.Logger.Debug("warm-up load starting", "targets", len(targets), "qps", cfg.QPS, "startQPS", cfg.StartQPS, "connections", cfg.Connections)
	emit(Progress{Phase: PhaseLoad})
	c := &coordinator{cfg: sess, opts: opts, set: p.set, seed: uint64(seed), start: start, emit: emit, res: res, rule: p.rule, stableLoad: p.stableLoad}
	err = c.run(ctx, runCtx, targets)
	res.Elapsed = time.Since(start)
	if len(warmed) > 0 {
		res.Reason += fmt.Sprintf("; %s more already warmed by the danki warm gate, not loaded", countPods(len(warmed)))
	}
	emit(Progress{Phase: PhaseDone, Requests: res.Requests(), ConvergedTargets: res.convergedTargets()})
	return res, err
}

// prepared is a run's checked input: the config with its defaults, the
// request mix, and the stopping rule, built once (how this run judges its
// targets is its own, not the config's).
type prepared struct {
	cfg  Config
	opts Options
	set  *requestSet
	rule *rule.Rule
	// stableLoad: the stable pods are loaded side by side (a comparison
	// or rejection needs them; the neighbour guard watches them whenever
	// they are given).
	stableLoad bool
}

// prepare checks a run's input before anything is sent. Run defaults and
// validates the config itself, whoever parsed it: callers adjust a parsed
// config before a run (source: load sets maxRequests per measurement), and
// no run starts from an invalid one. Both steps are idempotent.
func prepare(cfg Config, targets []Target, opts Options) (*prepared, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid warm-up config: %w", err)
	}
	if len(targets) == 0 {
		return nil, errors.New("no targets to warm: give URLs or pods")
	}
	if _, required := cfg.WantsStable(); required && len(opts.Stable) == 0 {
		return nil, errors.New("compareToStable or rejectSlowerVersion: no stable targets to compare with (give stable URLs or stable pods, or turn them off)")
	}
	set, err := newRequestSet(cfg)
	if err != nil {
		return nil, fmt.Errorf("invalid warm-up config: %w", err)
	}
	reject := cfg.rejecting(len(opts.Stable) > 0)
	stopRule, err := cfg.newRule(reject, opts.JudgeAgainstStable && len(opts.Stable) > 0)
	if err != nil {
		return nil, fmt.Errorf("invalid warm-up config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	stableLoad := cfg.CompareToStable || reject || (*cfg.NeighbourGuard && len(opts.Stable) > 0)
	return &prepared{cfg: cfg, opts: opts, set: set, rule: stopRule, stableLoad: stableLoad}, nil
}

// allWarmed is the result of a run whose every target the warm gate has
// warmed already: nothing is sent.
func allWarmed(cfg Config, warmed []Target) *Result {
	res := &Result{Config: cfg, Start: time.Now(), Converged: true,
		Reason: fmt.Sprintf("all %s already warmed by the danki warm gate (%s True): nothing sent", countPods(len(warmed)), wellknown.WarmCondition)}
	for _, t := range warmed {
		res.Targets = append(res.Targets, TargetResult{Target: t, Converged: true})
	}
	return res
}

// ready waits until every pod to be loaded answers its health check
// (within healthTimeout, and the run's deadline), then, for gRPC, resolves
// the message types once, now that the pods answer. targets and stable are
// the run's copies, their peers resolved (resolvePeers).
func (p *prepared) ready(runCtx context.Context, sess *session, targets, stable []Target) error {
	probe := slices.Clone(targets)
	if p.stableLoad {
		probe = append(probe, stable...)
	}
	cfg := &p.cfg
	healthCtx, healthCancel := context.WithTimeout(runCtx, cfg.HealthTimeout.D())
	defer healthCancel()
	limit := fmt.Sprintf("within healthTimeout %s", cfg.HealthTimeout)
	if cfg.Deadline <= cfg.HealthTimeout {
		limit = fmt.Sprintf("before the warm-up's deadline %s (shorter than healthTimeout %s)", cfg.Deadline, cfg.HealthTimeout)
	}
	if err := waitHealthy(healthCtx, sess, probe, limit); err != nil {
		return err
	}
	if !cfg.isGRPC() {
		return nil
	}
	return resolveGRPC(runCtx, sess, p.set, targets[0])
}

// splitWarmed separates the targets the warm gate has warmed already.
func splitWarmed(targets []Target) (cold, warmed []Target) {
	for _, t := range targets {
		if t.Warmed {
			warmed = append(warmed, t)
		} else {
			cold = append(cold, t)
		}
	}
	return cold, warmed
}

func countPods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// Summary is a one-line account of the warm-up: outcome, requests, windows,
// duration and the p99 trend from the first to the last window.
func (r *Result) Summary() string {
	if r.Converged && r.Requests() == 0 && len(r.Targets) > 0 && r.Targets[0].Target.Warmed {
		return "skipped: " + r.Reason
	}
	var b strings.Builder
	n := len(r.Targets)
	took := fmt.Sprintf("%d requests (%d windows of %d per target) in %s", r.Requests(), r.Windows(), r.Config.Window, r.Elapsed.Round(100*time.Millisecond))
	switch {
	case !r.Config.Converging():
		// A fixed count was asked for, not convergence: say what was sent
		// (and, as a measurement, where latency settled on the way).
		fmt.Fprintf(&b, "fixed load (no convergence asked): sent %s", took)
		if c := r.convergedTargets(); c > 0 {
			fmt.Fprintf(&b, "; latency converged on the way on %d/%d targets", c, n)
		}
	case r.Converged:
		fmt.Fprintf(&b, "converged: %d/%d targets warm after %s", n, n, took)
		b.WriteString(r.lastWarm())
	default:
		fmt.Fprintf(&b, "not converged: %d/%d targets warm after %s", r.convergedTargets(), n, took)
	}
	if first, last, ok := r.P99Trend(); ok {
		fmt.Fprintf(&b, "; worst p99 %s in window 1 → %s in the last window", latency.Format(first), latency.Format(last))
	}
	if r.Stable != nil {
		if w, ok := lastComplete(r.Stable.Windows); ok {
			fmt.Fprintf(&b, " (stable p99 %s)", latency.Format(w.P99))
		}
	}
	budget, cuts := 0.0, 0
	for _, t := range r.Targets {
		budget, cuts = max(budget, t.CPUBudget), cuts+t.BudgetCuts
	}
	if budget > 0 {
		fmt.Fprintf(&b, "; CPU budget %s cores per pod (lowered the pace %d time(s))", strconv.FormatFloat(budget, 'f', -1, 64), cuts)
	}
	if j := jitSummary(r.Targets); j != "" {
		b.WriteString("; " + j)
	}
	if m := meshSummary(r.Mesh, r.Targets); m != "" {
		b.WriteString("; " + m)
	}
	if n := len(r.Backoffs); n > 0 {
		worst := slices.MaxFunc(r.Backoffs, func(a, b Backoff) int { return cmp.Compare(a.StableP90, b.StableP90) })
		users := 0
		for _, bo := range r.Backoffs {
			if bo.Users {
				users++
			}
		}
		of := ""
		if users > 0 {
			of = fmt.Sprintf(", %d on the users' own latency (metrics)", users)
		}
		fmt.Fprintf(&b, "; the neighbour guard backed off %d time(s)%s (stable p90 up to %s, baseline %s; pace down to %s qps per pod)",
			n, of, latency.Format(worst.StableP90), latency.Format(worst.Baseline), formatQPS(slices.MinFunc(r.Backoffs, func(a, b Backoff) int { return cmp.Compare(a.PaceQPS, b.PaceQPS) }).PaceQPS))
	}
	return b.String()
}

// lastWarm says, for the summary, by which rule the last target to be warm
// was called warm (the one that ended the warm-up): "; the last warm, pod:
// on its own plateau: …"; "" when none says (all warmed by the gate).
func (r *Result) lastWarm() string {
	var last *TargetResult
	for i := range r.Targets {
		if t := &r.Targets[i]; t.Warm != "" && (last == nil || t.ConvergedAfter >= last.ConvergedAfter) {
			last = t
		}
	}
	if last == nil {
		return ""
	}
	if len(r.Targets) == 1 {
		return "; warm " + last.Warm
	}
	return fmt.Sprintf("; the last warm, %s: %s", last.Target.Name, last.Warm)
}
