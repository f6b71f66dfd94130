package latency

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const ms = time.Millisecond

// oneTo returns the latencies 1 ms … n ms in random order.
func oneTo(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * ms
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestSummarizeIsExactNearestRank(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want Summary
	}{
		// Nearest rank: the ceil(p/100·n)-th smallest value.
		{1000, Summary{Count: 1000, Min: ms, Mean: 500500 * time.Microsecond, P50: 500 * ms, P90: 900 * ms, P99: 990 * ms, P999: 999 * ms, Max: 1000 * ms}},
		{100, Summary{Count: 100, Min: ms, Mean: 50500 * time.Microsecond, P50: 50 * ms, P90: 90 * ms, P99: 99 * ms, P999: 100 * ms, Max: 100 * ms}},
		// With 20 values p99 is the maximum, p50 the 10th value.
		{20, Summary{Count: 20, Min: ms, Mean: 10500 * time.Microsecond, P50: 10 * ms, P90: 18 * ms, P99: 20 * ms, P999: 20 * ms, Max: 20 * ms}},
		{1, Summary{Count: 1, Min: ms, Mean: ms, P50: ms, P90: ms, P99: ms, P999: ms, Max: ms}},
		{0, Summary{}},
	} {
		if got := Summarize(oneTo(tc.n), 0); got != tc.want {
			t.Errorf("1..%d ms:\n got %+v\nwant %+v", tc.n, got, tc.want)
		}
	}
	if got := Summarize(oneTo(10), 3); got.Errors != 3 || got.Count != 10 {
		t.Errorf("errors: %+v", got)
	}
}

func TestPercentileAtExactRanks(t *testing.T) {
	sorted := make([]time.Duration, 1000)
	for i := range sorted {
		sorted[i] = time.Duration(i + 1)
	}
	// 99.9/100*1000 is 999.0000000000001 in floating point: still rank 999.
	for p, want := range map[float64]time.Duration{99.9: 999, 50: 500, 0: 1, 100: 1000, 0.05: 1} {
		if got := Percentile(sorted, p); got != want {
			t.Errorf("p%g = %d, want %d", p, got, want)
		}
	}
	if Percentile(nil, 99) != 0 {
		t.Error("percentile of nothing should be 0")
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		450 * time.Microsecond:   "0.450ms",
		3517 * time.Microsecond:  "3.52ms",
		42 * time.Millisecond:    "42.0ms",
		100 * time.Millisecond:   "100ms",
		999 * time.Millisecond:   "999ms",
		1396 * time.Millisecond:  "1.40s",
		12500 * time.Millisecond: "12.5s",
		20 * time.Second:         "20.0s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%s) = %q, want %q", d, got, want)
		}
	}
}

func BenchmarkSummarize(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			src := oneTo(n)
			lat := make([]time.Duration, n)
			b.ReportAllocs()
			for b.Loop() {
				copy(lat, src)
				Summarize(lat, 0)
			}
		})
	}
}

func TestFormatMsEdges(t *testing.T) {
	for v, want := range map[float64]string{math.NaN(): "NaN", math.Inf(+1): "+Inf", 0.5: "0.500ms", 1500: "1.50s", 123.4: "123ms", 60: "60.0ms"} {
		if got := FormatMs(v); got != want {
			t.Errorf("FormatMs(%g) = %q, want %q", v, got, want)
		}
	}
}
