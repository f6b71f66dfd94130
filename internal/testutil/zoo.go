package testutil

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Shape is a cold-start shape of the warm-up zoo: how a pod's latency
// evolves with the requests it has served. Each run of a shape is a
// Sequence drawn from its seed; the shape's Oracle says when it is warm.
// The shapes stand for what JVM services do after a deploy (JIT decay,
// caches that fill, endpoints initialised lazily), none tuned to danki's
// sample app.
type Shape struct {
	// Name identifies the shape in tables and test names.
	Name string
	// Median is the warm median latency before noise.
	Median time.Duration
	// Sigma is the warm lognormal spread (0.3: p99 ≈ 2 × p50).
	Sigma float64
	// Cold gives the cold factor of a request: latency = warm × (1 + Cold).
	// It gets the request number n (1-based), the endpoint the request
	// picked and how often that endpoint was hit before, and the run's
	// random source for per-request randomness (cache keys).
	Cold ColdFunc
	// Run, when set, draws a run's own Cold from the run's random source
	// at its start (a JIT's tiers stepping at request counts of their
	// own); it replaces Cold.
	Run func(r *rand.Rand) ColdFunc
	// Endpoints are the weights of a request mix (nil: one endpoint).
	Endpoints []float64
	// Noise adds a noisy neighbour's spikes (see NoisyNeighbour).
	Noise bool
	// Never marks a shape that keeps improving through any request budget:
	// its oracle is "not warm yet" (math.MaxInt64).
	Never bool
	// JIT is the shape's JIT compile time (see JITCurve); nil: none.
	// Served is how many requests the JVM served before the warm-up (a
	// pod that warmed itself): its background compiling has decayed as
	// far.
	JIT    JITCurve
	Served int64
	// RunJIT, when set, draws a run's Cold and JIT together from the run's
	// random source (spring's steps and the compiling that leads to them
	// at request counts of the run's own); it replaces Run and JIT.
	RunJIT func(r *rand.Rand) (ColdFunc, JITCurve)
}

// JITCurve is a model of what a pod's JIT has spent compiling, in ms,
// after n requests (n 0: the JVM's start, before the first request): the
// cumulative figure Micrometer's jvm_compilation_time_ms_total shows.
// The JIT compiles in proportion to the speed-up it buys on a smooth decay,
// early for code whose latency depends on something else (a cache), in a
// burst just before each of spring's late steps (fitted to the Spring
// sample's measured curves: a tier's methods are compiled once their
// counters cross its threshold, not while they count towards it), and not
// at all for a pod that warmed itself. Sequence.Compiled adds a JVM's
// background compiling (jitTrickle) to every curve.
type JITCurve func(n int64) float64

// ColdFunc is a shape's cold factor (Shape.Cold).
type ColdFunc func(n int64, endpoint int, hits int64, r *rand.Rand) float64

// Noisy neighbour: isolated spikes on 0.3 % of requests (10–40 × the
// median, a stop-the-world pause or a preempted thread) and episodes
// starting on 1 request in 4,000 that make 30 requests in a row 3× slower
// (a neighbour's batch job on the same core).
const (
	spikeProb      = 0.003
	episodeProb    = 1.0 / 4000
	episodeLength  = 30
	episodeFactor  = 3.0
	spikeMinFactor = 10.0
	spikeMaxFactor = 40.0
)

// Sequence draws the latencies of one run of a shape.
type Sequence struct {
	shape   *Shape
	r       *rand.Rand
	n       int64
	hits    []int64
	episode int
	cold    ColdFunc
	quiet   bool
	// jit is the run's JIT curve (nil: none); jr draws the background
	// compiling (its own source: the latencies are those of a run
	// without), trickle its sum so far.
	jit     JITCurve
	jr      *rand.Rand
	trickle float64
}

// Sequence starts a run of the shape from seed.
func (s *Shape) Sequence(seed uint64) *Sequence {
	q := &Sequence{shape: s, r: rand.New(rand.NewPCG(seed, 0x5eed)), hits: make([]int64, max(1, len(s.Endpoints))), cold: s.Cold, jit: s.JIT}
	switch {
	case s.RunJIT != nil:
		q.cold, q.jit = s.RunJIT(q.r)
	case s.Run != nil:
		q.cold = s.Run(q.r)
	}
	if q.jit != nil {
		q.jr = rand.New(rand.NewPCG(seed, 0x717))
	}
	return q
}

// Compiled is the run's JIT compile time so far, in ms (its JITCurve at
// the requests served, plus the background compiling), and false for a
// shape without a JIT model.
func (q *Sequence) Compiled() (float64, bool) {
	if q.jit == nil {
		return 0, false
	}
	return q.jit(q.n) + q.trickle, true
}

// jitTrickle is a JVM's background compiling once the hot paths are
// compiled (rarer methods crossing their thresholds, recompiles after a
// deoptimisation): each request compiles something with probability
// 2 % × e^(−n/2500), 2 + ~15 ms (exponential), and one in 2,000 ×
// e^(−n/2500) a large method, 100–400 ms: ~0.3 ms per request at request
// 1,000, ~0.1 at 3,500 — what the sample app showed (docs/stopping-rule.md: ~25
// ms per 100 requests over its requests 800–2,900, a few single compiles
// of 100–350 ms, ~5 ms per 100 from 2,900 to 4,000). n counts the JVM's
// requests: a pod that warmed itself (Served) has left most of it behind.
func (q *Sequence) jitTrickle() {
	f := math.Exp(-float64(q.n+q.shape.Served) / 2500)
	if q.jr.Float64() < 0.02*f {
		q.trickle += 2 + 15*q.jr.ExpFloat64()
	}
	if q.jr.Float64() < 0.0005*f {
		q.trickle += 100 + 300*q.jr.Float64()
	}
}

// Quiet drops the noisy neighbour from the rest of the run: what the pod
// itself does (how warm it is) without the spikes a warm pod meets too.
func (q *Sequence) Quiet() { q.quiet = true }

// Warm is the shape fully warm: every request's cold factor is the one it
// has after a billion requests (a JIT's last tier, a full cache, and
// whatever stays, such as GC pauses), with the same noise. It stands for
// the stable pods a canary of the shape is compared with.
func (s *Shape) Warm() *Shape {
	w := *s
	w.Name += " (warm)"
	w.Never = false
	cold := s.Cold
	run := s.Run
	if s.RunJIT != nil {
		run = func(r *rand.Rand) ColdFunc { c, _ := s.RunJIT(r); return c }
	}
	w.RunJIT, w.JIT = nil, nil
	w.Run = func(r *rand.Rand) ColdFunc {
		c := cold
		if run != nil {
			c = run(r)
		}
		if c == nil {
			return nil
		}
		return func(_ int64, e int, _ int64, r *rand.Rand) float64 { return max(0, c(1e9, e, 1e9, r)) }
	}
	w.Cold = nil
	return &w
}

// Next is the latency of the next request.
func (q *Sequence) Next() time.Duration {
	s := q.shape
	q.n++
	if q.jr != nil {
		q.jitTrickle()
	}
	endpoint := 0
	if len(s.Endpoints) > 0 {
		endpoint = pickWeighted(q.r, s.Endpoints)
	}
	hits := q.hits[endpoint]
	q.hits[endpoint]++
	warm := float64(s.Median) * math.Exp(s.Sigma*q.r.NormFloat64())
	lat := warm
	if q.cold != nil {
		lat *= 1 + q.cold(q.n, endpoint, hits, q.r)
	}
	if s.Noise && !q.quiet {
		if q.episode == 0 && q.r.Float64() < episodeProb {
			q.episode = episodeLength
		}
		if q.episode > 0 {
			q.episode--
			lat *= episodeFactor
		}
		if q.r.Float64() < spikeProb {
			lat += float64(s.Median) * (spikeMinFactor + (spikeMaxFactor-spikeMinFactor)*q.r.Float64())
		}
	}
	return time.Duration(lat)
}

func pickWeighted(r *rand.Rand, weights []float64) int {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	x := r.Float64() * total
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(weights) - 1
}

// jitDecay is the cold factor of a JIT-compiled path: a·e^(−hits/tau),
// plus a smaller, slower tier (C2 after C1) of a/10·e^(−hits/(4·tau)).
func jitDecay(a, tau float64) func(int64, int, int64, *rand.Rand) float64 {
	return func(_ int64, _ int, hits int64, _ *rand.Rand) float64 {
		h := float64(hits)
		return a*math.Exp(-h/tau) + a/10*math.Exp(-h/(4*tau))
	}
}

// jitCompiled is the JIT curve of jitDecay(a, tau): start ms compiled
// before the first request, then total ms more in proportion to the
// speed-up bought so far (both tiers, the slower one a tenth).
func jitCompiled(start, total, tau float64) JITCurve {
	return func(n int64) float64 {
		x := float64(n)
		return start + total*(1-(math.Exp(-x/tau)+math.Exp(-x/(4*tau))/10)/1.1)
	}
}

// Zoo is the warm-up zoo: each shape alone and with a noisy neighbour.
// Oracles (Oracle, default settings) range from the minimum to ~10,000
// requests.
func Zoo() []*Shape {
	lazy := []float64{0.55, 0.3, 0.12, 0.03}
	base := []*Shape{
		{Name: "jit-fast", Median: 2 * time.Millisecond, Sigma: 0.3, Cold: jitDecay(40, 60), JIT: jitCompiled(3000, 3000, 60)},
		{Name: "jit-slow", Median: 5 * time.Millisecond, Sigma: 0.4, Cold: jitDecay(30, 500), JIT: jitCompiled(3000, 4000, 500)},
		// The cache's code is compiled early; the cache fills on.
		{Name: "cache-fill", Median: 3 * time.Millisecond, Sigma: 0.3, Cold: cacheFill(800, 15), JIT: jitCompiled(3000, 2000, 60)},
		{Name: "lazy-endpoints", Median: 4 * time.Millisecond, Sigma: 0.35, Endpoints: lazy,
			Cold: func(_ int64, _ int, hits int64, _ *rand.Rand) float64 { return 50 * math.Exp(-float64(hits)/25) },
			JIT: func(n int64) float64 {
				ms := 3000.0
				for _, w := range lazy { // each endpoint's code compiled over its own first calls
					ms += 800 * (1 - math.Exp(-w*float64(n)/25))
				}
				return ms
			}},
		// It warmed itself before it was ready (the sample app's 3,000
		// requests): compiled then, not now.
		{Name: "warm", Median: 3 * time.Millisecond, Sigma: 0.3, JIT: func(int64) float64 { return 6000 }, Served: 3000},
		{Name: "spring-steps", Median: time.Millisecond, Sigma: 0.16, RunJIT: spring},
		// Still 2× faster with every doubling of its requests up to
		// 20,000 (a power law: tiers of compilation that never end, the
		// compile time rising with every doubling too).
		{Name: "never-settles", Median: 2 * time.Millisecond, Sigma: 0.3, Never: true,
			Cold: func(n int64, _ int, _ int64, _ *rand.Rand) float64 { return 20000/float64(n) - 1 },
			JIT:  func(n int64) float64 { return 3000 + 1000*math.Log1p(float64(n)) }},
	}
	zoo := make([]*Shape, 0, 2*len(base))
	for _, s := range base {
		noisy := *s
		noisy.Name += "+noise"
		noisy.Noise = true
		zoo = append(zoo, s, &noisy)
	}
	return zoo
}

// WarmPercentiles are the p50 and p99 of n requests of the shape fully
// warm (Warm) without noise: the plateau a warm pod's requests are judged
// against.
func (s *Shape) WarmPercentiles(n int) (p50, p99 time.Duration) {
	q := s.Warm().Sequence(0x91a7)
	q.Quiet()
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = q.Next()
	}
	slices.Sort(lat)
	return lat[(n-1)/2], lat[(n*99+99)/100-1]
}

// spring is a Spring Boot service's cold start, as measured on a Spring
// Boot 3.5 service (starter-web, validation, actuator, Jackson both ways,
// JDK 17, one CPU; issue 37): its first requests 30× slow for a few dozen
// requests (class loading), then the JIT's tiers make it faster in steps,
// not smoothly — p50 flat at 2.5× the warm p50 for several windows, then
// 1.9×, then warm — the steps at request counts of each run's own (drawn
// per run: the last one somewhere between 3,600 and 11,000 requests, the
// first between 800 and 1,600), and a GC pause that adds 10–30× the median
// to 0.2 % of requests, warm or cold.
//
// Its JIT, as the Spring sample compiled (docs/stopping-rule.md, "What the
// JIT says before a step": JDK 17 on one CPU, 50 requests a second, and in
// the lab): 6 s compiled by the time it is ready, 5 s more over its first
// few hundred requests, 1.5 s spread up to the first step (its p50 still
// falling), then a background of 0.3 ms per request — also on the flat
// stretch before the last step — and a burst of 1.5 s over the 500
// requests before that step (the per-request methods' top tier, compiled
// once their counters cross its threshold; the sample's p50 stepped down
// after a burst of 0.8–1.6 s around request 5,000, the lab's canary after
// 3.2 s over requests 4,800–6,400).
func spring(r *rand.Rand) (ColdFunc, JITCurve) {
	logUniform := func(lo, hi float64) float64 { return math.Exp(math.Log(lo) + r.Float64()*math.Log(hi/lo)) }
	first, last := logUniform(800, 1600), logUniform(3600, 11000)
	const burst = 500 // requests before the last step its top tier compiles over
	jit := func(n int64) float64 {
		x := float64(n)
		return 6000 + 5000*(1-math.Exp(-x/150)) + 1500*min(1, x/first) +
			0.3*max(0, x-first) + 1500*min(1, max(0, x-(last-burst))/burst)
	}
	return func(n int64, _ int, _ int64, r *rand.Rand) float64 {
		f := 30 * math.Exp(-float64(n)/25)
		switch x := float64(n); {
		case x < first:
			f += 1.5
		case x < last:
			f += 0.9
		}
		if r.Float64() < 0.002 {
			f += 10 + 20*r.Float64()
		}
		return f
	}, jit
}

// cacheFill is a cache of keys requests pick uniformly: a miss costs
// factor × the warm latency until the key is cached. The miss rate decays
// as e^(−n/keys): p50 steps down early, p99 only once misses are rarer
// than 1 % (n ≈ 4.6 × keys).
func cacheFill(keys int, factor float64) func(int64, int, int64, *rand.Rand) float64 {
	return func(n int64, _ int, _ int64, r *rand.Rand) float64 {
		if r.Float64() < math.Exp(-float64(n)/float64(keys)) {
			return factor
		}
		return 0
	}
}

// Oracle is the request count after which a shape has stopped improving:
// the first n from which on its true p50 and p99 (estimated from runs runs
// in buckets of step requests) stay within tolerance of their warm
// plateau, the last 20 % of horizon requests. math.MaxInt64 for a shape
// that never settles. A noisy neighbour's spikes are no part of warming up
// (they are as likely on a warm pod as on a cold one), so a noisy shape's
// oracle is that of the same shape without noise.
func (s *Shape) Oracle(horizon int64, tolerance float64, runs int, step int64) int64 {
	if s.Never {
		return math.MaxInt64
	}
	if s.Noise {
		quiet := *s
		quiet.Noise = false
		return quiet.Oracle(horizon, tolerance, runs, step)
	}
	buckets := int(horizon / step)
	lat := make([][]float64, buckets)
	for i := range lat {
		lat[i] = make([]float64, 0, runs*int(step))
	}
	for run := range runs {
		seq := s.Sequence(uint64(1_000_000 + run))
		for i := range buckets {
			for range step {
				lat[i] = append(lat[i], float64(seq.Next()))
			}
		}
	}
	p50, p99 := make([]float64, buckets), make([]float64, buckets)
	for i, b := range lat {
		slices.Sort(b)
		p50[i], p99[i] = b[len(b)/2], b[len(b)*99/100]
	}
	var plateau []float64
	for i := buckets * 4 / 5; i < buckets; i++ {
		plateau = append(plateau, lat[i]...)
	}
	slices.Sort(plateau)
	w50, w99 := plateau[len(plateau)/2], plateau[len(plateau)*99/100]
	warm := buckets
	for i := buckets - 1; i >= 0; i-- {
		if p50[i] > (1+tolerance)*w50 || p99[i] > (1+tolerance)*w99 {
			break
		}
		warm = i
	}
	return int64(warm) * step
}
