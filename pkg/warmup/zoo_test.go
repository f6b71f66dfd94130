package warmup

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// zooRuns is the number of seeded warm-ups per shape.
const zooRuns = 200

// zooAfter is how many requests after the stop are judged against the
// plateau: the users' first requests on the pod.
const zooAfter = 1000

// zooRun is one seeded warm-up of a zoo shape.
type zooRun struct {
	// stop is the requests sent when the rule called the pod warm
	// (cfg.MaxRequests when it never did or rejected it).
	stop     int64
	stopped  bool
	rejected bool
	// p50, p99 of the zooAfter requests right after the stop, without the
	// noisy neighbour (how warm the pod is, not the spikes a warm pod
	// meets too).
	p50, p99 time.Duration
}

// zooStop runs the stopping rule (rule.Rule, as Run builds it) with cfg on
// one seeded run of a shape, feeding it the windows in the order the
// coordinator would. With stable, the stable pods are the same shape fully
// warm (Shape.Warm, with the same noise), a stable window for every two of
// the canary's (stableQPS 10 vs qps 20 per pod), and a slower version is
// rejected as by default (rejectSlowerVersion); without, the pod is judged
// on its own plateau.
//
// jit: the pod exposes its JIT's compile time (the shape's JITCurve), read
// as the coordinator reads it: a read kicked at every window boundary
// answers during the next window, so the rule sees the readings up to the
// window before (and one from before the first request).
func zooStop(cfg *Config, shape *testutil.Shape, seed uint64, against string, jit bool) zooRun {
	return zooStopNextTo(cfg, shape, shape.Warm(), seed, against, jit)
}

// zooStopNextTo is zooStop with the stable pods (or the gate's
// neighbours) of another shape: warm, but not the pod's own warm self (a
// pod on a slower node).
func zooStopNextTo(cfg *Config, shape, stableShape *testutil.Shape, seed uint64, against string, jit bool) zooRun {
	stable := against != zooOwn
	stopRule, err := cfg.newRule(against == zooStable, against == zooNeighbours)
	if err != nil {
		panic(err)
	}
	pod := stopRule.NewPod(jit)
	seq := shape.Sequence(seed)
	var sseq *testutil.Sequence
	if stable {
		sseq = stableShape.Sequence(seed + 1_000_000)
	}
	samples := make([]sample, cfg.Window)
	window := func(q *testutil.Sequence, index int, n int64) WindowStats {
		for i := range samples {
			samples[i] = sample{latency: q.Next(), ok: true}
		}
		w := computeWindow(samples)
		w.Index, w.Requests = index, n
		return w
	}
	run := zooRun{stop: cfg.MaxRequests}
	windows, swindows := 0, 0
	for n := int64(0); n+int64(cfg.Window) <= cfg.MaxRequests; {
		if ms, ok := seq.Compiled(); ok && jit {
			pod.Reading(rule.Reading{Requests: n, MS: ms})
		}
		n += int64(cfg.Window)
		windows++
		w := window(seq, windows, n)
		if stable && windows%2 == 0 {
			swindows++
			stopRule.Stable(window(sseq, swindows, int64(swindows*cfg.Window)))
		}
		switch d := pod.Window(w); d.Kind {
		case rule.RejectedSlower:
			run.rejected = true
			return run
		case rule.Warm:
			run.stop, run.stopped = n, true
			seq.Quiet()
			after := make([]time.Duration, zooAfter)
			for i := range after {
				after[i] = seq.Next()
			}
			slices.Sort(after)
			run.p50, run.p99 = after[zooAfter/2-1], after[zooAfter*99/100-1]
			return run
		}
	}
	return run
}

// What a zoo warm-up is judged against: its own plateau (no stable: a
// first deploy, a lone pod), stable (the step: rejectSlowerVersion by
// default), the warm gate's Ready neighbours (Options.JudgeAgainstStable:
// the same reference, no rejection).
const (
	zooOwn        = "own plateau"
	zooStable     = "stable"
	zooNeighbours = "neighbours (gate)"
)

// zooRow is one shape's row of the zoo table.
type zooRow struct {
	shape, against string
	runs           int
	oracle, ref    int64 // ref: max(oracle, MinStop), what the stop is measured against
	never          bool
	stopP50        int64 // of the runs' stops (MaxRequests for a run that never stopped)
	stopP90        int64
	ratioP50       float64 // stop ÷ ref
	ratioP90       float64
	p50ok, p99ok   int // runs whose zooAfter requests after the stop are within 10 % / 20 % of the plateau
	good           int // both
	stopped        int
	rejected       int
	within700      int
}

// The warm-up zoo's done-when figures (issue 37, docs/stopping-rule.md): with
// default settings, on every shape, without stable (the pod's own plateau:
// a first deploy, the gate's lone pod) and with stable (the same shape
// fully warm, loaded side by side): in ≥ 90 % of runs the 1,000 requests
// right after the stop have p50 within 10 % and p99 within 20 % of the
// warm plateau; the median stop is ≤ 1.5× the oracle (or the rule's
// minimum, when the oracle is below it); a pod warm from the start is
// released within 700 requests in ≥ 90 % of runs; a pod that never
// settles is never called warm on its own while it is still warming, and
// no shape is rejected as a slower version next to its own warm self. The
// test prints the table and fails where a criterion is missed, except the
// known misses listed in zooKnownMisses (each guarded by a floor).
func TestZooDoneWhen(t *testing.T) {
	if testing.Short() {
		t.Skip("seeded simulation: 14 shapes × 200 warm-ups × 2")
	}
	zooCheck(t, false, zooKnownMisses)
}

// TestZooDoneWhenJIT is TestZooDoneWhen with the JVM's own signal: every
// shape's pod exposes its JIT's compile time (the zoo's JITCurve model),
// and the rule holds the stop back while it still compiles (jit.go). The
// goals and the known misses are the same: spring-steps' JIT, as the
// Spring sample's was measured, is quiet on the flat stretch before its
// last step and compiles that step's tier in a burst just before it, so
// the signal holds nothing back there (zooKnownMissesJIT).
func TestZooDoneWhenJIT(t *testing.T) {
	if testing.Short() {
		t.Skip("seeded simulation: 14 shapes × 200 warm-ups × 2")
	}
	zooCheck(t, true, zooKnownMissesJIT)
}

// TestGateReleasesASlowerNode: the warm gate judges a pod against its
// Ready neighbours, but a pod on a slower node (the same version, its warm
// p50 1.5× or 3× theirs) is not held to their latency: settled above
// stableRatio × theirs, its own plateau decides (for a block in a row), so
// it is released before maxRequests in every run, with a noisy neighbour
// too. One 1.15× slower (within stableRatio: it could still be warming)
// is released once flat for half its warm-up: before maxRequests in ≥ 90 %
// of runs (a slow-warming shape's plateau can start too late for that; the
// bound then accepts it near its neighbours, acceptNearStable). Under the
// rule it replaced (a plateau short of theirs, however far, must last half
// the warm-up in a row) a noisy neighbour's spikes kept most 1.5× pods out
// until maxRequests.
func TestGateReleasesASlowerNode(t *testing.T) {
	cfg := Config{}.WithDefaults()
	// 50 seeds per case; the fast loop (-short) runs the first 10 of them.
	runs := 50
	if testing.Short() {
		runs = 10
	}
	for _, shape := range []string{"jit-fast", "jit-fast+noise", "jit-slow+noise", "cache-fill+noise", "lazy-endpoints+noise"} {
		base := zooShape(t, shape)
		for _, slower := range []float64{3, 1.5, 1.15} {
			node := *base
			node.Median = time.Duration(slower * float64(base.Median))
			var stops, owns []int64
			released := 0
			for seed := range uint64(runs) {
				nb := zooStopNextTo(&cfg, &node, base.Warm(), seed+1, zooNeighbours, false)
				if nb.rejected {
					t.Fatalf("%s %g× slower, seed %d: rejected; the gate rejects nothing", shape, slower, seed+1)
				}
				if nb.stopped {
					released++
				} else if slower > cfg.StableRatio {
					t.Errorf("%s %g× slower, seed %d: not released by maxRequests %d; want released on its own plateau", shape, slower, seed+1, cfg.MaxRequests)
				}
				stops = append(stops, nb.stop)
				owns = append(owns, zooStop(&cfg, &node, seed+1, zooOwn, false).stop)
			}
			if released < runs*9/10 {
				t.Errorf("%s %g× slower: released before maxRequests in %d of %d runs; want ≥ 90 %%", shape, slower, released, runs)
			}
			slices.Sort(stops)
			slices.Sort(owns)
			t.Logf("%s on a node %g× slower: released in %d of %d runs, after %d requests (median; p90 %d; a lone pod on its own plateau %d; maxRequests %d)", shape, slower, released, runs, stops[runs/2], stops[runs*9/10], owns[runs/2], cfg.MaxRequests)
		}
	}
}

// zooShape is the zoo's shape of that name.
func zooShape(t *testing.T, name string) *testutil.Shape {
	t.Helper()
	for _, s := range testutil.Zoo() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no zoo shape %q", name)
	return nil
}

// zooCheck runs the zoo with default settings, with or without the JIT
// signal, prints the table and fails on a missed goal not in known.
func zooCheck(t *testing.T, jit bool, known map[string]float64) {
	cfg := Config{}.WithDefaults()
	minimum := cfg.MinStop()
	var rows []zooRow
	for _, against := range []string{zooOwn, zooStable, zooNeighbours} {
		for _, shape := range testutil.Zoo() {
			oracle := shape.Oracle(cfg.MaxRequests, 0.1, 200, 50)
			w50, w99 := shape.WarmPercentiles(200_000)
			r := zooRow{shape: shape.Name, against: against, runs: zooRuns, oracle: oracle, ref: max(oracle, minimum), never: shape.Never}
			var stops []int64
			for seed := range uint64(zooRuns) {
				run := zooStop(&cfg, shape, seed+1, against, jit)
				stops = append(stops, run.stop)
				if run.rejected {
					r.rejected++
				}
				if run.stop <= 700 && run.stopped {
					r.within700++
				}
				if !run.stopped {
					continue
				}
				r.stopped++
				ok50 := float64(run.p50) <= 1.1*float64(w50)
				ok99 := float64(run.p99) <= 1.2*float64(w99)
				if ok50 {
					r.p50ok++
				}
				if ok99 {
					r.p99ok++
				}
				if ok50 && ok99 {
					r.good++
				}
			}
			slices.Sort(stops)
			r.stopP50, r.stopP90 = stops[len(stops)/2], stops[len(stops)*9/10]
			r.ratioP50, r.ratioP90 = float64(r.stopP50)/float64(r.ref), float64(r.stopP90)/float64(r.ref)
			rows = append(rows, r)
		}
	}
	t.Log("\n" + zooTable(rows, minimum))
	missed := map[string]bool{}
	for _, r := range rows {
		for _, miss := range r.misses() {
			name := r.shape + " vs " + r.against + ": " + miss.what
			missed[r.shape+"/"+r.against+"/"+miss.key] = true
			if floor, isKnown := known[r.shape+"/"+r.against+"/"+miss.key]; isKnown {
				if miss.got < floor {
					t.Errorf("%s (known miss, but below its floor %g)", name, floor)
				} else {
					t.Logf("known miss: %s", name)
				}
				continue
			}
			t.Error(name)
		}
	}
	// A known miss that is met now comes off the list: its floor would
	// let the criterion fall back unnoticed.
	for key := range known {
		if !missed[key] {
			t.Errorf("%s is no longer missed: take it off the known misses", key)
		}
	}
}

// zooKnownMisses are the criteria the rule misses, by shape/against/key,
// with a floor it must not fall below (the share of runs in %; for "stop",
// 100 ÷ the median stop ratio): docs/stopping-rule.md gives each cause. Without
// stable, a plateau is all a rule can see: a pod whose p50 sits flat
// between two JIT tiers (spring-steps) is released on it. A pod that got
// faster must hold its plateau for a block (minPlateauRequests), for two
// while its tail is heavy (heavyTailPlateauRequests), so a tail thinning
// too slowly to show between two blocks (cache-fill, lazy-endpoints) is
// not released early. Next to stable, a warm pod next to a noisy
// neighbour is released within 700 requests in a few runs fewer than
// 90 %. Next to the gate's neighbours (no rejection) a pod settled more
// than stableRatio above them is judged on its own plateau, so
// spring-steps, ~1.9× above them from its first requests to its first
// step, is released there (~900 requests): the gate cannot tell it from
// the same version on a slower node; every other shape does as next to
// stable.
var zooKnownMisses = map[string]float64{
	"spring-steps/own plateau/quality":       0,
	"spring-steps+noise/own plateau/quality": 0,
	"warm+noise/stable/700":                  85,

	"warm+noise/neighbours (gate)/700":             85,
	"spring-steps/neighbours (gate)/quality":       0,
	"spring-steps+noise/neighbours (gate)/quality": 0,
}

// zooKnownMissesJIT are zooKnownMisses with the JIT signal: a quiet JIT
// cannot vouch for a cache or a lazy endpoint still warming, nor shorten
// a plateau; and spring-steps on its own plateau (or next to the gate's
// neighbours) is released on the flat stretch before its first step as
// without the signal: its JIT compiles at about a tenth of its early peak
// there (~1.5 ms per request against ~15 over its class loading: quiet),
// and before its last step it adds only its background (0.3 ms per
// request) until the burst that compiles the step.
// What the Spring sample did (docs/stopping-rule.md): its JIT added 0.2–0.5 ms
// per request over the 1,000 requests before its p50 stepped down, in
// each run, and compiled the step's tier in a burst of 0.8–1.6 s.
var zooKnownMissesJIT = zooKnownMisses

type zooMiss struct {
	key, what string
	got       float64
}

func (r zooRow) misses() []zooMiss {
	var m []zooMiss
	pct := func(n int) float64 { return 100 * float64(n) / float64(r.runs) }
	if r.never && r.against == zooOwn {
		// never-settles improves until the zoo's maxRequests (its cold
		// excess, 20,000/n − 1, is under 10 % from 18,182 requests on): a
		// release is false while it is still warming, the requests after
		// it outside the goal.
		if early := r.stopped - r.good; early > 0 {
			m = append(m, zooMiss{"never", fmt.Sprintf("called warm while still warming in %d of %d runs (the %d requests after the stop not within 10 %% (p50) and 20 %% (p99) of the plateau), never settles", early, r.runs, zooAfter), pct(r.runs - early)})
		}
		return m
	}
	if r.rejected > 0 {
		m = append(m, zooMiss{"rejected", fmt.Sprintf("rejected as a slower version in %d of %d runs", r.rejected, r.runs), pct(r.runs - r.rejected)})
	}
	if g := pct(r.good); g < 90 {
		m = append(m, zooMiss{"quality", fmt.Sprintf("the %d requests after the stop within 10 %% (p50) and 20 %% (p99) of the plateau in %.1f %% of runs, want ≥ 90 %%", zooAfter, g), g})
	}
	if !r.never && r.ratioP50 > 1.5 {
		m = append(m, zooMiss{"stop", fmt.Sprintf("median stop %d = %.2f× %d, want ≤ 1.5×", r.stopP50, r.ratioP50, r.ref), 100 / r.ratioP50})
	}
	if r.oracle == 0 && pct(r.within700) < 90 {
		m = append(m, zooMiss{"700", fmt.Sprintf("released within 700 requests in %.1f %% of runs, want ≥ 90 %%", pct(r.within700)), pct(r.within700)})
	}
	return m
}

func zooTable(rows []zooRow, minimum int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| shape | judged against | oracle | stop p50 | stop p90 | stop ÷ oracle p50 / p90 | after the stop: p50 ≤ 1.1× | p99 ≤ 1.2× | both | never stopped / rejected |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	pct := func(n, of int) string { return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of)) }
	for _, r := range rows {
		oracle := fmt.Sprint(r.oracle)
		switch {
		case r.oracle == math.MaxInt64:
			oracle = "never"
		case r.ref > r.oracle:
			oracle = fmt.Sprintf("%d (min %d)", r.oracle, minimum)
		}
		ratio := fmt.Sprintf("%.2f / %.2f", r.ratioP50, r.ratioP90)
		if r.never {
			ratio = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %d / %d |\n", r.shape, r.against, oracle, r.stopP50, r.stopP90, ratio,
			pct(r.p50ok, r.runs), pct(r.p99ok, r.runs), pct(r.good, r.runs), r.runs-r.stopped-r.rejected, r.rejected)
	}
	return b.String()
}
