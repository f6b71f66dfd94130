package traffic

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// WarmupBucket is the latency of a range of requests, counted from the first
// request a service received: request 1, requests 2–10, 11–100, 101–1,000
// and so on. A cold JVM service shows falling latency from bucket to bucket
// until it is warm, as in the field reports' "warm-up calls vs latency"
// tables.
type WarmupBucket struct {
	// First and Last are 1-based request numbers, both included. The last
	// bucket ends at the last sample, so it may be shorter than a decade.
	First int `json:"first"`
	Last  int `json:"last"`
	latency.Summary
}

// Label is the bucket's request range as the tables show it ("2–10").
func (b WarmupBucket) Label() string {
	if b.First == b.Last {
		return fmtCount(b.First)
	}
	return fmtCount(b.First) + "–" + fmtCount(b.Last)
}

// WarmupCurve numbers the samples in start order (1 = the earliest) and
// returns the statistics of the request ranges 1, 2–10, 11–100, … Pass the
// requests one service instance (or one version) received, from its first
// on: the numbering starts at the first sample given.
func WarmupCurve(samples []Sample) []WarmupBucket {
	ordered := slices.Clone(samples)
	slices.SortStableFunc(ordered, func(a, b Sample) int { return a.Start.Compare(b.Start) })
	var out []WarmupBucket
	var lat []time.Duration
	for first, last := 1, 1; first <= len(ordered); first, last = last+1, last*10 {
		end := min(last, len(ordered))
		lat, errs := lat[:0], 0
		for _, s := range ordered[first-1 : end] {
			lat = append(lat, s.Latency)
			if !s.OK() {
				errs++
			}
		}
		out = append(out, WarmupBucket{First: first, Last: end, Summary: latency.Summarize(lat, errs)})
	}
	return out
}

// WriteWarmupTable writes a warm-up curve, one row per bucket: requests,
// count, min, mean, p50, p90, p99, max and errors.
func WriteWarmupTable(w io.Writer, f Format, buckets []WarmupBucket) error {
	t := table{header: []string{"requests", "count", "min", "mean", "p50", "p90", "p99", "max", "errors"}}
	for _, b := range buckets {
		t.rows = append(t.rows, []string{b.Label(), fmtCount(b.Count), latency.Format(b.Min), latency.Format(b.Mean),
			latency.Format(b.P50), latency.Format(b.P90), latency.Format(b.P99), latency.Format(b.Max), fmt.Sprint(b.Errors)})
	}
	var sb strings.Builder
	t.write(&sb, f)
	_, err := io.WriteString(w, sb.String())
	return err
}
