package warmup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"fortio.org/fortio/periodic"

	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// hardStopGrace is how long requests in flight may finish after a hard stop
// (cancel, deadline, failure) before they are cancelled.
const hardStopGrace = 500 * time.Millisecond

// event is what recorders and runners tell the coordinator: a completed
// window, or a runner that stopped.
type event struct {
	rec      *recorder
	samples  []sample // a completed window
	index    int
	total    int64
	failing  bool            // failFastStreak requests in a row failed
	failCode int             // the last failed answer's HTTP status (0: transport errors)
	look     []time.Duration // the neighbour guard's look at stable
	users    bool            // the look is the users' metrics (Options.Neighbours)

	done    *loadRunner // set when a runner's fortio run returned
	results periodic.RunnerResults
}

// targetState is the coordinator's view of one canary target.
type targetState struct {
	res     *TargetResult
	rec     *recorder
	runner  *loadRunner
	pacer   *pacer
	done    bool
	waiting string
	// pod is the stopping rule's state for the target (rule.Pod).
	pod *rule.Pod
	// jit reads the pod's JIT signal (jit.go); nil: not read. readings
	// counts the readings handed to pod so far.
	jit      *jitReader
	readings int
	// lastWindow is when its latest window completed (the load's start
	// before the first): how long a yield has starved it (checkStarved).
	lastWindow time.Time
}

// coordinator owns the runners of one warm-up. It is an event pump: it
// turns completed windows into WindowStats, feeds them (and the JIT's
// readings) to the stopping rule, acts on the rule's decisions (apply),
// reports progress and stops the load. Only its goroutine touches the
// states and the Result.
type coordinator struct {
	cfg   *session
	opts  Options
	set   *requestSet
	seed  uint64
	start time.Time
	emit  func(Progress)
	res   *Result

	// rule is the run's stopping rule (package rule), built once.
	rule     *rule.Rule
	rejected string // why, once a target was rejected
	// stableLoad: the stable pods are loaded side by side (compareToStable,
	// the rejection, or the neighbour guard with stable pods given).
	stableLoad bool
	// guard watches the stable probe, usersGuard the users' own latency
	// (Options.Neighbours); nil: not watched. Either one backs off: the
	// pace's cap is the lower of their ceilings.
	guard, usersGuard *neighbourGuard

	// yield is where Options.Yield stands; restoreDone is closed once the
	// Restore endYield started returned (nil before).
	yield       yieldPhase
	restoreDone chan struct{}

	events chan event
	canary []*targetState
	stable *TargetResult
	srec   *recorder
	sruns  []*loadRunner

	// runners are all the load's runners (canary and stable); running
	// counts those whose run has not returned yet, canaryRunning the
	// canary's.
	runners                []*loadRunner
	running, canaryRunning int
	// stopping: the load is ending, and no decision is acted on any more;
	// hardStopped: it ends by a hard stop (hardStop).
	stopping, hardStopped bool
	// failure is the run's error once it failed.
	failure error
	// cancelRequests cuts the requests in flight (hardStop).
	cancelRequests context.CancelFunc
}

func (c *coordinator) run(parent, runCtx context.Context, targets []Target) error {
	// In-flight requests use their own context: a convergence stop lets them
	// finish (and counts them), a hard stop (cancel, deadline, failure)
	// cancels them.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(parent))
	defer cancelRequests()
	c.cancelRequests = cancelRequests
	c.events = make(chan event, 256)
	// The JIT signal's reads end with the run: cancelled, then waited for.
	jitCtx, stopJIT := context.WithCancel(runCtx)
	defer func() {
		stopJIT()
		for _, st := range c.canary {
			st.jit.close()
		}
	}()
	if err := c.startLoad(reqCtx, jitCtx, targets); err != nil {
		return err
	}
	if c.usersGuard != nil {
		pollCtx, stopPolling := context.WithCancel(runCtx)
		defer stopPolling()
		go c.pollNeighbours(pollCtx)
	}
	clock := c.startYield()
	defer clock.stop()
	// Run returns after a Restore it started has returned.
	defer func() {
		if c.restoreDone != nil {
			<-c.restoreDone
		}
	}()
	c.pump(parent, runCtx, clock)
	c.finish()
	return c.outcome()
}

// pump hands every event to its handler until every runner has returned.
func (c *coordinator) pump(parent, runCtx context.Context, clock yieldClock) {
	ctxDone := runCtx.Done()
	for c.running > 0 {
		select {
		case <-ctxDone:
			ctxDone = nil
			c.onDeadline(parent)
		case <-clock.end:
			clock.end = nil
			if !c.stopping {
				c.endYield(fmt.Sprintf("not warm within %s: %s", clock.bound, c.pendingTrends()))
			}
		case now := <-clock.starved:
			if c.yield != yieldOn {
				clock.starved = nil
			} else if !c.stopping {
				c.checkStarved(now)
			}
		case <-c.restoring():
			c.onRestored()
		case ev := <-c.events:
			c.onEvent(ev)
		}
	}
}

// onEvent handles what a recorder or a runner said.
func (c *coordinator) onEvent(ev event) {
	switch {
	case ev.failing:
		if !c.stopping {
			c.fail(ErrTargetFailing, c.failingReason(ev.rec, ev.failCode))
		}
	case ev.look != nil:
		if !c.stopping {
			c.onLook(ev.look, ev.users)
		}
	case ev.done == nil:
		c.onWindow(ev)
	default:
		c.onRunnerDone(ev)
	}
}

// outcome is the run's error once the load stopped, and whether it
// converged.
func (c *coordinator) outcome() error {
	c.res.Converged = c.allConverged()
	if c.failure != nil {
		return c.failure
	}
	// Validate renders every template once, but a template may still fail
	// on some draws only (randInt over a range computed per request):
	// a target none of whose requests could even be sent was not warmed,
	// whatever untilConverged says.
	for _, st := range c.canary {
		if n := st.runner.renderFails.Load(); n > 0 && n == st.res.Requests {
			c.res.Converged = false
			c.res.Reason = fmt.Sprintf("every request to %s failed before it was sent: %s", st.res.Target, st.res.LastError)
			return fmt.Errorf("%w: %s", ErrTemplate, c.res.Reason)
		}
	}
	return nil
}

func (c *coordinator) stateOfRecorder(rec *recorder) *targetState {
	for _, st := range c.canary {
		if st.rec == rec {
			return st
		}
	}
	return nil
}

func (c *coordinator) stateOf(r *loadRunner) *targetState {
	for _, st := range c.canary {
		if st.runner == r {
			return st
		}
	}
	return nil
}

func (c *coordinator) allConverged() bool {
	for _, st := range c.canary {
		if !st.res.Converged {
			return false
		}
	}
	return true
}

// onWindow takes in a completed window: the stable pool's goes to the
// rule's reference, a target's to its rule.Pod (until it is warm), whose
// decision apply acts on.
func (c *coordinator) onWindow(ev event) {
	w := computeWindow(ev.samples)
	w.Index, w.Requests = ev.index, ev.total
	p := Progress{Phase: PhaseLoad, Window: w}
	if ev.rec == c.srec {
		c.rule.Stable(w)
		c.stable.Windows = append(c.stable.Windows, w)
		c.shed(c.stable.Windows)
		p.Target, p.Stable, p.TargetConverged = "stable", true, true
	} else if st := c.stateOfRecorder(ev.rec); st != nil {
		st.res.Windows = append(st.res.Windows, w)
		st.lastWindow = time.Now()
		c.feedJIT(st)
		if !st.res.Converged {
			c.apply(st, st.pod.Window(w), atWindow)
		}
		c.shed(st.res.Windows)
		p.Target, p.TargetConverged, p.Waiting, p.Warm = st.res.Target.String(), st.res.Converged, st.waiting, st.res.Warm
		p.Pace = st.pacer.current()
	}
	for _, st := range c.canary {
		p.Requests += st.rec.total.Load()
		if st.res.Converged {
			p.ConvergedTargets++
		}
	}
	p.StableP99 = c.stableP99()
	p.Backoffs = c.backoffCount()
	if cap := c.paceCap(); cap < c.cfg.QPS {
		p.PaceCap = cap
	}
	c.emit(p)
}

// feedJIT hands the rule the JIT readings taken since the last window and
// starts the next read (it answers during the next window).
func (c *coordinator) feedJIT(st *targetState) {
	if st.jit == nil {
		return
	}
	for _, rd := range st.jit.readingsFrom(st.readings) {
		st.pod.Reading(rd)
		st.readings++
	}
	st.jit.kick()
}

// pollNeighbours reads Options.Neighbours every guardPoll and hands each
// answer to the neighbour guard as a look; a failed read is skipped.
func (c *coordinator) pollNeighbours(ctx context.Context) {
	tick := time.NewTicker(guardPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l, err := c.opts.Neighbours.Latency(ctx)
		if err != nil {
			c.opts.Logger.Debug("warm-up neighbour guard: no reading", "error", err)
			continue
		}
		select {
		case c.events <- event{look: []time.Duration{l}, users: true}:
		case <-ctx.Done():
			return
		}
	}
}

// guards are the neighbour guards watching (none, one or both).
func (c *coordinator) guards() []*neighbourGuard {
	var gs []*neighbourGuard
	for _, g := range []*neighbourGuard{c.guard, c.usersGuard} {
		if g != nil {
			gs = append(gs, g)
		}
	}
	return gs
}

// paceCap is the cap on every target's pace: the lower of the guards'
// ceilings (Config.QPS when none watches).
func (c *coordinator) paceCap() float64 {
	cap := c.cfg.QPS
	for _, g := range c.guards() {
		cap = min(cap, g.ceiling)
	}
	return cap
}

func (c *coordinator) backoffCount() int {
	n := 0
	for _, g := range c.guards() {
		n += len(g.backoffs)
	}
	return n
}

// onLook hands one look at stable (the probe's, or the users' metrics) to
// its neighbour guard and applies and reports a change of the cap on the
// targets' pace.
func (c *coordinator) onLook(look []time.Duration, users bool) {
	g := c.guard
	if users {
		g = c.usersGuard
	}
	pace := 0.0
	for _, st := range c.canary {
		// A converged target's load stops, unless it is a fixed count.
		if !st.done && !(st.res.Converged && c.cfg.Converging()) {
			pace = max(pace, st.pacer.current())
		}
	}
	if pace == 0 {
		return // no canary load left: nothing to back off
	}
	_, changed, what := g.look(p90(look), pace, time.Since(c.start))
	if !changed {
		return
	}
	ceiling := c.paceCap()
	for _, st := range c.canary {
		st.pacer.setCeiling(ceiling)
	}
	c.opts.Logger.Info("warm-up neighbour guard", "action", what)
	p := Progress{Phase: PhaseLoad, Target: "stable", Stable: true, TargetConverged: true,
		Neighbours: what, Backoffs: c.backoffCount(), PaceCap: ceiling, StableP99: c.stableP99()}
	for _, st := range c.canary {
		p.Requests += st.rec.total.Load()
		if st.res.Converged {
			p.ConvergedTargets++
		}
	}
	c.emit(p)
}

// stableP99 is the p99 the canary is compared with (0 without stable).
func (c *coordinator) stableP99() time.Duration { return c.rule.StableP99() }

// failingReason says which target failed failFastStreak requests in a row,
// and how.
func (c *coordinator) failingReason(rec *recorder, code int) string {
	name, last := "", error(nil)
	if rec == c.srec {
		name = c.stable.Target.Name
		for _, r := range c.sruns {
			if err := r.lastErr.get(); err != nil {
				last = err
			}
		}
	}
	for _, st := range c.canary {
		if st.rec == rec {
			name, last = st.res.Target.String(), st.runner.lastErr.get()
		}
	}
	how := "no answer"
	switch {
	case code > 0:
		how = "last answer " + c.cfg.answerText(code)
		if last != nil && (c.cfg.isGRPC() || isMeshDenial(last)) {
			how += ": " + last.Error()
		}
	case last != nil:
		how = "last error: " + last.Error()
	}
	return fmt.Sprintf("%s: the last %d requests all failed (%s); check the port, the request paths and that the pod serves them", name, failFastStreak, how)
}

// pendingTrends describes every target that has not converged.
func (c *coordinator) pendingTrends() string {
	var parts []string
	for _, st := range c.canary {
		if !st.res.Converged {
			parts = append(parts, fmt.Sprintf("%s (%s): %s", st.res.Target, st.waiting, trend(st.res.Windows, 6)))
		}
	}
	return strings.Join(parts, "; ")
}

// finish runs after every runner stopped: it closes the partial windows and
// copies the counters into the Result.
func (c *coordinator) finish() {
	collect := func(tr *TargetResult, rec *recorder) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.cur) > 0 {
			w := computeWindow(rec.cur)
			w.Index, w.Requests, w.Partial = rec.windows+1, rec.total.Load(), true
			tr.Windows = append(tr.Windows, w)
			c.shed(tr.Windows)
			rec.cur = nil
		}
		tr.Requests, tr.Errors = rec.total.Load(), rec.errors
		tr.RetCodes = rec.codes
		tr.hist, tr.errHist = rec.hist, rec.errHist
	}
	for _, g := range c.guards() {
		c.res.Backoffs = append(c.res.Backoffs, g.backoffs...)
	}
	slices.SortFunc(c.res.Backoffs, func(a, b Backoff) int { return cmp.Compare(a.After, b.After) })
	for _, st := range c.canary {
		collect(st.res, st.rec)
		st.res.FullPaceAfter, st.res.PaceCuts, st.res.BudgetCuts = st.pacer.stats()
		st.res.JIT = jitResult(st.jit, st.pod.JIT())
		if err := st.runner.lastErr.get(); err != nil {
			st.res.LastError = err.Error()
		} else if st.rec.lastFailCode > 0 {
			st.res.LastError = c.cfg.answerText(st.rec.lastFailCode)
		}
	}
	if c.stable != nil {
		collect(c.stable, c.srec)
		for _, r := range c.sruns {
			if err := r.lastErr.get(); err != nil {
				c.stable.LastError = err.Error()
			}
		}
	}
}
