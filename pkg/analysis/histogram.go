package analysis

import (
	"math"
	"sort"
)

// Bucket is one cumulative histogram bucket: Count observations were at most
// UpperBound milliseconds (Prometheus' "le" label). Counts are float64 because
// PromQL's increase() extrapolates and returns non-integer counts.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      float64 `json:"count"`
}

// Histogram is a latency histogram in milliseconds: cumulative buckets sorted
// by upper bound, as Prometheus stores them. Histograms from Prometheus end
// with a +Inf bucket and know nothing finer than their bucket bounds.
// Histograms from fortio also carry the raw minimum and maximum (HasRaw):
// their first bucket starts at Min and their last ends at Max.
type Histogram struct {
	Buckets []Bucket `json:"buckets"`
	Min     float64  `json:"min,omitempty"`
	Max     float64  `json:"max,omitempty"`
	HasRaw  bool     `json:"hasRaw,omitempty"`
}

// normalize sorts the buckets, merges buckets with the same upper bound
// (Prometheus' coalesceBuckets) and makes the cumulative counts monotonic
// (Prometheus' ensureMonotonic): increase() over separate bucket series can
// come out slightly non-monotonic.
func (h *Histogram) normalize() {
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].UpperBound < h.Buckets[j].UpperBound })
	out := h.Buckets[:0]
	for _, b := range h.Buckets {
		if n := len(out); n > 0 && out[n-1].UpperBound == b.UpperBound {
			out[n-1].Count += b.Count
			continue
		}
		out = append(out, b)
	}
	h.Buckets = out
	running := math.Inf(-1)
	for i := range h.Buckets {
		if h.Buckets[i].Count < running {
			h.Buckets[i].Count = running
		}
		running = h.Buckets[i].Count
	}
}

// Count is the number of observations (the +Inf bucket's count).
func (h Histogram) Count() float64 {
	if len(h.Buckets) == 0 {
		return 0
	}
	return h.Buckets[len(h.Buckets)-1].Count
}

// usable reports whether quantiles can be computed: Prometheus needs the +Inf
// bucket to know the total; raw histograms end at their maximum instead.
func (h Histogram) usable() bool {
	n := len(h.Buckets)
	if n == 0 || h.Count() <= 0 {
		return false
	}
	if h.HasRaw {
		return true
	}
	return n >= 2 && math.IsInf(h.Buckets[n-1].UpperBound, +1)
}

// lowerBound is where bucket i starts.
func (h Histogram) lowerBound(i int) float64 {
	if i > 0 {
		return h.Buckets[i-1].UpperBound
	}
	if h.HasRaw {
		return h.Min
	}
	return 0
}

// bucketOf returns the index of the bucket holding rank q·Count, searching as
// Prometheus does: the first bucket whose cumulative count reaches the rank.
func (h Histogram) bucketOf(q float64) int {
	rank := q * h.Count()
	n := len(h.Buckets)
	if !h.HasRaw {
		n-- // Prometheus never searches into +Inf; it lands there by exhaustion.
	}
	return sort.Search(n, func(i int) bool { return h.Buckets[i].Count >= rank })
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) in milliseconds exactly as
// Prometheus' histogram_quantile does: find the bucket holding the rank and
// interpolate linearly inside it, assuming observations spread evenly between
// its bounds. A rank in the +Inf bucket returns the highest finite bound.
// Raw (fortio) histograms interpolate from Min in the first bucket and are
// clamped to [Min, Max]. It returns NaN when there is no data.
//
// Bucket-resolution caveat: the result is only as fine as the buckets. With
// Istio's and Envoy's default bounds (… 10 25 50 100 250 …ms) a true p99 of
// 15 ms reads as ~24 ms: all that is known is that it lies in (10, 25].
func (h Histogram) Quantile(q float64) float64 {
	if !h.usable() || math.IsNaN(q) {
		return math.NaN()
	}
	q = math.Max(0, math.Min(1, q))
	b := h.bucketOf(q)
	n := len(h.Buckets)
	if b >= n-1 && !h.HasRaw {
		return h.Buckets[n-2].UpperBound
	}
	if b >= n {
		b = n - 1
	}
	if b == 0 && !h.HasRaw && h.Buckets[0].UpperBound <= 0 {
		return h.Buckets[0].UpperBound
	}
	start, end := h.lowerBound(b), h.Buckets[b].UpperBound
	count, rank := h.Buckets[b].Count, q*h.Count()
	if b > 0 {
		count -= h.Buckets[b-1].Count
		rank -= h.Buckets[b-1].Count
	}
	v := end
	if count > 0 {
		v = start + (end-start)*(rank/count)
	}
	if h.HasRaw {
		v = math.Max(h.Min, math.Min(h.Max, v))
	}
	return v
}

// AboveTop reports whether the q-quantile of a Prometheus histogram (one
// without raw data) lies in the +Inf bucket, and the highest finite bound
// top. Quantile then returns top, as histogram_quantile does, but all the
// data says is "above top": a limit at or below top is breached, and one
// above it cannot be decided from these buckets.
func (h Histogram) AboveTop(q float64) (top float64, above bool) {
	if !h.usable() || h.HasRaw || math.IsNaN(q) {
		return 0, false
	}
	q = math.Max(0, math.Min(1, q))
	n := len(h.Buckets)
	if h.bucketOf(q) < n-1 {
		return 0, false
	}
	return h.Buckets[n-2].UpperBound, true
}

// nonFinite returns the first bucket whose count or bound is NaN or whose
// count is infinite: data no quantile or test can be computed from.
func (h Histogram) nonFinite() (Bucket, bool) {
	for _, b := range h.Buckets {
		if math.IsNaN(b.Count) || math.IsInf(b.Count, 0) || math.IsNaN(b.UpperBound) {
			return b, true
		}
	}
	if math.IsNaN(h.Min) || math.IsNaN(h.Max) || math.IsInf(h.Min, 0) || math.IsInf(h.Max, 0) {
		return Bucket{UpperBound: h.Max, Count: math.NaN()}, true
	}
	return Bucket{}, false
}

// BucketBound returns the upper bound of the bucket that holds the q-quantile:
// the finest threshold the data can resolve at or above it. It is +Inf when
// the quantile lies in the +Inf bucket and NaN when there is no data.
func (h Histogram) BucketBound(q float64) float64 {
	if !h.usable() {
		return math.NaN()
	}
	b := h.bucketOf(q)
	if b >= len(h.Buckets) {
		b = len(h.Buckets) - 1
	}
	return h.Buckets[b].UpperBound
}

// CountAtOrBelow estimates how many observations were ≤ x. It is exact when x
// is one of the bucket bounds (the tail test always asks for one) and
// interpolates linearly inside a bucket otherwise.
func (h Histogram) CountAtOrBelow(x float64) float64 {
	n := len(h.Buckets)
	if n == 0 {
		return 0
	}
	i := sort.Search(n, func(i int) bool { return h.Buckets[i].UpperBound >= x })
	if i == n || math.IsInf(x, +1) {
		return h.Count()
	}
	if h.Buckets[i].UpperBound == x {
		return h.Buckets[i].Count
	}
	start := h.lowerBound(i)
	prev := 0.0
	if i > 0 {
		prev = h.Buckets[i-1].Count
	}
	if x <= start {
		return prev
	}
	end := h.Buckets[i].UpperBound
	if math.IsInf(end, +1) {
		return prev // nothing is known inside the +Inf bucket
	}
	return prev + (h.Buckets[i].Count-prev)*(x-start)/(end-start)
}

// boundsAround reports the bucket (lower, upper] that contains x, to explain
// how coarse a comparison against x is.
func (h Histogram) boundsAround(x float64) (lower, upper float64, ok bool) {
	for i, b := range h.Buckets {
		if x <= b.UpperBound {
			return h.lowerBound(i), b.UpperBound, true
		}
	}
	return 0, 0, false
}
