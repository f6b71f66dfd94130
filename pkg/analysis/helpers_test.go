package analysis

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/danki-dev/danki/pkg/config"
)

// istioBuckets are Istio's and Envoy's default latency bucket bounds (ms).
var istioBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// histogramOf bins latencies (ms) into cumulative Prometheus-style buckets
// with a +Inf bucket.
func histogramOf(bounds []float64, latencies []float64) Histogram {
	counts := make([]float64, len(bounds)+1)
	for _, x := range latencies {
		counts[sort.SearchFloat64s(bounds, x)]++
	}
	return cumulative(bounds, counts)
}

func cumulative(bounds []float64, counts []float64) Histogram {
	h := Histogram{}
	cum := 0.0
	for i, c := range counts {
		cum += c
		ub := math.Inf(+1)
		if i < len(bounds) {
			ub = bounds[i]
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: ub, Count: cum})
	}
	return h
}

// lognormal is a latency distribution: median m ms, shape sigma, times scale.
type lognormal struct{ median, sigma, scale float64 }

// quantile is the true quantile of the distribution.
func (d lognormal) quantile(q float64) float64 {
	s := d.scale
	if s == 0 {
		s = 1
	}
	return s * d.median * math.Exp(d.sigma*math.Sqrt2*math.Erfinv(2*q-1))
}

// cdf is the distribution function at x ms.
func (d lognormal) cdf(x float64) float64 {
	s := d.scale
	if s == 0 {
		s = 1
	}
	return 0.5 * math.Erfc(-math.Log(x/(s*d.median))/(d.sigma*math.Sqrt2))
}

// sampleHistogram draws n latencies into Istio buckets. It draws the bucket
// directly (a uniform against the CDF at the bounds), which is the same
// distribution as drawing latencies and binning them, only faster.
func sampleHistogram(rng *rand.Rand, d lognormal, n int) Histogram {
	cdf := make([]float64, len(istioBuckets))
	for i, b := range istioBuckets {
		cdf[i] = d.cdf(b)
	}
	counts := make([]float64, len(istioBuckets)+1)
	for range n {
		counts[sort.SearchFloat64s(cdf, rng.Float64())]++
	}
	return cumulative(istioBuckets, counts)
}

// addHistograms adds b's counts to a (same bounds).
func addHistograms(a, b Histogram) Histogram {
	if len(a.Buckets) == 0 {
		return Histogram{Buckets: append([]Bucket(nil), b.Buckets...)}
	}
	out := Histogram{Buckets: append([]Bucket(nil), a.Buckets...)}
	for i := range out.Buckets {
		out.Buckets[i].Count += b.Buckets[i].Count
	}
	return out
}

// side wraps a histogram as a measured Side.
func side(name string, h Histogram) *Side {
	return &Side{Name: name, Latency: h, LatencyFrom: "test:" + name,
		Requests: Measured{From: "test:" + name + ":requests", Value: h.Count(), Found: true},
		Errors:   Measured{From: "test:" + name + ":errors"}}
}

func mustRules(t interface{ Fatalf(string, ...any) }, c Config) *Rules {
	r, err := Compile(c)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return r
}

// dur is a config duration from its text ("250ms"); number a config number
// ("1.5", "1%"), as they would be decoded; window a fixed window ("5m").
func dur(text string) *config.Duration {
	var d config.Duration
	if err := json.Unmarshal([]byte(strconv.Quote(text)), &d); err != nil {
		panic(err)
	}
	return &d
}

func number(text string) *config.Number {
	var n config.Number
	if err := json.Unmarshal([]byte(strconv.Quote(text)), &n); err != nil {
		panic(err)
	}
	return &n
}

func window(text string) Window { return Window{Duration: *dur(text)} }

// tailOnly is a fortio-sourced config with only the tail test (fortio needs
// no Prometheus address; the source itself is replaced in tests).
func tailOnly() Config {
	return Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: "c.json", Stable: "s.json"}, TailTest: &TailTestConfig{}}
}

// fixedSource returns a canned sample (or error).
type fixedSource struct {
	sample *Sample
	err    error
	window time.Duration
}

func (f *fixedSource) Fetch(_ context.Context, w time.Duration) (*Sample, error) {
	f.window = w
	return f.sample, f.err
}
