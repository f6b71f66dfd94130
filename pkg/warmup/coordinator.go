package warmup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"fortio.org/fortio/periodic"
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
	// stop is the stopping rule's memory of the target (stopState).
	stop stopState
	// jit reads the pod's JIT signal (jit.go); nil: not read.
	jit *jitReader
	// lastWindow is when its latest window completed (the load's start
	// before the first): how long a yield has starved it (checkStarved).
	lastWindow time.Time
}

// coordinator owns the runners of one warm-up: it turns completed windows
// into WindowStats, judges convergence, reports progress and decides when to
// stop. Only its goroutine touches the states and the Result.
type coordinator struct {
	cfg   *Config
	opts  Options
	set   *requestSet
	seed  uint64
	start time.Time
	emit  func(Progress)
	res   *Result

	// reject: a converged but slower version fails the warm-up
	// (Config.RejectSlowerVersion, with stable pods to compare with).
	reject   bool
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
}

func (c *coordinator) run(parent, runCtx context.Context, targets []Target) error {
	// In-flight requests use their own context: a convergence stop lets them
	// finish (and counts them), a hard stop (cancel, deadline, failure)
	// cancels them.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(parent))
	defer cancelRequests()
	c.events = make(chan event, 256)
	// The JIT signal's reads end with the run: cancelled, then waited for.
	jitCtx, stopJIT := context.WithCancel(runCtx)
	defer func() {
		stopJIT()
		for _, st := range c.canary {
			st.jit.close()
		}
	}()

	var runners []*loadRunner
	abortAll := func() {
		for _, r := range runners {
			r.stop()
		}
	}
	for i, t := range targets {
		st := &targetState{res: &c.res.Targets[i], waiting: "no complete window yet"}
		st.rec = newRecorder(c.cfg.Window, c.cfg.MaxRequests, c.events)
		st.res.CPUBudget = c.cfg.cpuBudget(t)
		st.pacer = newPacer(c.cfg, st.res.CPUBudget)
		st.rec.pacer = st.pacer
		r, err := newLoadRunner(reqCtx, t, 0, st.pacer.pace, c.cfg.Connections, c.cfg.MaxRequests, c.cfg, c.set, c.seed, uint64(i), st.rec)
		if err != nil {
			abortAll()
			return err
		}
		st.runner = r
		st.rec.onCap = func() { r.stop() }
		if st.jit = c.cfg.newJITReader(jitCtx, t, st.rec.total.Load); st.jit != nil {
			st.stop.jit = &jitSignal{}
		}
		c.canary = append(c.canary, st)
		runners = append(runners, r)
	}
	if *c.cfg.NeighbourGuard && c.stableLoad {
		c.guard = newNeighbourGuard(c.cfg, false)
	}
	if *c.cfg.NeighbourGuard && c.opts.Neighbours != nil {
		c.usersGuard = newNeighbourGuard(c.cfg, true)
	}
	if c.stableLoad {
		c.stable = &TargetResult{Target: Target{Name: fmt.Sprintf("stable (%d pods)", len(c.opts.Stable))}}
		c.res.Stable = c.stable
		c.srec = newRecorder(c.cfg.Window, 0, c.events)
		if c.guard != nil {
			c.srec.look = guardLook
		}
		qps := c.cfg.StableQPS / float64(len(c.opts.Stable))
		for i, t := range c.opts.Stable {
			r, err := newLoadRunner(reqCtx, t, qps, nil, 1, 0, c.cfg, c.set, c.seed, uint64(1<<16+i), c.srec)
			if err != nil {
				abortAll()
				return err
			}
			c.sruns = append(c.sruns, r)
			runners = append(runners, r)
		}
	}
	for _, st := range c.canary {
		st.jit.kick() // the compile time before the first request
	}
	for _, r := range runners {
		go func() {
			results := r.run()
			c.events <- event{done: r, results: results}
		}()
	}
	if c.usersGuard != nil {
		pollCtx, stopPolling := context.WithCancel(runCtx)
		defer stopPolling()
		go c.pollNeighbours(pollCtx)
	}

	var yieldTimer, starvedLook <-chan time.Time
	var bound time.Duration
	if c.opts.Yield != nil && c.opts.Yield.Restore != nil {
		c.yield, c.res.Yield = yieldOn, &YieldResult{}
		bound = yieldBound(c.opts.Yield, c.cfg.Deadline.D())
		t := time.NewTimer(time.Until(c.start.Add(bound)))
		defer t.Stop()
		yieldTimer = t.C
		look := time.NewTicker(c.opts.Yield.stall() / 6)
		defer look.Stop()
		starvedLook = look.C
		now := time.Now()
		for _, st := range c.canary {
			st.lastWindow = now
		}
		// Run returns after a Restore it started has returned.
		defer func() {
			if c.restoreDone != nil {
				<-c.restoreDone
			}
		}()
	}

	running := len(runners)
	canaryRunning := len(c.canary)
	stopping, hardStopped := false, false
	var failure error
	// A hard stop sends no new request at once, gives requests in flight a
	// moment to finish (so they are counted as the server saw them), then
	// cuts the stragglers.
	hardStop := func() {
		if !hardStopped {
			time.AfterFunc(hardStopGrace, cancelRequests)
		}
		stopping, hardStopped = true, true
		abortAll()
	}
	ctxDone := runCtx.Done()
	for running > 0 {
		select {
		case <-ctxDone:
			ctxDone = nil
			switch {
			case parent.Err() != nil:
				failure = fmt.Errorf("warm-up stopped: %w", parent.Err())
				c.res.Reason = "stopped: " + parent.Err().Error()
			case !stopping && c.cfg.Converging():
				if accepted := c.acceptNearStable(); accepted != "" {
					c.res.Reason = fmt.Sprintf("deadline %s passed; %s", c.cfg.Deadline, accepted)
					break
				}
				c.res.Reason = fmt.Sprintf("deadline %s passed before every target converged: %s", c.cfg.Deadline, c.pendingTrends())
				failure = fmt.Errorf("%w: %s", ErrNotConverged, c.res.Reason)
			case !stopping:
				c.res.Reason = fmt.Sprintf("deadline %s reached", c.cfg.Deadline)
			}
			hardStop()
		case <-yieldTimer:
			yieldTimer = nil
			if !stopping {
				c.endYield(fmt.Sprintf("not warm within %s: %s", bound, c.pendingTrends()))
			}
		case now := <-starvedLook:
			if c.yield != yieldOn {
				starvedLook = nil
			} else if !stopping {
				c.checkStarved(now)
			}
		case <-c.restoring():
			c.onRestored()
		case ev := <-c.events:
			if ev.failing {
				if !stopping {
					c.res.Reason = c.failingReason(ev.rec, ev.failCode)
					failure = fmt.Errorf("%w: %s", ErrTargetFailing, c.res.Reason)
					hardStop()
				}
				continue
			}
			if ev.look != nil {
				if !stopping {
					c.onLook(ev.look, ev.users)
				}
				continue
			}
			if ev.done == nil {
				c.onWindow(ev)
				if c.rejected != "" && !stopping {
					c.res.Reason = c.rejected
					failure = fmt.Errorf("%w: %s", ErrSlowerVersion, c.rejected)
					hardStop()
					continue
				}
				if !stopping && c.cfg.Converging() && c.allConverged() {
					stopping = true
					c.res.Reason = fmt.Sprintf("all %d targets converged", len(c.canary))
					abortAll() // let in-flight requests finish: they are counted
				}
				continue
			}
			running--
			st := c.stateOf(ev.done)
			if st == nil {
				continue // a stable runner
			}
			st.done = true
			st.res.fortio = ev.results
			canaryRunning--
			if !st.res.Converged && !stopping && c.cfg.Converging() {
				why, near := c.cfg.nearStable(st.res.Windows, c.stableP99())
				if near {
					last := st.res.Windows[len(st.res.Windows)-1]
					st.res.Converged, st.res.NearStable = true, true
					st.res.ConvergedAfter, st.res.ConvergedWindow = last.Requests, last.Index
					st.waiting = "accepted near stable at maxRequests: " + why
					if c.allConverged() {
						stopping = true
						c.res.Reason = fmt.Sprintf("all %d targets converged; %s accepted near stable at maxRequests %d: %s", len(c.canary), st.res.Target, c.cfg.MaxRequests, why)
						abortAll()
					}
				} else {
					c.res.Reason = fmt.Sprintf("%s reached maxRequests %d without converging (%s); %s",
						st.res.Target, c.cfg.MaxRequests, st.waiting, trend(st.res.Windows, 6))
					failure = fmt.Errorf("%w: %s", ErrNotConverged, c.res.Reason)
					hardStop()
				}
			}
			if canaryRunning == 0 {
				for _, r := range c.sruns {
					r.stop()
				}
				if c.res.Reason == "" {
					c.res.Reason = fmt.Sprintf("maxRequests %d sent to every target", c.cfg.MaxRequests)
				}
			}
		}
	}
	c.finish()
	c.res.Converged = c.allConverged()
	if failure != nil {
		return failure
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

func (c *coordinator) onWindow(ev event) {
	w := computeWindow(ev.samples)
	w.Index, w.Requests = ev.index, ev.total
	p := Progress{Phase: PhaseLoad, Window: w}
	if ev.rec == c.srec {
		c.stable.Windows = append(c.stable.Windows, w)
		c.cfg.shedStable(c.stable.Windows, c.opts.KeepLatencies)
		p.Target, p.Stable, p.TargetConverged = "stable", true, true
	} else {
		for _, st := range c.canary {
			if st.rec != ev.rec {
				continue
			}
			st.res.Windows = append(st.res.Windows, w)
			st.lastWindow = time.Now()
			if st.jit != nil {
				st.stop.jit.readings = st.jit.appendNew(st.stop.jit.readings)
				st.jit.kick()
			}
			if !st.res.Converged {
				v := c.cfg.next(&st.stop, st.res.Windows, c.stableRef(), c.reject)
				st.waiting = v.why
				switch {
				case v.rejected == "" || c.rejected != "":
				case c.deferVerdict():
					// Slower while yielding its CPU is no verdict yet.
					c.endYield(fmt.Sprintf("%s %s", st.res.Target, v.rejected))
				default:
					c.rejected = fmt.Sprintf("%s %s: a slower version, rejected before any user request reached it", st.res.Target, v.rejected)
				}
				if !v.converged && c.yield == yieldOn && c.cfg.MaxRequests > 0 && 2*w.Requests >= c.cfg.MaxRequests {
					// The rest of maxRequests is for the judgement at full weight.
					c.endYield(fmt.Sprintf("%s: %d of maxRequests %d sent", st.res.Target, w.Requests, c.cfg.MaxRequests))
				}
				if v.converged {
					st.res.Settled = v.settled
					st.res.Converged, st.res.ConvergedAfter, st.res.ConvergedWindow = true, w.Requests, w.Index
					if c.cfg.Converging() {
						st.runner.stop()
					}
				}
			}
			c.shed(st.res.Windows)
			p.Target, p.TargetConverged, p.Waiting = st.res.Target.String(), st.res.Converged, st.waiting
			p.Pace = st.pacer.current()
		}
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

func (c *coordinator) stableP99() time.Duration { return c.stableRef().p99 }

// stableRef is what the canary is compared with (zero without stable).
func (c *coordinator) stableRef() stableRef {
	if c.stable == nil {
		return stableRef{}
	}
	return c.cfg.stableReference(c.stable.Windows)
}

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
		releasePool(tr.Windows)
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
		st.res.JIT = jitResult(st.jit, st.stop.jit)
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
