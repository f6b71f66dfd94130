package warmup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
)

func paceConfig(qps, start float64, conns int) *Config {
	cfg := Config{QPS: qps, StartQPS: start, Connections: conns}.WithDefaults()
	return &cfg
}

// feed hands the pacer n requests of latency l.
func feed(p *pacer, n int, l time.Duration) {
	for range n {
		p.observe(l)
	}
}

func TestPacerDoublesWhileThePodKeepsUp(t *testing.T) {
	p := newPacer(paceConfig(20, 0, 4), 0) // default start: 20 / 8
	if p.current() != 2.5 || p.pace.QPS() != 2.5 {
		t.Fatalf("starts at %g (load pace %g), want qps/8 = 2.5", p.current(), p.pace.QPS())
	}
	var rates []float64
	for range 5 {
		feed(p, paceStepRequests, 5*time.Millisecond)
		rates = append(rates, p.current())
	}
	if want := []float64{5, 10, 20, 20, 20}; !slices.Equal(rates, want) {
		t.Errorf("pace after each step of a pod at 5 ms: %v, want %v", rates, want)
	}
	if full, cuts, _ := p.stats(); full != 3*paceStepRequests || cuts != 0 {
		t.Errorf("full pace after %d requests (%d cuts), want after %d", full, cuts, 3*paceStepRequests)
	}
	// At full pace the ramp holds, even through a jump in latency: windows
	// at one pace are comparable; stable's harm is the guard's to judge.
	feed(p, 3*paceStepRequests, 50*time.Millisecond)
	if _, cuts, _ := p.stats(); p.current() != 20 || cuts != 0 {
		t.Errorf("pace %g (%d cuts) after a jump at full pace, want held at 20", p.current(), cuts)
	}
}

func TestPacerHoldsWhenRequestsWouldQueue(t *testing.T) {
	// A cold pod answering in 400 ms: 4 connections carry at most 10 qps,
	// 8 with headroom. The ramp climbs to that, not to qps.
	p := newPacer(paceConfig(20, 2, 4), 0)
	for range 5 {
		feed(p, paceStepRequests, 400*time.Millisecond)
	}
	if got := p.current(); got < 7 || got > 8.01 {
		t.Errorf("pace %g for a pod at 400 ms with 4 connections, want 8 (0.8 × 4 / 0.4 s)", got)
	}
	// Warmer, it may go faster.
	feed(p, paceStepRequests, 100*time.Millisecond)
	if got := p.current(); got != 16 {
		t.Errorf("pace %g once the pod answers in 100 ms, want 16 (double, under 0.8 × 4 / 0.1 s = 32)", got)
	}
}

func TestPacerHalvesOnALatencyJump(t *testing.T) {
	p := newPacer(paceConfig(400, 50, 4), 0)
	feed(p, paceStepRequests, time.Millisecond) // 50 → 100
	feed(p, paceStepRequests, time.Millisecond) // 100 → 200
	if p.current() != 200 {
		t.Fatalf("pace %g, want 200", p.current())
	}
	feed(p, paceStepRequests, 10*time.Millisecond) // a jump: halve
	if got := p.current(); got != 100 {
		t.Errorf("pace %g after the median jumped 1 → 10 ms, want halved to 100", got)
	}
	feed(p, paceStepRequests, 10*time.Millisecond) // still 10× the best: halve again
	feed(p, paceStepRequests, 10*time.Millisecond)
	if got := p.current(); got != 50 {
		t.Errorf("pace %g after more slow steps, want the floor startQPS 50", got)
	}
	if _, cuts, _ := p.stats(); cuts != 3 {
		t.Errorf("%d cuts, want 3", cuts)
	}
	// Slower for good: after paceRefSteps slow steps, 10 ms is the level
	// the pod is judged by, and the ramp climbs again.
	feed(p, paceStepRequests, 10*time.Millisecond)
	if got := p.current(); got != 100 {
		t.Errorf("pace %g once 10 ms was the pod's level for %d steps, want raised to 100", got, paceRefSteps)
	}
	// Latency creeping up (1.25–2× the best) holds the pace.
	q := newPacer(paceConfig(400, 50, 4), 0)
	feed(q, paceStepRequests, 10*time.Millisecond) // 50 → 100
	feed(q, paceStepRequests, 15*time.Millisecond)
	if got := q.current(); got != 100 {
		t.Errorf("pace %g after the median rose 10 → 15 ms, want held at 100", got)
	}
	// A rise under paceJumpFloor is noise, not a jump.
	r := newPacer(paceConfig(400, 50, 4), 0)
	feed(r, paceStepRequests, 200*time.Microsecond)
	feed(r, paceStepRequests, time.Millisecond)
	if got := r.current(); got != 200 {
		t.Errorf("pace %g after 0.2 → 1 ms, want raised to 200 (noise on a fast service)", got)
	}
}

func TestPacerCeiling(t *testing.T) {
	p := newPacer(paceConfig(100, 10, 4), 0)
	feed(p, 4*paceStepRequests, time.Millisecond)
	if p.current() != 100 {
		t.Fatalf("pace %g, want 100", p.current())
	}
	p.setCeiling(25)
	if p.current() != 25 || p.pace.QPS() != 25 {
		t.Errorf("pace %g (load %g) under a ceiling of 25", p.current(), p.pace.QPS())
	}
	feed(p, 3*paceStepRequests, time.Millisecond)
	if p.current() != 25 {
		t.Errorf("pace %g climbed over the ceiling 25", p.current())
	}
	p.setCeiling(5) // below startQPS: the floor wins
	if p.current() != 10 {
		t.Errorf("pace %g under a ceiling below startQPS 10, want 10", p.current())
	}
	p.setCeiling(100)
	feed(p, paceStepRequests, time.Millisecond)
	if p.current() != 20 {
		t.Errorf("pace %g one step after the ceiling was lifted, want 20: the ramp climbs back, no jump to full", p.current())
	}
}

func TestNeighbourGuard(t *testing.T) {
	// From the second look on: the first look is already taken while
	// warming, so the guard may not wait for more.
	early := newNeighbourGuard(paceConfig(20, 2.5, 4), false)
	early.look(2*time.Millisecond, 20, 0)
	if _, changed, _ := early.look(30*time.Millisecond, 20, 0); !changed {
		t.Error("no back-off at the second look, 2 → 30 ms")
	}

	g := newNeighbourGuard(paceConfig(20, 2.5, 4), false)
	for _, p := range []time.Duration{4, 6, 5} { // baseline: median 5 ms of the three quietest
		if _, changed, _ := g.look(p*time.Millisecond, 20, 0); changed {
			t.Fatal("changed the cap while measuring the baseline")
		}
	}
	if g.baseline != 5*time.Millisecond || g.line() != 8*time.Millisecond {
		t.Fatalf("baseline %s, line %s; want 5ms and 8ms (baseline + neighbourFloor 3ms > 1.5 × 5ms)", g.baseline, g.line())
	}
	if _, changed, _ := g.look(7900*time.Microsecond, 20, 0); changed {
		t.Error("backed off under the line")
	}
	ceiling, changed, what := g.look(45*time.Millisecond, 20, time.Second)
	if !changed || ceiling != 10 || !strings.Contains(what, "stable p90 45.0ms above 8.00ms") || !strings.Contains(what, "halved to 10 qps per pod (back-off 1)") {
		t.Errorf("stable at 45 ms: cap %g changed %v %q, want halved to 10", ceiling, changed, what)
	}
	// Held down while stable stays high, to startQPS at the least.
	g.look(45*time.Millisecond, 10, 2*time.Second)
	g.look(45*time.Millisecond, 5, 3*time.Second)
	if ceiling, changed, _ := g.look(45*time.Millisecond, 2.5, 4*time.Second); changed || ceiling != 2.5 {
		t.Errorf("cap %g (changed %v) at the floor, want held at startQPS 2.5 without a new back-off", ceiling, changed)
	}
	if len(g.backoffs) != 3 || g.backoffs[0].StableP90 != 45*time.Millisecond || g.backoffs[0].Baseline != 5*time.Millisecond {
		t.Errorf("back-offs %+v, want 3 (10, 5, 2.5 qps)", g.backoffs)
	}
	// Recovery: two good looks in a row double the cap, until it is lifted.
	var caps []float64
	for range 8 {
		if ceiling, changed, _ := g.look(5*time.Millisecond, 2.5, 5*time.Second); changed {
			caps = append(caps, ceiling)
		}
	}
	if want := []float64{5, 10, 20}; !slices.Equal(caps, want) {
		t.Errorf("caps while stable recovered: %v, want %v", caps, want)
	}
}

func TestP90(t *testing.T) {
	var ls []time.Duration
	for i := 1; i <= 20; i++ {
		ls = append(ls, time.Duration(21-i)*time.Millisecond)
	}
	if got := p90(ls); got != 18*time.Millisecond {
		t.Errorf("p90 of 1..20 ms = %s, want 18ms (nearest rank)", got)
	}
}

// arrivals records when a test server's load requests arrive.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) add() time.Time {
	now := time.Now()
	a.mu.Lock()
	a.at = append(a.at, now)
	a.mu.Unlock()
	return now
}

// rate counts arrivals in the last d before now.
func (a *arrivals) rate(now time.Time, d time.Duration) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for i := len(a.at) - 1; i >= 0 && now.Sub(a.at[i]) < d; i-- {
		n++
	}
	return float64(n) / d.Seconds()
}

func (a *arrivals) first(n int) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[n-1].Sub(a.at[0])
}

func TestPaceStartsLowAndReachesQPS(t *testing.T) {
	skipLongLoad(t, "a pace ramped from its start to qps")
	arr := &arrivals{}
	srv := newTestServer(t, func(int64, bool) time.Duration { arr.add(); return time.Millisecond })
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS = 400, 20
	cfg.MinRequests = 500
	var paces []float64
	res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{OnProgress: func(p Progress) {
		if p.Target != "" {
			paces = append(paces, p.Pace)
		}
	}})
	if err != nil {
		t.Fatalf("warm-up failed: %v\n%s", err, table(res))
	}
	// The first 10 requests at 20 qps take at least 9 intervals of 50 ms
	// (at 400 qps: 22 ms), however busy the machine.
	if took := arr.first(10); took < 400*time.Millisecond {
		t.Errorf("the first 10 requests took %s: not started at startQPS 20", took)
	}
	tr := res.Targets[0]
	if tr.FullPaceAfter == 0 || slices.Max(paces) != 400 {
		t.Fatalf("the pace never reached qps 400 on a healthy pod: full pace after %d requests, paces per window %v\n%s", tr.FullPaceAfter, paces, table(res))
	}
	// 20 → 40 → 80 → 160 → 320 → 400: five steps, unless noise on a busy
	// machine cut the pace on the way.
	if tr.FullPaceAfter > int64(5*paceStepRequests)*4 {
		t.Errorf("full pace only after %d requests (%d cuts)", tr.FullPaceAfter, tr.PaceCuts)
	}
	t.Logf("full pace after %d requests, %d cuts, paces per window %v", tr.FullPaceAfter, tr.PaceCuts, paces)
}

// A pod that slows down above 150 qps (its CPU saturates) is kept near
// what it can take: the ramp halves the pace whenever latency jumps, and
// never reaches qps.
func TestPaceBacksOffWhenThePodSaturates(t *testing.T) {
	skipLongLoad(t, "a pod loaded past its capacity")
	arr := &arrivals{}
	saturating := func(int64, bool) time.Duration {
		if now := arr.add(); arr.rate(now, 100*time.Millisecond) > 150 {
			return 10 * time.Millisecond
		}
		return time.Millisecond
	}
	srv := newTestServer(t, saturating)
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS = 1000, 50
	cfg.MinRequests, cfg.MaxRequests = 600, 600
	off := false
	cfg.UntilConverged = &off
	res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{})
	if err != nil {
		t.Fatalf("warm-up failed: %v\n%s", err, table(res))
	}
	tr := res.Targets[0]
	if tr.PaceCuts == 0 || tr.FullPaceAfter != 0 {
		t.Errorf("a pod saturating above 150 qps: %d cuts, full pace (1000) after %d requests; want cuts and never full pace\n%s", tr.PaceCuts, tr.FullPaceAfter, table(res))
	}
	t.Logf("%d cuts", tr.PaceCuts)
}

// Cancelling a warm-up stops it at once, even while its connections wait
// for a slow turn.
func TestCancelStopsLoadPromptlyAtASlowPace(t *testing.T) {
	srv := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS = 200, 0.5 // a turn every 2 s
	cfg.MinRequests, cfg.MaxRequests = 1_000_000, 1_000_000
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan time.Time, 1)
	go func() {
		for deadline := time.Now().Add(10 * time.Second); srv.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // into the 2 s wait for the next turn
		cancelled <- time.Now()
		cancel()
	}()
	res, err := Run(ctx, cfg, []Target{target(srv)}, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(<-cancelled); took > 800*time.Millisecond {
		t.Errorf("Run returned %s after cancel", took)
	}
	if res.Requests() != srv.Load() {
		t.Errorf("danki counted %d, server served %d", res.Requests(), srv.Load())
	}
}

// The ramp does not cost requests: a pod that warms per request converges
// after as many requests with the ramp as at full pace from the start.
func TestPaceRampConvergesAfterAsManyRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("six warm-ups")
	}
	median := func(startQPS float64) int64 {
		var got []int64
		var took []time.Duration
		for range 3 {
			srv := newTestServer(t, testutil.Decaying(2*time.Millisecond, 30*time.Millisecond, 50))
			cfg := fastConfig()
			cfg.QPS, cfg.StartQPS = 500, startQPS
			res, err := Run(context.Background(), cfg, []Target{target(srv)}, Options{})
			if err != nil {
				t.Fatalf("startQPS %g: %v\n%s", startQPS, err, table(res))
			}
			got = append(got, res.Targets[0].ConvergedAfter)
			took = append(took, res.Elapsed.Round(10*time.Millisecond))
		}
		t.Logf("startQPS %g: converged after %v requests in %v", startQPS, got, took)
		slices.Sort(got)
		return got[1]
	}
	ramp, full := median(500.0/8), median(500)
	if ramp > full*3/2+int64(3*fastConfig().Window) {
		t.Errorf("with the ramp converged after %d requests (median), at full pace %d", ramp, full)
	}
}

// fakeSignal is a NeighbourSignal whose latency a test sets.
type fakeSignal struct {
	latency atomic.Int64
	reads   atomic.Int64
}

func (f *fakeSignal) Latency(context.Context) (time.Duration, error) {
	f.reads.Add(1)
	return time.Duration(f.latency.Load()), nil
}

// guardOnSignal warms a flat canary (with the stable pods given) while a
// fake users' signal reads 2 ms, then 30 ms, until the guard halves the
// pace; it returns the result and the first back-off's message.
func guardOnSignal(t *testing.T, stable []Target) (*Result, string) {
	t.Helper()
	defer func(d time.Duration) { guardPoll = d }(guardPoll)
	guardPoll = 50 * time.Millisecond
	signal := &fakeSignal{}
	signal.latency.Store(int64(2 * time.Millisecond))
	canary := newTestServer(t, testutil.Flat(time.Millisecond))
	cfg := fastConfig()
	cfg.QPS, cfg.StartQPS = 200, 25
	off := false
	cfg.UntilConverged = &off
	cfg.MaxRequests = 1_000_000
	cfg.Deadline = config.Duration(30 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var message atomic.Value
	done := make(chan *Result, 1)
	go func() {
		res, _ := Run(ctx, cfg, []Target{target(canary)}, Options{Stable: stable, Neighbours: signal, OnProgress: func(p Progress) {
			if strings.Contains(p.Neighbours, "halved") {
				message.CompareAndSwap(nil, p.Neighbours)
			}
		}})
		done <- res
	}()
	testutil.WaitFor(t, 10*time.Second, func() bool { return signal.reads.Load() >= 5 }) // the baseline: 2 ms
	signal.latency.Store(int64(30 * time.Millisecond))
	testutil.WaitFor(t, 10*time.Second, func() bool { return message.Load() != nil })
	cancel()
	return <-done, message.Load().(string)
}

// Given the users' own latency (Options.Neighbours), the guard reads it:
// no stable pods needed.
func TestNeighbourGuardReadsANeighbourSignal(t *testing.T) {
	res, _ := guardOnSignal(t, nil)
	if res.Stable != nil || len(res.Backoffs) == 0 || res.Backoffs[0].StableP90 != 30*time.Millisecond || res.Backoffs[0].Baseline != 2*time.Millisecond {
		t.Errorf("stable probe %v, back-offs %+v; want none and a back-off at 30 ms over a 2 ms baseline", res.Stable, res.Backoffs)
	}
}

// With stable pods and the users' metrics both watched, a rise the probe
// does not see (the users' latency only) backs off, and says so.
func TestNeighbourGuardWatchesUsersBesideTheProbe(t *testing.T) {
	res, msg := guardOnSignal(t, []Target{target(newTestServer(t, testutil.Flat(time.Millisecond)))})
	if res.Stable == nil || res.Stable.Requests == 0 {
		t.Fatalf("the stable probe did not run beside the users' metrics: %+v", res.Stable)
	}
	var users []Backoff
	for _, b := range res.Backoffs {
		if b.Users {
			users = append(users, b)
		}
	}
	if len(users) == 0 || users[0].StableP90 != 30*time.Millisecond || users[0].Baseline != 2*time.Millisecond {
		t.Fatalf("back-offs %+v: want one on the users' 30 ms over their 2 ms baseline", res.Backoffs)
	}
	if !strings.HasPrefix(msg, "users' p90 on stable (metrics) 30.0ms above") {
		t.Fatalf("guard message %q", msg)
	}
	if !strings.Contains(res.Summary(), "on the users' own latency (metrics)") {
		t.Fatalf("summary %q does not say the back-offs came from the users' metrics", res.Summary())
	}
}

// The baseline comes from the first guardBaselineSpan looks and then holds:
// a quieter look later (the noise's low extreme) does not lower the line
// into the noise.
func TestNeighbourGuardBaselineHolds(t *testing.T) {
	g := newNeighbourGuard(paceConfig(20, 2.5, 4), false)
	for i := range guardBaselineSpan {
		g.look(time.Duration(10+i%3)*time.Millisecond, 20, 0) // 10, 11, 12 ms …
	}
	if g.baseline != 10*time.Millisecond {
		t.Fatalf("baseline %s after the first %d looks, want 10ms (the median of 10, 10, 10)", g.baseline, guardBaselineSpan)
	}
	line := g.line()
	for range 50 {
		g.look(5*time.Millisecond, 20, time.Minute) // quieter than ever, long after
	}
	if g.baseline != 10*time.Millisecond || g.line() != line {
		t.Errorf("baseline %s, line %s after later quiet looks; want held at 10ms, %s", g.baseline, g.line(), line)
	}
	if _, changed, _ := g.look(14*time.Millisecond, 20, time.Minute); changed {
		t.Errorf("backed off at 14 ms under the held line %s", line)
	}
	if _, changed, _ := g.look(30*time.Millisecond, 20, time.Minute); !changed {
		t.Errorf("no back-off at 30 ms above the held line %s", line)
	}
}

// The CPU budget keeps rate × mean latency within its cores: a cold pod
// is paced down to it (below startQPS too), a warm one climbs back as its
// latency falls, and at full pace a slowdown still brings the pace down.
func TestPacerStaysWithinTheCPUBudget(t *testing.T) {
	p := newPacer(paceConfig(100, 20, 4), 0.25)
	feed(p, paceStepRequests, 100*time.Millisecond) // 20 qps × 0.1 s = 2 cores
	if got := p.current(); got != 2.5 {
		t.Fatalf("pace %g after a step at 100 ms, want 0.25 cores / 0.1 s = 2.5 (below startQPS 20)", got)
	}
	feed(p, paceStepRequests, 100*time.Millisecond)
	if got := p.current(); got != 2.5 {
		t.Errorf("pace %g at the budget's limit, want held at 2.5", got)
	}
	var rates []float64
	for _, l := range []time.Duration{50, 20, 5, 2, 2} {
		feed(p, paceStepRequests, l*time.Millisecond)
		rates = append(rates, p.current())
	}
	// Doubling, capped by 0.25 / latency: 5 (≤ 5), 10 (≤ 12.5), 20 (≤ 50),
	// 40 (≤ 125), 80.
	if want := []float64{5, 10, 20, 40, 80}; !slices.Equal(rates, want) {
		t.Errorf("paces as the pod warms (50, 20, 5, 2, 2 ms): %v, want %v", rates, want)
	}
	feed(p, paceStepRequests, 2*time.Millisecond)
	if p.current() != 100 {
		t.Fatalf("pace %g, want full (100 qps × 2 ms = 0.2 cores)", p.current())
	}
	feed(p, paceStepRequests, 10*time.Millisecond) // 1 core at full pace
	if _, _, budgetCuts := p.stats(); p.current() != 25 || budgetCuts != 2 {
		t.Errorf("pace %g (%d budget cuts) after a slowdown to 10 ms at full pace, want 25 (2 cuts)", p.current(), budgetCuts)
	}
	feed(p, paceStepRequests, 30*time.Second)
	if got := p.current(); got != paceBudgetFloor {
		t.Errorf("pace %g for 30 s requests, want the floor %g", got, paceBudgetFloor)
	}

	none := newPacer(paceConfig(100, 20, 4), 0)
	feed(none, paceStepRequests, 100*time.Millisecond)
	if got := none.current(); got != 32 {
		t.Errorf("pace %g without a budget after a step at 100 ms, want 32 (4 connections at 80 %%: 2.6 cores)", got)
	}
}

// A pod starved while it yielded its CPU drove the CPU budget's pace down
// to its floor (seconds per request); once its CPU is back (restart) the
// ramp starts again from startQPS on what it measures now.
func TestPacerRestartForgetsAStarvedPod(t *testing.T) {
	p := newPacer(paceConfig(60, 7.5, 4), 0.25)
	feed(p, 2*paceStepRequests, 5*time.Second)
	if p.current() != paceBudgetFloor {
		t.Fatalf("pace %g after steps of 5 s requests under a budget of 0.25 cores, want the floor %g", p.current(), paceBudgetFloor)
	}
	p.restart()
	if p.current() != 7.5 || p.pace.QPS() != 7.5 {
		t.Fatalf("pace %g (load %g) after restart, want startQPS 7.5", p.current(), p.pace.QPS())
	}
	feed(p, paceStepRequests, 5*time.Millisecond)
	if p.current() != 15 {
		t.Errorf("pace %g one step of 5 ms requests after restart, want 15: the ramp climbs on what it measures now", p.current())
	}
}
