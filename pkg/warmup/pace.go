package warmup

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/load"
)

// The pace ramp (Config.StartQPS): its constants need no tuning per
// workload, as they only decide how often and how far the pace moves.
const (
	// paceStepRequests is how many requests the ramp looks at before it
	// moves the pace (at least two per connection): a median of ten is
	// robust to a few slow requests, and at the default start of 2.5 qps a
	// step takes 4 s, at full pace half a second.
	paceStepRequests = 10
	// paceRefSteps: a step's median latency is compared with the best
	// median of the steps before (up to this many), so a pod that got
	// slower for good is judged against its new level after a while.
	paceRefSteps = 3
	// paceJumpFloor: a rise in median latency smaller than this never
	// counts (scheduler noise on a sub-millisecond service).
	paceJumpFloor = 2 * time.Millisecond
	// paceHeadroom is the share of the connections that rate × mean
	// latency (Little's law: requests in flight) may fill: beyond it,
	// requests would wait for a free connection, so a faster pace would
	// not be sent anyway and only press on a pod that does not keep up.
	paceHeadroom = 0.8
	// paceBudgetFloor is the slowest pace the CPU budget may set: one
	// request every 10 s still warms a pod whose cold requests take
	// seconds, and the deadline judges one that never gets faster.
	paceBudgetFloor = 0.1
)

// pacer ramps the pace of one target's warm-up: it starts at StartQPS and,
// after every step of requests, doubles the pace while the pod keeps up
// (its median latency is not rising, and the requests in flight at the
// next pace would fit in the connections), holds it when latency creeps
// up, and halves it when the median jumps to twice the best recent step's.
// The neighbour guard caps it (setCeiling), and so does the pod's CPU
// budget (Config.CPUBudget): rate × mean latency, the cores the warm-up's
// requests keep busy, stays within it at every step, even below StartQPS
// and at full pace. Requests are counted, not timed: the ramp moves as
// fast as the pod answers.
type pacer struct {
	pace   *load.Pace
	conns  int
	full   float64 // Config.QPS
	floor  float64 // Config.StartQPS
	budget float64 // cores; 0: no CPU budget
	step   int     // requests per step

	mu       sync.Mutex
	rate     float64         // the pace now, ≤ ceiling
	ceiling  float64         // the neighbour guard's cap; full when not backing off
	cur      []time.Duration // this step's latencies
	medians  []time.Duration // the latest steps' medians, oldest first
	requests int64
	// fullAfter is the request count at which the pace first reached full
	// (0: not yet); cuts counts halvings for a latency jump.
	fullAfter int64
	cuts      int
	// budgetCuts counts the steps at which the CPU budget lowered the pace.
	budgetCuts int
}

// newPacer ramps one target's pace; budget is its CPU budget in cores (0:
// none).
func newPacer(cfg *Config, budget float64) *pacer {
	p := &pacer{
		conns:   cfg.Connections,
		full:    cfg.QPS,
		floor:   cfg.StartQPS,
		budget:  budget,
		step:    max(paceStepRequests, 2*cfg.Connections),
		rate:    cfg.StartQPS,
		ceiling: cfg.QPS,
	}
	p.pace = load.NewPace(p.rate)
	if p.rate >= p.full {
		p.fullAfter = 1 // no ramp: at full pace from the first request
	}
	return p
}

// observe adds one completed request (called on the request's goroutine);
// after every step it moves the pace.
func (p *pacer) observe(l time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	p.cur = append(p.cur, l)
	if len(p.cur) < p.step {
		return
	}
	p.decide(p.cur)
	p.cur = p.cur[:0]
}

// decide moves the pace after one step of latencies. Once at full pace it
// holds: a CPU-bound pod answers more slowly at a higher pace, so windows
// measured at one pace are what the stopping rule can compare, and a later
// rise in latency that harms the neighbours is the neighbour guard's to
// act on.
func (p *pacer) decide(step []time.Duration) {
	sum := latency.Summarize(step, 0) // sorts step in place: the caller starts a new step after
	med, mean := sum.P50, sum.Mean
	var ref time.Duration
	if len(p.medians) > 0 {
		ref = slices.Min(p.medians)
	}
	p.medians = append(p.medians, med)
	if len(p.medians) > paceRefSteps {
		p.medians = p.medians[1:]
	}
	if limit := p.budgetLimit(mean); p.rate > limit {
		// The warm-up's requests keep more cores busy than the pod's
		// budget: whatever its latency does, the pace comes down to it.
		p.budgetCuts++
		p.set(limit)
		return
	}
	if p.rate >= p.full {
		return
	}
	switch {
	case ref > 0 && med > 2*ref && med-ref > paceJumpFloor:
		// The latency jumped: the pod (or its node) is overloaded.
		p.cuts++
		p.set(max(p.floor, p.rate/2))
	case ref > 0 && med > ref*5/4 && med-ref > paceJumpFloor:
		// Getting worse: hold.
	default:
		next := min(p.ceiling, 2*p.rate, p.budgetLimit(mean))
		if mean > 0 {
			next = min(next, paceHeadroom*float64(p.conns)/mean.Seconds())
		}
		if next > p.rate {
			p.set(next)
		}
	}
}

// budgetLimit is the fastest pace whose requests keep at most the CPU
// budget's cores busy (Little's law: rate × mean latency is the requests
// in flight; a cold request, interpreted code and class loading, keeps a
// core busy for about its latency, so this errs on the gentle side for a
// pod that waits on I/O). +Inf without a budget or a latency.
func (p *pacer) budgetLimit(mean time.Duration) float64 {
	if p.budget <= 0 || mean <= 0 {
		return math.Inf(1)
	}
	return max(paceBudgetFloor, p.budget/mean.Seconds())
}

func (p *pacer) set(rate float64) {
	p.rate = rate
	p.pace.Set(rate)
	if rate >= p.full && p.fullAfter == 0 {
		p.fullAfter = p.requests
	}
}

// setCeiling caps the pace (the neighbour guard); the ramp climbs back on
// its own once the cap is raised.
func (p *pacer) setCeiling(qps float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ceiling = qps
	if p.rate > qps {
		p.set(max(p.floor, qps))
	}
}

// restart forgets the steps measured so far and puts a pace below the
// ramp's start back at the start: the
// pod's CPU came back (Options.Yield), and what it measured starved — a
// cold request taking seconds, the CPU budget's pace cut to its floor of
// paceBudgetFloor — says nothing of its pace at full weight. At 0.1 qps a
// step of 10 requests took the lab 100 s.
func (p *pacer) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.medians = p.cur[:0], nil
	if p.rate < p.floor {
		p.set(p.floor) // as setCeiling: no cap goes below the start
	}
}

// current returns the pace now.
func (p *pacer) current() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

func (p *pacer) stats() (fullAfter int64, cuts, budgetCuts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fullAfter, p.cuts, p.budgetCuts
}

// The neighbour guard (Config.NeighbourGuard).
const (
	// guardLook is how many stable requests make one look at the users'
	// latency on stable: 2 s at the default stableQPS of 10, so the guard
	// reacts within seconds, while a window of 100 takes 10 s.
	guardLook = 20
	// guardBaselineLooks: stable's baseline is the median of its quietest
	// looks' p90s so far (the lowest of one or two at first). The stable
	// probe starts with the warm-up, so no look is from before it: the
	// quietest are the closest to the users' steady state, and a median of
	// three keeps one unusually quick look from setting the bar.
	guardBaselineLooks = 3
	// guardBaselineSpan: the baseline is taken from the first this many
	// looks (20 s at the default stableQPS) and then held. Over a long
	// warm-up the quietest looks ever seen are the noise's own low
	// extremes: a baseline from all of them sinks as the warm-up goes on
	// until the line is inside the noise (measured in the lab: 9.5 → 8.5 ms
	// over six minutes, then six back-offs in a minute on noise alone, the
	// pace held at its floor and the deadline missed).
	guardBaselineSpan = 10
	// guardRecoverLooks: looks in a row under the line before the cap is
	// raised again.
	guardRecoverLooks = 2
)

// guardPoll is how often the neighbour guard reads Options.Neighbours (a
// variable for tests).
var guardPoll = 2 * time.Second

// NeighbourSignal is a source of the users' own latency on stable, for the
// neighbour guard: the latency gate's metrics source (analysis.StableTail:
// stable's p90 in Prometheus over the last seconds). It is watched beside
// the stable probe, each with its own baseline; either one backs off.
type NeighbourSignal interface {
	// Latency returns the users' tail latency on stable now, over a short
	// recent range.
	Latency(ctx context.Context) (time.Duration, error)
}

// Backoff is one time the neighbour guard lowered the warm-up's pace
// because the users' latency on stable rose.
type Backoff struct {
	// After is the time since the warm-up started.
	After time.Duration `json:"after"`
	// StableP90 is the p90 of the look that backed off; Baseline is
	// stable's baseline p90 then (the median of its quietest looks).
	StableP90 time.Duration `json:"stableP90"`
	Baseline  time.Duration `json:"baseline"`
	// PaceQPS is the cap on every target's pace after the back-off.
	PaceQPS float64 `json:"paceQPS"`
	// Users: the back-off came from the users' own latency
	// (Options.Neighbours), not the stable probe.
	Users bool `json:"users,omitempty"`
}

// neighbourGuard watches stable's latency while warming and lowers the
// cap on the warm-up's pace when it rises above its baseline (see
// Config.NeighbourGuard). Only the coordinator's goroutine uses it.
type neighbourGuard struct {
	// users: this guard watches Options.Neighbours (the users' metrics),
	// not the stable probe.
	users       bool
	ratio       float64
	floor       time.Duration
	full, least float64 // Config.QPS, Config.StartQPS

	quiet    []time.Duration // the quietest looks' p90s so far, ascending
	looks    int             // looks remembered (the baseline holds after guardBaselineSpan)
	baseline time.Duration
	ceiling  float64
	okLooks  int
	backoffs []Backoff
}

func newNeighbourGuard(cfg *Config, users bool) *neighbourGuard {
	return &neighbourGuard{users: users, ratio: cfg.NeighbourRatio, floor: cfg.NeighbourFloor.D(), full: cfg.QPS, least: cfg.StartQPS, ceiling: cfg.QPS}
}

// subject names what the guard watches, in its messages.
func (g *neighbourGuard) subject() string {
	if g.users {
		return "users' p90 on stable (metrics)"
	}
	return "stable p90"
}

// line is the p90 above which stable counts as harmed.
func (g *neighbourGuard) line() time.Duration {
	return max(time.Duration(g.ratio*float64(g.baseline)), g.baseline+g.floor)
}

// look judges one look at stable: the p90 of its latest guardLook
// requests, with pace the fastest target's pace now. It returns the new
// cap when it changed, and what happened, for the progress.
func (g *neighbourGuard) look(p90 time.Duration, pace float64, elapsed time.Duration) (ceiling float64, changed bool, what string) {
	defer g.remember(p90)
	if len(g.quiet) == 0 {
		return g.ceiling, false, "" // the first look: nothing to compare with yet
	}
	line := g.line()
	if p90 > line {
		g.okLooks = 0
		next := max(g.least, min(g.ceiling, pace)/2)
		if next >= g.ceiling {
			return g.ceiling, false, "" // held at startQPS: already reported
		}
		g.ceiling = next
		g.backoffs = append(g.backoffs, Backoff{After: elapsed, StableP90: p90, Baseline: g.baseline, PaceQPS: next, Users: g.users})
		return g.ceiling, true, fmt.Sprintf("%s %s above %s (its baseline %s × %g, + %s at least): warm-up pace halved to %s qps per pod (back-off %d)",
			g.subject(), latency.Format(p90), latency.Format(line), latency.Format(g.baseline), g.ratio, latency.Format(g.floor), formatQPS(next), len(g.backoffs))
	}
	if g.ceiling >= g.full {
		return g.ceiling, false, ""
	}
	if g.okLooks++; g.okLooks < guardRecoverLooks {
		return g.ceiling, false, ""
	}
	g.okLooks = 0
	g.ceiling = min(g.full, 2*g.ceiling)
	if g.ceiling >= g.full {
		return g.ceiling, true, fmt.Sprintf("%s %s back under %s: warm-up pace free to ramp up to %s qps per pod again", g.subject(), latency.Format(p90), latency.Format(line), formatQPS(g.full))
	}
	return g.ceiling, true, fmt.Sprintf("%s %s back under %s: warm-up pace cap raised to %s qps per pod", g.subject(), latency.Format(p90), latency.Format(line), formatQPS(g.ceiling))
}

// remember keeps p90 if it is among the guardBaselineLooks quietest looks,
// and updates the baseline: their median. After guardBaselineSpan looks
// the baseline holds.
func (g *neighbourGuard) remember(p90 time.Duration) {
	if g.looks++; g.looks > guardBaselineSpan {
		return
	}
	i, _ := slices.BinarySearch(g.quiet, p90)
	g.quiet = slices.Insert(g.quiet, i, p90)
	if len(g.quiet) > guardBaselineLooks {
		g.quiet = g.quiet[:guardBaselineLooks]
	}
	g.baseline = max(g.quiet[(len(g.quiet)-1)/2], time.Microsecond)
}

// formatQPS prints a rate with up to one decimal: 2.5, 20.
func formatQPS(q float64) string {
	return strconv.FormatFloat(math.Round(q*10)/10, 'f', -1, 64)
}

// p90 is the nearest-rank 90th percentile of ls (sorted in place).
func p90(ls []time.Duration) time.Duration {
	slices.Sort(ls)
	return latency.Percentile(ls, 90)
}
