package rule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/latency"
)

// exactStatsOf is the stopping rule's block figures for complete's
// windows [lo, hi) from every latency, pooled and sorted afresh (the rule
// before blockPool), each window's slow requests counted in its own
// latencies: the reference the pool is held to.
func exactStatsOf(complete []Window, lo, hi int, floor time.Duration) blockStats {
	block := complete[lo:hi]
	b := blockStats{windows: len(block)}
	p99s := make([]time.Duration, len(block))
	var all []time.Duration
	pooled := true
	for i, w := range block {
		p99s[i] = w.P99
		if len(w.sorted) == 0 {
			pooled = false
		}
		all = append(all, w.sorted...)
	}
	b.p99 = median(p99s)
	if !pooled {
		p50s := make([]time.Duration, len(block))
		for i, w := range block {
			p50s[i] = w.P50
		}
		b.p50 = median(p50s)
		return b
	}
	slices.Sort(all)
	b.p50 = latency.Percentile(all, 50)
	slowAbove := slowOver(b.p50, floor)
	b.requests = len(all)
	b.slow = len(all) - sort.Search(len(all), func(i int) bool { return all[i] > slowAbove })
	var counts []windowCount
	for _, w := range block {
		n := 0
		for _, d := range w.sorted {
			if d > slowAbove {
				n++
			}
		}
		counts = append(counts, windowCount{slow: n, requests: len(w.sorted)})
	}
	if lo > 0 {
		b.slowDispersion = dispersion(counts)
	}
	return b
}

// exactProgress is progressOf from exactStatsOf.
func (c *Config) exactProgress(complete []Window) (progress, bool) {
	n := len(complete)
	r := c.blockWindows(n)
	var p progress
	if n < 2*r {
		return p, false
	}
	p.earlier, p.recent = exactStatsOf(complete, n-2*r, n-r, 0), exactStatsOf(complete, n-r, n, 0)
	t := c.tailBlockWindows(n)
	floor := c.AbsoluteTolerance
	p.tailEarlier, p.tailRecent = exactStatsOf(complete, n-2*t, n-t, floor), exactStatsOf(complete, n-t, n, floor)
	p.improving = c.improvement(p)
	return p, true
}

// poolMatch runs the rule window by window over draw's latencies, as the
// coordinator does (each window's latencies dropped once judged, the
// exact reference keeping its own copy), and counts the checks at which
// the pool's verdict differs from the exact one's.
func poolMatch(t *testing.T, cfg *Config, windows int, draw func() time.Duration) (checks, differ int) {
	var ws, exact []Window
	pool := newBlockPool()
	samples := make([]sample, cfg.Window)
	for i := range windows {
		for j := range samples {
			samples[j] = sample{latency: draw(), ok: true}
		}
		w := computeWindow(samples)
		w.Index, w.Requests = i+1, int64((i+1)*cfg.Window)
		e := w
		e.sorted = slices.Clone(w.sorted)
		ws, exact = append(ws, w), append(exact, e)
		p, ok := cfg.progressOf(pool, ws)
		ws[len(ws)-1].sorted = nil
		want, wantOK := cfg.exactProgress(exact)
		if ok != wantOK {
			t.Fatalf("window %d: pool ok %v, exact %v", i+1, ok, wantOK)
		}
		if !ok {
			continue
		}
		checks++
		if p.improving != want.improving {
			differ++
			t.Logf("window %d: pool says %q (%s), exact %q", i+1, p.improving, p, want.improving)
		}
		// The blocks' median window p99s are exact (kept in order, not
		// binned): the reject paths read the p50 blocks'.
		got := []time.Duration{p.earlier.p99, p.recent.p99, p.tailEarlier.p99, p.tailRecent.p99}
		if exact := []time.Duration{want.earlier.p99, want.recent.p99, want.tailEarlier.p99, want.tailRecent.p99}; !slices.Equal(got, exact) {
			t.Fatalf("window %d: blocks' median window p99 %v, exact %v", i+1, got, exact)
		}
		// So are the tail blocks' slow requests and their scatter.
		type slowOf struct {
			slow, requests int
			dispersion     float64
		}
		gotSlow := []slowOf{{p.tailEarlier.slow, p.tailEarlier.requests, p.tailEarlier.slowDispersion}, {p.tailRecent.slow, p.tailRecent.requests, p.tailRecent.slowDispersion}}
		if exact := []slowOf{{want.tailEarlier.slow, want.tailEarlier.requests, want.tailEarlier.slowDispersion}, {want.tailRecent.slow, want.tailRecent.requests, want.tailRecent.slowDispersion}}; !slices.Equal(gotSlow, exact) {
			t.Fatalf("window %d: tail blocks' slow requests %v, exact %v", i+1, gotSlow, exact)
		}
	}
	return checks, differ
}

// The pooled histograms judge as every latency did: on the zoo's shapes
// and on random lognormal shapes (cold starts, spikes) like the rejection
// simulation's, no check's verdict differs from the exact pooling's.
func TestPoolMatchesExactPooling(t *testing.T) {
	seeds := uint64(40)
	if testing.Short() {
		seeds = 4
	}
	cfg := defaults()
	windows := int(cfg.MaxRequests) / cfg.Window
	checks, differ := 0, 0
	for _, shape := range testutil.Zoo() {
		for seed := range seeds {
			seq := shape.Sequence(seed + 1)
			c, d := poolMatch(t, &cfg, windows/2, seq.Next)
			checks, differ = checks+c, differ+d
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 * seeds {
		median := math.Exp(rng.Float64() * math.Log(50)) // 1–50 ms
		sigma := 0.1 + 0.7*rng.Float64()
		cold, tau := 5+45*rng.Float64(), 50+450*rng.Float64()
		n := 0
		c, d := poolMatch(t, &cfg, 60, func() time.Duration {
			n++
			ms := median * math.Exp(sigma*rng.NormFloat64()) * (1 + cold*math.Exp(-float64(n)/tau))
			if rng.Float64() < 0.005 {
				ms *= 5 + 15*rng.Float64()
			}
			return time.Duration(ms * float64(time.Millisecond))
		})
		checks, differ = checks+c, differ+d
	}
	t.Logf("%d checks, %d verdicts differ from the exact pooling", checks, differ)
	if differ > 0 {
		t.Errorf("%d of %d checks judged otherwise than with every latency", differ, checks)
	}
}

// feedPool judges windows of lognormal latencies (p50 3 ms) one at a
// time, dropping each window's latencies once judged as the coordinator
// does, with the pool's budget set on the first window; it returns the
// windows and, at each count in at, the pooled recent block's p50 and its
// exact one.
func feedPool(cfg *Config, windows, budget int, at ...int) (pool *blockPool, ws []Window, pooled, exact []time.Duration) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool = newBlockPool()
	pool.budget = budget
	samples := make([]sample, cfg.Window)
	var recent [][]time.Duration
	for i := range windows {
		for j := range samples {
			samples[j] = sample{latency: time.Duration(float64(3*time.Millisecond) * math.Exp(0.5*rng.NormFloat64())), ok: true}
		}
		w := computeWindow(samples)
		w.Index, w.Requests = i+1, int64((i+1)*cfg.Window)
		ws = append(ws, w)
		r := cfg.blockWindows(len(ws))
		recent = append(recent, slices.Clone(w.sorted))
		if len(recent) > r {
			recent = recent[len(recent)-r:]
		}
		p, _ := cfg.progressOf(pool, ws)
		ws[len(ws)-1].sorted = nil
		if slices.Contains(at, i+1) {
			all := slices.Concat(recent...)
			slices.Sort(all)
			pooled, exact = append(pooled, p.recent.p50), append(exact, latency.Percentile(all, 50))
		}
	}
	return pool, ws, pooled, exact
}

// A long run keeps no latency in its windows, and what the stopping rule
// holds stops growing at its budget: exact latencies up to 200,000
// requests per target (the default cap), and past the budget histograms
// that coarsen to stay under it, with the pooled p50 within a bucket of
// the exact one.
func TestPoolMemoryIsBounded(t *testing.T) {
	cfg := defaults()
	pool, ws, pooled, exact := feedPool(&cfg, 2000, poolBudget, 2000)
	held, kept := pool.retained()
	raw := 0
	for _, w := range ws {
		raw += len(w.sorted)
	}
	t.Logf("200,000 requests: %d latencies in windows, pool holds %d latencies of %d windows (binned %v)", raw, held, kept, pool.binned)
	if raw != 0 || held > poolBudget || pool.binned || pooled[0] != exact[0] {
		t.Errorf("200,000 requests: %d latencies left in windows, %d held (budget %d), binned %v, p50 %s (exact %s): want none, within, exact",
			raw, held, poolBudget, pool.binned, pooled[0], exact[0])
	}
	if kept > len(ws)/2+cfg.blockWindows(len(ws)) {
		t.Errorf("the pool reaches %d of %d windows: it should have let the first half go", kept, len(ws))
	}

	// A small budget, reached early: held stays under it as the run goes on.
	const budget = 4096
	at := []int{200, 400, 800}
	var helds []int
	for _, n := range at {
		pool, _, pooled, exact := feedPool(&cfg, n, budget, n)
		held, _ := pool.retained()
		helds = append(helds, held)
		level := pool.level
		if held > budget || !pool.binned {
			t.Errorf("%d windows: holds %d (binned %v), budget %d", n, held, pool.binned, budget)
		}
		if rel := math.Abs(float64(pooled[0]-exact[0])) / float64(exact[0]); rel > math.Ldexp(1, level-histBits) {
			t.Errorf("%d windows (level %d): pooled p50 %s, exact %s", n, level, pooled[0], exact[0])
		}
	}
	t.Logf("budget %d: held after %v windows: %v", budget, at, helds)
}

// Buckets tile the latencies: each latency lies in [bucketLow(i),
// bucketLow(i+1)) of its own bucket i, at every level.
func TestBucketBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 100000 {
		d := time.Duration(math.Exp(rng.Float64() * math.Log(1e11)))
		if rng.IntN(10) == 0 {
			d = time.Duration(rng.IntN(3000))
		}
		level := rng.IntN(maxLevel + 1)
		i := bucketOf(d) >> level
		if lo, hi := bucketLow(i, level), bucketLow(i+1, level); d < lo || d >= hi {
			t.Fatalf("%d ns (level %d): bucket %d is [%d, %d)", d, level, i, lo, hi)
		}
	}
}

// benchShape is a warm-up that never settles (2× faster with every doubling
// of its requests), so the rule judges every window of the run.
func benchShape(rng *rand.Rand, n int) time.Duration {
	return time.Duration(float64(time.Millisecond) * (2 + 200/math.Sqrt(float64(n+1))) * math.Exp(0.3*rng.NormFloat64()))
}

// BenchmarkJudge is the stopping rule's cost per request over a whole
// warm-up of one target (window 100, judged after every window as the
// coordinator does, each window's latencies dropped once judged), and the
// heap it leaves held at the end (retained-B/op). Figures before and after
// blockPool: docs/stopping-rule.md ("The block pool: the rule's cost").
func BenchmarkJudge(b *testing.B) {
	for _, requests := range []int{20000, 200000} {
		b.Run(fmt.Sprintf("requests=%d", requests), func(b *testing.B) {
			cfg := defaultsWithMax(int64(requests))
			samples := make([]sample, cfg.Window)
			var retained uint64
			b.ReportAllocs()
			for b.Loop() {
				rng := rand.New(rand.NewPCG(1, 2))
				var ms0 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				var ws []Window
				pool := newBlockPool()
				for i := range requests / cfg.Window {
					for j := range samples {
						samples[j] = sample{latency: benchShape(rng, i*cfg.Window+j), ok: true}
					}
					w := computeWindow(samples)
					w.Index, w.Requests = i+1, int64((i+1)*cfg.Window)
					ws = append(ws, w)
					cfg.judge(pool, ws, stableRef{})
					ws[len(ws)-1].sorted = nil // as the Pod drops its copy
				}
				var ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms1)
				retained = ms1.HeapAlloc - min(ms0.HeapAlloc, ms1.HeapAlloc)
				runtime.KeepAlive(ws)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(requests), "ns/request")
			b.ReportMetric(float64(retained), "retained-B/op")
		})
	}
}
