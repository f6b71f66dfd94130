package latency

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary is the latency of a set of requests. Percentiles are exact
// (nearest rank) and include failed requests: a user waited for those too.
// All latencies are zero when Count is 0.
type Summary struct {
	Count  int           `json:"count"`
	Errors int           `json:"errors"`
	Min    time.Duration `json:"min"`
	Mean   time.Duration `json:"mean"`
	P50    time.Duration `json:"p50"`
	P90    time.Duration `json:"p90"`
	P99    time.Duration `json:"p99"`
	P999   time.Duration `json:"p999"`
	Max    time.Duration `json:"max"`
}

// Summarize sorts latencies in place and summarizes them; errors is how
// many of those requests failed.
func Summarize(latencies []time.Duration, errors int) Summary {
	s := Summary{Count: len(latencies), Errors: errors}
	if len(latencies) == 0 {
		return s
	}
	// Min, mean and max as fortio's stats.Counter has them (a float64 sum
	// in nanoseconds, in the requests' order: exact for any realistic
	// total), without its package: the stopping rule imports this one, and
	// fortio's stats bring its logger and net/http along.
	sum := 0.0
	for _, d := range latencies {
		sum += float64(d)
	}
	slices.Sort(latencies)
	s.Min, s.Mean, s.Max = latencies[0], time.Duration(sum/float64(len(latencies))), latencies[len(latencies)-1]
	s.P50 = Percentile(latencies, 50)
	s.P90 = Percentile(latencies, 90)
	s.P99 = Percentile(latencies, 99)
	s.P999 = Percentile(latencies, 99.9)
	return s
}

// Percentile returns the nearest-rank p-th percentile of sorted latencies:
// the smallest value with at least p % of the values at or below it. It is
// always one of the values, never an interpolation; 0 when there are none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon absorbs float error (99.9/100*1000 is 999.0000000000001).
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Format writes a latency with about three significant digits: in
// milliseconds below one second ("0.450ms", "3.52ms", "42.0ms", "396ms"),
// in seconds from one second on ("1.40s", "12.5s").
func Format(d time.Duration) string { return FormatMs(float64(d) / float64(time.Millisecond)) }

// FormatMs is Format for a latency in milliseconds, the unit of latency
// histograms' bucket bounds. NaN reads "NaN"; an infinite value "+Inf".
func FormatMs(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "NaN"
	case math.IsInf(ms, 0):
		return "+Inf"
	case ms >= 10000:
		return fmt.Sprintf("%.1fs", ms/1000)
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 100:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1fms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.2fms", ms)
	default:
		return fmt.Sprintf("%.3fms", ms)
	}
}
