package warmup

import (
	"context"
	"fmt"
)

// startLoad builds a recorder, pacer and load runner for every canary
// target (and the stable pods, where they are loaded side by side), a
// rule.Pod per target, the neighbour guards, and starts the runners. On an
// error the runners built so far are stopped.
func (c *coordinator) startLoad(reqCtx, jitCtx context.Context, targets []Target) error {
	for i, t := range targets {
		if err := c.addTarget(reqCtx, jitCtx, i, t); err != nil {
			c.abortAll()
			return err
		}
	}
	if *c.cfg.NeighbourGuard && c.stableLoad {
		c.guard = newNeighbourGuard(c.cfg.Config, false)
	}
	if *c.cfg.NeighbourGuard && c.opts.Neighbours != nil {
		c.usersGuard = newNeighbourGuard(c.cfg.Config, true)
	}
	if c.stableLoad {
		if err := c.addStable(reqCtx); err != nil {
			c.abortAll()
			return err
		}
	}
	for _, st := range c.canary {
		st.jit.kick() // the compile time before the first request
	}
	c.running, c.canaryRunning = len(c.runners), len(c.canary)
	for _, r := range c.runners {
		go func() {
			results := r.run()
			c.events <- event{done: r, results: results}
		}()
	}
	return nil
}

// addTarget sets up canary target i: its recorder, pacer, runner, JIT
// reader and its state in the stopping rule.
func (c *coordinator) addTarget(reqCtx, jitCtx context.Context, i int, t Target) error {
	st := &targetState{res: &c.res.Targets[i], waiting: "no complete window yet"}
	st.rec = newRecorder(c.cfg.Window, c.cfg.MaxRequests, c.events)
	st.res.CPUBudget = c.cfg.cpuBudget(t)
	st.pacer = newPacer(c.cfg.Config, st.res.CPUBudget)
	st.rec.pacer = st.pacer
	r, err := newLoadRunner(reqCtx, t, 0, st.pacer.pace, c.cfg.Connections, c.cfg.MaxRequests, c.cfg, c.set, c.seed, uint64(i), st.rec)
	if err != nil {
		return err
	}
	st.runner = r
	st.rec.onCap = func() { r.stop() }
	st.jit = c.cfg.newJITReader(jitCtx, t, st.rec.total.Load)
	st.pod = c.rule.NewPod(st.jit != nil)
	c.canary = append(c.canary, st)
	c.runners = append(c.runners, r)
	return nil
}

// addStable sets up the stable pods' load: one recorder for the pool, a
// runner per pod at its share of StableQPS.
func (c *coordinator) addStable(reqCtx context.Context) error {
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
			return err
		}
		c.sruns = append(c.sruns, r)
		c.runners = append(c.runners, r)
	}
	return nil
}
