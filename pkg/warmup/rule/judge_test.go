package rule

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// ref is a stable reference of p50 and p99 (ms) from 5 windows.
func ref(p50, p99 float64) stableRef { return stableRef{p50: ms(p50), p99: ms(p99), windows: 5} }

func windows(p50s, p99s []float64, per int) []Window {
	var ws []Window
	for i := range p99s {
		ws = append(ws, Window{Index: i + 1, Requests: int64((i + 1) * per), Summary: latency.Summary{Count: per, P50: ms(p50s[i]), P99: ms(p99s[i])}})
	}
	return ws
}

// steady repeats a window's p50 and p99 n times.
func steady(n int, p50, p99 float64) (p50s, p99s []float64) {
	for range n {
		p50s, p99s = append(p50s, p50), append(p99s, p99)
	}
	return p50s, p99s
}

// then appends b's windows to a's.
func then(a50, a99, b50, b99 []float64) ([]float64, []float64) {
	return append(slices.Clone(a50), b50...), append(slices.Clone(a99), b99...)
}

func TestJudge(t *testing.T) {
	base := defaultsWithMax(10000)
	flat50, flat99 := steady(10, 3, 20)
	cold50, cold99 := steady(5, 9, 400)
	warm50, warm99 := then(cold50, cold99, flat50, flat99)
	p99falling50, p99falling99 := then([]float64{3, 3, 3, 3, 3}, []float64{90, 80, 70, 60, 50}, []float64{3, 3, 3, 3, 3}, []float64{40, 35, 30, 27, 24})
	p50falling50, p50falling99 := then([]float64{12, 12, 11, 11, 10}, []float64{20, 20, 20, 20, 20}, []float64{8, 7, 6, 5, 4}, []float64{20, 20, 20, 20, 20})
	spiky50, spiky99 := then(flat50, flat99, []float64{3, 3, 3}, []float64{20, 90, 20})
	tiny50, tiny99 := steady(10, 0.3, 0.9)
	tiny50[0], tiny99[0] = 1.1, 1.8 // 0.8 ms faster: under absoluteTolerance
	cases := []struct {
		name      string
		cfg       func(*Config)
		p50, p99  []float64
		stable    stableRef
		reject    bool
		converged bool
		settled   bool
		why       string
	}{
		{name: "warm after a cold start", p50: warm50, p99: warm99, converged: true},
		{name: "flat from the start stops at the minimum", p50: flat50, p99: flat99, converged: true},
		{name: "too few windows", p50: flat50[:5], p99: flat99[:5], why: "5 of 6 windows"},
		{name: "p99 still improving", p50: p99falling50, p99: p99falling99, why: "still improving over the last 6 windows: p99 40.0ms → 27.0ms (tolerance 0.1)"},
		{name: "p50 still improving", p50: p50falling50, p99: p50falling99, why: "p50 8.00ms → 5.00ms"},
		{name: "a spike in the latest windows does not hold it back", p50: spiky50, p99: spiky99, converged: true},
		{name: "small absolute change counts as settled", p50: tiny50, p99: tiny99, converged: true},
		{name: "minRequests", cfg: func(c *Config) { c.MinRequests = 1500 }, p50: flat50, p99: flat99, why: "1000 of minRequests 1500"},
		{name: "errors", cfg: func(c *Config) { c.MaxErrorRatio = 0 }, p50: flat50, p99: flat99, why: "errors"},
		{name: "stable missing", cfg: func(c *Config) { c.CompareToStable = true }, p50: flat50, p99: flat99, why: "waiting for a stable window"},
		{name: "above stable", cfg: func(c *Config) { c.CompareToStable = true }, p50: flat50, p99: flat99, stable: ref(3, 10), why: "p50 3.00ms, p99 20.0ms over its last 5 windows vs stable's 3.00ms and 10.0ms"},
		{name: "within stable ratio", cfg: func(c *Config) { c.CompareToStable = true }, p50: flat50, p99: flat99, stable: ref(3, 17), converged: true},
		{name: "p50 above stable", cfg: func(c *Config) { c.CompareToStable = true }, p50: flat50, p99: flat99, stable: ref(2.5, 20), why: "p50 3.00ms"},
		// The reference is the warm answer: an absolute tolerance would
		// call a 1 ms service warm at twice stable's latency.
		{name: "within absoluteTolerance of stable is not enough", cfg: func(c *Config) { c.CompareToStable = true }, p50: tiny50, p99: tiny99, stable: ref(0.15, 0.5), why: "vs stable's 0.150ms and 0.500ms"},
		{name: "as fast as stable while still improving: warm", p50: p50falling50, p99: p50falling99, stable: ref(6, 20), reject: true, converged: true},
		{name: "settled above stable, below the reject line", p50: flat50, p99: flat99, stable: ref(2, 15), reject: true, settled: true, why: "its own latency has stopped improving"},
		{name: "still improving, not yet as fast as stable", p50: p50falling50, p99: p50falling99, stable: ref(2, 15), reject: true, why: "still improving"},
		{name: "settled above the reject line", p50: flat50, p99: flat99, stable: ref(1, 5), reject: true, why: "p99 settled at 20.0ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			ws := windows(tc.p50, tc.p99, 100)
			if tc.name == "errors" {
				ws[len(ws)-1].Errors = 1
			}
			cfg.Reject = tc.reject
			v := cfg.judge(newBlockPool(), ws, tc.stable)
			if v.converged != tc.converged || (v.settled != "") != tc.settled || !strings.Contains(v.why, tc.why) {
				t.Errorf("judge = %+v, want converged=%v why containing %q", v, tc.converged, tc.why)
			}
		})
	}
}

// The share of slow requests (over 2 × the block's p50) falling is still
// warming, though p50 and p99 stand still: a cache whose misses fall from
// 30 % to 10 % of requests.
func TestJudgeSeesSlowRequestsThinOut(t *testing.T) {
	cfg := defaults()
	block := func(missShare float64, first int) []Window {
		var ws []Window
		for i := range 3 {
			var samples []sample
			for j := range 100 {
				d := ms(3)
				if float64(j) < missShare*100 {
					d = ms(50)
				}
				samples = append(samples, sample{latency: d, ok: true})
			}
			w := computeWindow(samples)
			w.Index, w.Requests = first+i, int64((first+i)*100)
			ws = append(ws, w)
		}
		return ws
	}
	thinning := append(block(0.3, 1), block(0.1, 4)...)
	if v := cfg.judge(newBlockPool(), thinning, stableRef{}); v.converged || !strings.Contains(v.why, "slow requests (over 2× p50 and absoluteTolerance above it) 30.0% → 10.0%") {
		t.Errorf("misses 30 %% → 10 %%: judge = %+v, want still improving on slow requests", v)
	}
	steadyShare := append(block(0.1, 1), block(0.1, 4)...)
	if v := cfg.judge(newBlockPool(), steadyShare, stableRef{}); !v.converged {
		t.Errorf("misses steady at 10 %%: judge = %+v, want warm", v)
	}
}

// A neighbour's episode (tens of requests in a row 3× slower) in the
// earlier tail block is not fewer slow requests once it has passed: they
// sit in a window or two, not spread over the block as a cache's misses
// are. The same count spread over the block's windows, or clumped in the
// run's first window (the cold start itself), is. (Split evenly over two
// of the block's three windows, 30 against a base of ~1 % still reads as
// fewer: three windows' scatter says only so much.)
func TestEpisodeIsNotWarming(t *testing.T) {
	cfg := defaults()
	// progressAfter judges n windows of 100 requests (p50 3 ms, a few
	// requests over 2× it) whose window i has extra[i] more slow
	// requests (10 ms).
	progressAfter := func(n int, extra map[int]int) progress {
		rng := rand.New(rand.NewPCG(7, 8))
		var ws []Window
		for i := range n {
			samples := make([]sample, 100)
			for j := range samples {
				d := time.Duration(float64(ms(3)) * math.Exp(0.25*rng.NormFloat64()))
				if j < extra[i] {
					d = ms(10)
				}
				samples[j] = sample{latency: d, ok: true}
			}
			w := computeWindow(samples)
			w.Index, w.Requests = i+1, int64((i+1)*100)
			ws = append(ws, w)
		}
		p, ok := cfg.progressOf(newBlockPool(), ws)
		if !ok {
			t.Fatalf("%d windows: no progress", n)
		}
		return p
	}
	// 8 windows: blocks of 3, the earlier tail block windows 3–5.
	for _, c := range []struct {
		name  string
		n     int
		extra map[int]int
		fewer bool
	}{
		{"an episode of 30 in window 4", 8, map[int]int{3: 30}, false},
		{"an episode of 30 over windows 4 and 5", 8, map[int]int{3: 24, 4: 6}, false},
		{"30 spread over windows 3–5", 8, map[int]int{2: 10, 3: 10, 4: 10}, true},
		{"30 in the run's first window", 6, map[int]int{0: 30}, true},
	} {
		p := progressAfter(c.n, c.extra)
		if got := cfg.fewerSlow(p.tailEarlier, p.tailRecent); got != c.fewer {
			t.Errorf("%s: slow requests %d → %d of %d (dispersion %.1f): fewer %v, want %v",
				c.name, p.tailEarlier.slow, p.tailRecent.slow, p.tailRecent.requests, p.tailEarlier.slowDispersion, got, c.fewer)
		}
	}
}

func TestStableReferenceIgnoresOneHiccup(t *testing.T) {
	cfg := Config{StableWindows: 3, Window: 100}
	ws := windows([]float64{1, 1, 40, 1}, []float64{2, 2, 90, 2}, 100)
	if got := cfg.stableReference(ws); got != (stableRef{p50: ms(1), p99: ms(2), windows: 4}) {
		t.Errorf("stable reference with one 90 ms window = %+v, want p50 1ms, p99 2ms", got)
	}
	if got := cfg.stableReference(ws[:1]); got.p99 != ms(2) {
		t.Errorf("one window: %+v", got)
	}
	if got := cfg.stableReference(nil); got.known() {
		t.Errorf("no window: %+v", got)
	}
}

func TestTrendMessage(t *testing.T) {
	ws := windows([]float64{9, 8, 7, 6, 5, 4, 3, 3}, []float64{412, 200, 100, 80, 60, 45, 33, 25}, 100)
	got := Trend(ws, 6)
	for _, want := range []string{"p99 of windows 3–8: 100ms → 80.0ms → 60.0ms → 45.0ms → 33.0ms → 25.0ms", "(window 1: 412ms)", "last p50 3.00ms", "still falling"} {
		if !strings.Contains(got, want) {
			t.Errorf("trend %q lacks %q", got, want)
		}
	}
	if got := Trend(windows([]float64{3, 3, 3}, []float64{20, 40, 20}, 100), 6); !strings.Contains(got, "not settling") {
		t.Errorf("noisy trend %q", got)
	}
}

// simulateRejection runs the rejection rule as the coordinator does, with
// default settings, on one seeded warm-up: canary windows of a pod that
// starts cold (its latency decays to its warm law), stable windows of the
// warm law at half the canary's pace (stableQPS 10 vs 20 per pod), and
// slow (a function of the warm latency) applied to the canary only. It
// returns the window at which the canary was rejected, or 0, and whether
// it converged.
func simulateRejection(rng *rand.Rand, slow func(rng *rand.Rand, d time.Duration) time.Duration) (rejectedAt int, converged bool) {
	cfg := defaults()
	median := math.Exp(math.Log(1) + rng.Float64()*math.Log(50)) // 1–50 ms
	sigma := 0.1 + 0.7*rng.Float64()
	cold, tau := 5+45*rng.Float64(), 50+450*rng.Float64()
	warm := func(int) time.Duration {
		ms := median * math.Exp(sigma*rng.NormFloat64())
		if rng.Float64() < 0.005 { // a noisy neighbour's spike
			ms *= 5 + 15*rng.Float64()
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	window := func(draw func(i int) time.Duration, first int) Window {
		var samples []sample
		for i := range cfg.Window {
			samples = append(samples, sample{latency: draw(first + i), ok: true})
		}
		w := computeWindow(samples)
		return w
	}
	cfg.Reject = true
	var canary, stable []Window
	st := stopState{pool: newBlockPool()}
	for w := 1; w <= 60; w++ {
		cw := window(func(n int) time.Duration {
			d := warm(n)
			d += time.Duration(float64(d) * cold * math.Exp(-float64(n)/tau))
			return slow(rng, d)
		}, (w-1)*cfg.Window+1)
		cw.Index, cw.Requests = w, int64(w*cfg.Window)
		canary = append(canary, cw)
		if w%2 == 0 {
			sw := window(warm, 1)
			sw.Index, sw.Requests = len(stable)+1, int64((len(stable)+1)*cfg.Window)
			stable = append(stable, sw)
		}
		v := cfg.next(&st, canary, cfg.stableReference(stable))
		if v.rejected != "" {
			return w, false
		}
		if v.converged {
			return 0, true
		}
	}
	return 0, false
}

// TestRejectionSimulated: with default settings, over 2,000 seeded warm-ups
// on latency shapes drawn at random (median 1–50 ms, σ 0.1–0.8, 0.5 %
// spikes of 5–20×, a cold start 5–50× decaying over 50–500 requests), the
// same version is never rejected, and a version with 5 % of requests +1 s is
// always rejected, before any user request.
func TestRejectionSimulated(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 200 // the same goals on the first 200 warm-ups, in a second
	}
	same, sameConverged, bad := 0, 0, 0
	var badAt []int
	rng := rand.New(rand.NewPCG(7, 8))
	for range runs {
		w, converged := simulateRejection(rng, func(_ *rand.Rand, d time.Duration) time.Duration { return d })
		if w > 0 {
			same++
		}
		if converged {
			sameConverged++
		}
		if w, _ := simulateRejection(rng, func(rng *rand.Rand, d time.Duration) time.Duration {
			if rng.Float64() < 0.05 {
				return d + time.Second
			}
			return d
		}); w > 0 {
			bad++
			badAt = append(badAt, w)
		}
	}
	slices.Sort(badAt)
	median := 0
	if len(badAt) > 0 {
		median = badAt[len(badAt)/2]
	}
	t.Logf("%d seeded warm-ups each: same version rejected in %d (%.2f%%), converged in %d; 5%% of requests +1s rejected in %d (%.1f%%), median at window %d (%d requests per pod)",
		runs, same, 100*float64(same)/float64(runs), sameConverged, bad, 100*float64(bad)/float64(runs), median, median*defaults().Window)
	if same > 0 {
		t.Errorf("the same version was rejected in %d of %d warm-ups", same, runs)
	}
	if sameConverged < runs*99/100 {
		t.Errorf("the same version converged in only %d of %d warm-ups (60 windows each)", sameConverged, runs)
	}
	if bad < runs*99/100 {
		t.Errorf("the slower version was rejected in only %d of %d warm-ups", bad, runs)
	}
}

// A pod that got faster during its warm-up must hold its plateau before
// it is warm on its own: for heavyTailPlateauRequests (600 with windows of
// 100) while its tail is heavy (its p99 over heavyTailRatio × its p50), as
// a cache's misses thinning too slowly to show between two neighbouring
// blocks pass a look or two by chance (the zoo's cache-fill and
// lazy-endpoints were released too early in a quarter to half of their
// runs when a plateau needed only a tenth of the warm-up); for a block
// (minPlateauRequests, 300) where its tail is thin. A pod flat from its
// first request needs no such plateau: warm at MinStop.
func TestPlateauAfterWarmingLasts(t *testing.T) {
	cfg := defaults()
	warmAt := func(p50s, p99s []float64) (flatFrom, warm int64) {
		t.Helper()
		ws := windows(p50s, p99s, cfg.Window)
		s := stopState{pool: newBlockPool()}
		for i := range ws {
			v := cfg.next(&s, ws[:i+1], stableRef{})
			if v.plateau && flatFrom == 0 {
				flatFrom = ws[i].Requests
			}
			if v.converged {
				return flatFrom, ws[i].Requests
			}
		}
		t.Fatalf("never warm over %d windows", len(ws))
		return 0, 0
	}
	cold50, cold99 := steady(4, 9, 400)
	for _, tc := range []struct {
		name    string
		p99     float64
		plateau int
	}{
		{"heavy tail (p99 6.7× p50)", 20, heavyTailPlateauRequests},
		{"thin tail (p99 2× p50)", 6, minPlateauRequests},
	} {
		flat50, flat99 := steady(40, 3, tc.p99)
		if from, warm := warmAt(flat50, flat99); warm != cfg.MinStop() || from != warm {
			t.Errorf("%s, flat from the start: warm at %d requests (flat from %d), want at MinStop %d", tc.name, warm, from, cfg.MinStop())
		}
		from, warm := warmAt(then(cold50, cold99, flat50, flat99))
		if got := warm - from; got < int64(tc.plateau-cfg.Window) || got > int64(tc.plateau) {
			t.Errorf("%s, cold, then flat from %d requests: warm at %d, %d requests later, want its plateau held for %d requests (%d windows, the first look included)",
				tc.name, from, warm, got, tc.plateau, tc.plateau/cfg.Window)
		}
	}
}

// Stable's p50 is taken at the lower end of half its standard error: 500
// pooled requests of 1..500 µs have their point p50 at 250 µs, and the
// reference at rank ⌈250 − 0.5·√125⌉ = 245 (the p99 stays at its point).
func TestStableP50IsTakenAtTheLowerEndOfItsError(t *testing.T) {
	cfg := Config{StableWindows: 3, Window: 100}
	var ws []Window
	for w := range 5 {
		samples := make([]sample, 100)
		for i := range samples {
			// Interleaved, so each window spans the whole range.
			samples[i] = sample{latency: time.Duration(1+w+5*i) * time.Microsecond, ok: true}
		}
		win := computeWindow(samples)
		win.Index, win.Requests = w+1, int64(100*(w+1))
		ws = append(ws, win)
	}
	got := cfg.stableReference(ws)
	if want := 245 * time.Microsecond; got.p50 != want {
		t.Errorf("stable p50 = %s, want %s (the point p50 is 250µs)", got.p50, want)
	}
	if want := 495 * time.Microsecond; got.p99 != want {
		t.Errorf("stable p99 = %s, want %s", got.p99, want)
	}
}
