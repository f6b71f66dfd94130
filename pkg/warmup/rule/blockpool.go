package rule

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"time"
)

// The stopping rule pools the requests of a block of windows (its p50 and
// its share of slow requests). Its blocks reach back over the last half of
// a target's windows (two pairs: the p50's, a quarter each, and the
// tail's, a fifth each: progressOf), so pooling them afresh at every
// window, from every request's latency kept, cost memory and CPU in
// proportion to every request sent: O(n²) over a warm-up, in the Argo
// Rollouts controller. A blockPool keeps the blocks' merged histograms,
// moved by the windows entering and leaving them (O(1) windows per check),
// and finds a block's exact nearest-rank p50 and count of slow requests
// from them: the histogram gives the bucket (1/1024 of an octave) holding
// the p50, and a binary search in each of the block's windows the
// latencies in that bucket, and its requests above the slow line, slowOver
// (O(windows) per check, no sort of the block).
//
// Memory: a window's latencies are kept only while a block can still reach
// it (about the last half of the windows; the Pod drops its own copy once
// the window is judged, the warm-up its own unless it keeps latencies), and only
// up to poolBudget of them (1 MiB) per target: within it the rule's figures
// are exact, as with every latency pooled — the default hard cap of 200,000
// requests per target (policy.DefaultLimits) stays within it at window
// 100. Past it, the pool turns every window it holds into its histogram (4
// bytes per occupied bucket, a p50 within 0.05 % of the exact one, a bucket
// standing for its middle) and halves that resolution as often as needed
// to stay under poolBudget buckets, down to one bucket per octave: a raised
// maxRequests costs precision, not unbounded memory. What still grows with
// a run is the windows' summaries (Result.Windows, ~100 bytes per window)
// and, past the coarsest resolution, a few buckets per reachable window.
type blockPool struct {
	// level: buckets are bucketOf's >> level (coarsened past poolBudget).
	level  int
	budget int
	// wins[i] is complete window base+i (0-based); windows before base,
	// and their histograms, are gone.
	wins []poolWindow
	base int
	// held counts the latencies (exact) or histogram buckets held in wins.
	held int
	// binned: past poolBudget latencies, wins hold histograms.
	binned bool
	// lastIndex and lastRequests identify the last window taken in, so a
	// slice that is not the one the pool followed is noticed.
	lastIndex    int
	lastRequests int64

	// earlier and recent are the p50's blocks (Config.blockWindows);
	// tailEarlier and tailRecent the tail's (Config.tailBlockWindows).
	earlier, recent, tailEarlier, tailRecent blockRange
	// scratch is space for a block's latencies in its p50's bucket, or
	// its windows' p50s when it cannot be pooled.
	scratch []time.Duration
	// slowCounts is space for a block's windows' counts of slow requests.
	slowCounts []windowCount
}

// poolWindow is one window's latencies, sorted (lat, while the pool is
// exact) or its histogram (bins, past poolBudget); pooled is false for a
// window that kept no latencies (JudgeWindows' windows from Prometheus,
// tests' summaries).
type poolWindow struct {
	lat    []time.Duration
	bins   []histBin
	pooled bool
}

// histBin is one occupied bucket of a window: its index (at the pool's
// level) and count. A window with more than 65,535 requests in one bucket
// has several bins with the same index.
type histBin struct{ idx, n uint16 }

// histBits: a bucket is 1/2^histBits of an octave at full resolution.
const histBits = 10

// maxLevel is the coarsest resolution: one bucket per octave (2× p50 is
// then still exactly one octave up).
const maxLevel = histBits

// poolBudget is the most latencies (8 bytes each) a target's pool holds
// before it keeps histograms instead, and the most histogram buckets (4
// bytes each) it holds before it coarsens them.
const poolBudget = 1 << 17

// pageBits and chunkBits lay out a block's histogram: pages of 1,024
// buckets, allocated when used, with sums per page and per chunk of 32, so
// finding the p50 scans at most 64 + 32 + 32 counters.
const (
	pageBits  = 10
	chunkBits = 5
	numPages  = (64 << histBits) >> pageBits
)

// bucketOf is d's bucket at full resolution: its octave, then its next
// histBits bits. Indices fit in 16 bits (64 octaves × 1,024).
func bucketOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	v := uint64(d)
	e := bits.Len64(v) - 1
	var m uint64
	if e >= histBits {
		m = v >> (e - histBits)
	} else {
		m = v << (histBits - e)
	}
	return e<<histBits | int(m&(1<<histBits-1))
}

// bucketLow is the smallest latency in bucket idx at level (below 1.024 µs,
// where a bucket holds one value or none, rounded up to the next one).
func bucketLow(idx, level int) time.Duration {
	full := idx << level
	if full == 0 {
		return 0 // bucket 0 holds 0 and 1 ns
	}
	e := full >> histBits
	m := uint64(full&(1<<histBits-1)) | 1<<histBits
	switch {
	case e >= 62: // beyond any latency (146 years)
		return math.MaxInt64
	case e >= histBits:
		return time.Duration(m << (e - histBits))
	}
	return time.Duration((m + 1<<(histBits-e) - 1) >> (histBits - e))
}

// bucketMid is the latency a bucket stands for: its middle.
func bucketMid(idx, level int) time.Duration {
	lo, hi := bucketLow(idx, level), bucketLow(idx+1, level)
	return lo + (hi-lo)/2
}

// blockRange is one block: windows [lo, hi) of the complete windows, their
// merged histogram and their p99s in order.
type blockRange struct {
	lo, hi int
	// unpooled counts the block's windows without a histogram: such a
	// block is judged on its windows' median p50, without slow requests.
	unpooled int
	hist     blockHist
	// p99s are the block's windows' p99s, sorted: kept in order as windows
	// enter and leave (a binary search and a copy each), so the block's
	// median window p99 is read off, not sorted afresh at every check (a
	// sort of a quarter of the windows, four times per check, was most of
	// the rule's cost on a long warm-up).
	p99s []time.Duration
}

// blockHist is a histogram over every bucket index at the pool's level.
type blockHist struct {
	total int64
	pageN [numPages]int64
	pages [numPages]*histPage
}

type histPage struct {
	chunkN [1 << (pageBits - chunkBits)]int64
	n      [1 << pageBits]int64
}

func (h *blockHist) add(bins []histBin, sign int64) {
	for _, b := range bins {
		h.addN(int(b.idx), sign*int64(b.n))
	}
}

// addN adds d latencies to bucket i.
func (h *blockHist) addN(i int, d int64) {
	p := i >> pageBits
	pg := h.pages[p]
	if pg == nil {
		pg = &histPage{}
		h.pages[p] = pg
	}
	j := i & (1<<pageBits - 1)
	pg.n[j] += d
	pg.chunkN[j>>chunkBits] += d
	h.pageN[p] += d
	h.total += d
}

func (h *blockHist) reset() { *h = blockHist{} }

// rank is the bucket of the k-th smallest latency (1-based).
func (h *blockHist) rank(k int64) int {
	var cum int64
	for p := range numPages {
		if cum+h.pageN[p] < k {
			cum += h.pageN[p]
			continue
		}
		pg := h.pages[p]
		for c, cn := range pg.chunkN {
			if cum+cn < k {
				cum += cn
				continue
			}
			for j := c << chunkBits; ; j++ {
				if cum += pg.n[j]; cum >= k {
					return p<<pageBits | j
				}
			}
		}
	}
	return numPages<<pageBits - 1
}

// above counts the latencies in buckets above idx.
func (h *blockHist) above(idx int) int64 {
	if idx < 0 {
		return h.total
	}
	p, j := idx>>pageBits, idx&(1<<pageBits-1)
	if p >= numPages {
		return 0
	}
	var n int64
	for q := p + 1; q < numPages; q++ {
		n += h.pageN[q]
	}
	if pg := h.pages[p]; pg != nil {
		c := j >> chunkBits
		for k := j + 1; k < (c+1)<<chunkBits; k++ {
			n += pg.n[k]
		}
		for d := c + 1; d < len(pg.chunkN); d++ {
			n += pg.chunkN[d]
		}
	}
	return n
}

func newBlockPool() *blockPool { return &blockPool{budget: poolBudget} }

// sync makes the pool follow complete, taking in the windows it has not
// seen. A slice it did not follow (another target's, a test's fresh one)
// starts it afresh, at the same budget.
func (p *blockPool) sync(complete []Window) {
	if !p.follows(complete) {
		*p = blockPool{budget: p.budget}
	}
	for i := p.base + len(p.wins); i < len(complete); i++ {
		p.take(&complete[i])
	}
}

func (p *blockPool) follows(complete []Window) bool {
	seen := p.base + len(p.wins)
	if seen == 0 || seen > len(complete) {
		return seen == 0
	}
	w := complete[seen-1]
	return w.Index == p.lastIndex && w.Requests == p.lastRequests
}

// take adds a window: its sorted latencies, or its histogram once binned.
func (p *blockPool) take(w *Window) {
	p.lastIndex, p.lastRequests = w.Index, w.Requests
	if len(w.sorted) == 0 {
		p.wins = append(p.wins, poolWindow{})
		return
	}
	pw := poolWindow{lat: w.sorted, pooled: true} // shared: the window's holders drop their own reference
	if p.binned {
		pw = poolWindow{bins: binsOf(w.sorted, p.level), pooled: true}
		p.held += len(pw.bins)
	} else {
		p.held += len(pw.lat)
	}
	p.wins = append(p.wins, pw)
	if !p.binned && p.held > p.budget {
		p.bin()
	}
	for p.binned && p.held > p.budget && p.level < maxLevel {
		p.coarsen()
	}
}

// bin turns every window held into its histogram (the blocks' histograms
// are the same).
func (p *blockPool) bin() {
	p.binned, p.held = true, 0
	for i := range p.wins {
		w := &p.wins[i]
		if w.pooled {
			w.bins, w.lat = binsOf(w.lat, p.level), nil
			p.held += len(w.bins)
		}
	}
}

// binsOf is sorted's histogram at level, in bucket order.
func binsOf(sorted []time.Duration, level int) []histBin {
	n, last := 0, -1
	for _, d := range sorted {
		if i := bucketOf(d) >> level; i != last {
			n, last = n+1, i
		}
	}
	bins := make([]histBin, 0, n)
	last = -1
	for _, d := range sorted {
		i := bucketOf(d) >> level
		if i == last && bins[len(bins)-1].n < math.MaxUint16 {
			bins[len(bins)-1].n++
			continue
		}
		bins, last = append(bins, histBin{idx: uint16(i), n: 1}), i
	}
	return bins
}

// coarsen halves the resolution: two neighbouring buckets become one, in
// every window held and in both blocks.
func (p *blockPool) coarsen() {
	p.level++
	p.held = 0
	for i := range p.wins {
		w := &p.wins[i]
		out := w.bins[:0]
		for _, b := range w.bins {
			b.idx >>= 1
			if k := len(out) - 1; k >= 0 && out[k].idx == b.idx && int(out[k].n)+int(b.n) <= math.MaxUint16 {
				out[k].n += b.n
				continue
			}
			out = append(out, b)
		}
		w.bins = slices.Clip(out)
		p.held += len(w.bins)
	}
	for _, b := range p.ranges() {
		b.hist.reset()
		for i := b.lo; i < b.hi; i++ {
			p.add(&b.hist, &p.wins[i-p.base], 1)
		}
	}
}

// add adds (sign 1) or removes (-1) a window's latencies to a histogram.
func (p *blockPool) add(h *blockHist, w *poolWindow, sign int64) {
	if w.bins != nil {
		h.add(w.bins, sign)
		return
	}
	for i := 0; i < len(w.lat); {
		b := bucketOf(w.lat[i]) >> p.level
		j := i + 1
		for j < len(w.lat) && bucketOf(w.lat[j])>>p.level == b {
			j++
		}
		h.addN(b, sign*int64(j-i))
		i = j
	}
}

// move makes b hold windows [lo, hi) of complete, adding and removing
// windows at its ends.
func (p *blockPool) move(b *blockRange, complete []Window, lo, hi int) {
	if b.lo == b.hi { // empty: start where asked
		b.lo, b.hi = lo, lo
	}
	step := func(i int, sign int64) {
		p99 := complete[i].P99
		at, _ := slices.BinarySearch(b.p99s, p99)
		if sign > 0 {
			b.p99s = slices.Insert(b.p99s, at, p99)
		} else {
			b.p99s = slices.Delete(b.p99s, at, at+1)
		}
		w := &p.wins[i-p.base]
		if !w.pooled {
			b.unpooled += int(sign)
			return
		}
		p.add(&b.hist, w, sign)
	}
	for ; b.hi < hi; b.hi++ {
		step(b.hi, 1)
	}
	for b.lo > lo {
		b.lo--
		step(b.lo, 1)
	}
	for b.hi > hi {
		b.hi--
		step(b.hi, -1)
	}
	for ; b.lo < lo; b.lo++ {
		step(b.lo, -1)
	}
	if b.lo == b.hi {
		b.hist.reset()
		b.unpooled = 0
		b.p99s = b.p99s[:0]
	}
}

// ranges are the pool's four blocks.
func (p *blockPool) ranges() []*blockRange {
	return []*blockRange{&p.earlier, &p.recent, &p.tailEarlier, &p.tailRecent}
}

// forget drops the windows before first: no block reaches them again.
func (p *blockPool) forget(first int) {
	for _, b := range p.ranges() {
		first = min(first, b.lo)
	}
	drop := first - p.base
	if drop <= 0 {
		return
	}
	for _, w := range p.wins[:drop] {
		p.held -= len(w.bins) + len(w.lat)
	}
	clear(p.wins[:drop])
	p.wins = p.wins[drop:]
	p.base = first
	if cap(p.wins) > 2*len(p.wins)+64 { // let the dropped windows' slots go
		p.wins = append([]poolWindow(nil), p.wins...)
	}
}

// retained counts what the pool holds: latencies (exact) or histogram
// buckets (binned), and windows.
func (p *blockPool) retained() (held, windows int) { return p.held, len(p.wins) }

// blocks returns the stats of the earlier block [n-2r, n-r) and the recent
// one [n-r, n) of complete, moving the pool's p50 blocks there. Their
// slow requests are not counted (the tail's blocks judge those).
func (p *blockPool) blocks(complete []Window, r int) (earlier, recent blockStats) {
	return p.pair(&p.earlier, &p.recent, complete, r, false, 0)
}

// tailBlocks is blocks for the tail's pair of blocks, with their slow
// requests (slowOver with floor).
func (p *blockPool) tailBlocks(complete []Window, r int, floor time.Duration) (earlier, recent blockStats) {
	return p.pair(&p.tailEarlier, &p.tailRecent, complete, r, true, floor)
}

func (p *blockPool) pair(e, q *blockRange, complete []Window, r int, countSlow bool, floor time.Duration) (earlier, recent blockStats) {
	n := len(complete)
	p.move(e, complete, n-2*r, n-r)
	p.move(q, complete, n-r, n)
	return p.stats(e, complete, countSlow, floor), p.stats(q, complete, countSlow, floor)
}

// stats is a block's figures; its slow requests (slowOver with floor)
// only with countSlow.
func (p *blockPool) stats(b *blockRange, complete []Window, countSlow bool, floor time.Duration) blockStats {
	s := blockStats{windows: b.hi - b.lo}
	s.p99 = b.p99s[len(b.p99s)/2] // the upper median, as median's
	if b.unpooled > 0 || b.hist.total == 0 {
		p.scratch = p.scratch[:0]
		for _, w := range complete[b.lo:b.hi] {
			p.scratch = append(p.scratch, w.P50)
		}
		s.p50 = median(p.scratch)
		return s
	}
	// Nearest rank, as latency.Percentile: the k-th latency.
	total := b.hist.total
	k := int64(math.Ceil(0.5*float64(total) - 1e-9))
	k = min(max(k, 1), total)
	j := b.hist.rank(k)
	s.requests = int(total)
	if p.binned {
		s.p50 = bucketMid(j, p.level)
		if countSlow {
			// 2× every latency of bucket j lies in bucket j + one octave;
			// floor above p50 in the bucket of p50 + floor.
			over := max(j+(1<<histBits)>>p.level, bucketOf(s.p50+floor)>>p.level)
			s.slow = int(b.hist.above(over))
		}
		return s
	}
	// The k-th latency is the (k − those below bucket j)-th in bucket j:
	// the block's windows' latencies in it, found by binary search.
	below := total - b.hist.above(j-1)
	lo, hi := bucketLow(j, p.level), bucketLow(j+1, p.level)
	p.scratch = p.scratch[:0]
	for i := b.lo; i < b.hi; i++ {
		lat := p.wins[i-p.base].lat
		from, _ := slices.BinarySearch(lat, lo)
		to, _ := slices.BinarySearch(lat, hi)
		p.scratch = append(p.scratch, lat[from:to]...)
	}
	slices.Sort(p.scratch)
	s.p50 = p.scratch[k-below-1]
	if !countSlow {
		return s
	}
	// Slow: each window's latencies above slowOver, counted per window for
	// their scatter (dispersion). A block from the run's first window is
	// left binomial: a clump of slow requests there is the cold start
	// itself, not a neighbour's episode.
	slowAbove := slowOver(s.p50, floor)
	p.slowCounts = p.slowCounts[:0]
	for i := b.lo; i < b.hi; i++ {
		lat := p.wins[i-p.base].lat
		n := len(lat) - sort.Search(len(lat), func(x int) bool { return lat[x] > slowAbove })
		s.slow += n
		p.slowCounts = append(p.slowCounts, windowCount{slow: n, requests: len(lat)})
	}
	if b.lo > 0 {
		s.slowDispersion = dispersion(p.slowCounts)
	}
	return s
}

// keepFrom is the first complete window any block can reach from now on,
// with n complete windows: the earlier block's start, n' − 2r(n'), falls
// by at most one window from one count to the next and grows by at least
// two every four, so its least value from n on is within [n, n+3]. (The
// tail's blocks, a fifth each, start later.)
func (c *Config) keepFrom(n int) int {
	first := n
	for m := n; m <= n+3; m++ {
		first = min(first, max(0, m-2*c.blockWindows(m)))
	}
	return first
}

// blockWindows is the size of each p50 block with n complete windows.
func (c *Config) blockWindows(n int) int {
	return max(c.StableWindows, c.minBlockWindows(), n/blockShare)
}

// tailBlockWindows is the size of each tail block (at most blockWindows).
func (c *Config) tailBlockWindows(n int) int {
	return max(c.StableWindows, c.minBlockWindows(), n/tailBlockShare)
}

// last is the p50 and p99 of the last k of complete's windows but the one
// with the highest p99, pooled, each at the upper end of its
// one-standard-error range (nearestRank, z 1). The pool still holds them
// (the blocks cover the last 2 × blockWindows ≥ k windows). A window that
// kept no latencies (Prometheus' windows, tests' summaries) makes them the
// upper medians of the windows' p50s and p99s instead.
func (p *blockPool) last(complete []Window, k int) (p50, p99 time.Duration) {
	n := len(complete)
	k = min(k, n)
	lo := n - k
	worst := lo
	for i := lo; i < n; i++ {
		if complete[i].P99 > complete[worst].P99 {
			worst = i
		}
	}
	var lat []time.Duration
	for i := lo; i < n; i++ {
		j := i - p.base
		if j < 0 || j >= len(p.wins) || !p.wins[j].pooled {
			lat = nil
			break
		}
		if i == worst && k > 1 {
			continue
		}
		w := &p.wins[j]
		if w.bins == nil {
			lat = append(lat, w.lat...)
			continue
		}
		for _, b := range w.bins {
			mid := bucketMid(int(b.idx), p.level)
			for range b.n {
				lat = append(lat, mid)
			}
		}
	}
	if len(lat) == 0 {
		var p50s, p99s []time.Duration
		for _, w := range complete[lo:] {
			p50s, p99s = append(p50s, w.P50), append(p99s, w.P99)
		}
		return median(p50s), median(p99s)
	}
	slices.Sort(lat)
	return nearestRank(lat, 0.5, 1), nearestRank(lat, 0.99, 1)
}

// above counts the requests slower than d in the earlier and the recent
// p50 block (as last moved by blocks), and the blocks' requests: at the
// bucket's resolution (1/1024 of an octave, exact enough for a share). 0
// requests for a block that is not pooled.
func (p *blockPool) above(d time.Duration) (earlierN, earlier, recentN, recent int) {
	idx := bucketOf(d) >> p.level
	count := func(b *blockRange) (int, int) {
		if b.unpooled > 0 || b.hist.total == 0 {
			return 0, 0
		}
		return int(b.hist.above(idx)), int(b.hist.total)
	}
	earlierN, earlier = count(&p.earlier)
	recentN, recent = count(&p.recent)
	return earlierN, earlier, recentN, recent
}

// windowCount is one window's slow requests, of its requests.
type windowCount struct{ slow, requests int }

// dispersion is how many times a binomial share's variance a block's share
// of slow requests has, from how its windows' counts scatter about it: the
// Pearson χ² ÷ its degrees of freedom where that χ² is beyond a
// binomial's upper 1 % (dispersionZ), 1 otherwise. A neighbour's episode
// makes tens of requests in a row slow, in one window or two, not spread
// over the block: a block it passes through had a share of slow requests
// that says nothing of how warm the pod is, and its fall once the episode
// has left is not the pod getting faster (fewerSlow). Slow requests spread
// over the block (a cache's misses, a rare endpoint's cold calls) scatter
// as a binomial's and keep their full weight.
func dispersion(counts []windowCount) float64 {
	slow, requests := 0, 0
	for _, c := range counts {
		slow, requests = slow+c.slow, requests+c.requests
	}
	df := len(counts) - 1
	if df < 1 || slow == 0 || slow == requests {
		return 1
	}
	share := float64(slow) / float64(requests)
	chi2 := 0.0
	for _, c := range counts {
		want := share * float64(c.requests)
		d := float64(c.slow) - want
		chi2 += d * d / (want * (1 - share))
	}
	// χ²(df)'s upper quantile at dispersionZ (Wilson–Hilferty).
	k := 2 / (9 * float64(df))
	if chi2 <= float64(df)*math.Pow(1-k+dispersionZ*math.Sqrt(k), 3) {
		return 1
	}
	return chi2 / float64(df)
}

// dispersionZ places dispersion's bar at a binomial χ²'s upper 1 %: a pod
// whose slow requests are spread over its requests is judged as a
// binomial share in 99 % of looks.
const dispersionZ = 2.326
