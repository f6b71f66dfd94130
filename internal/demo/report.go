package demo

import (
	"math"
	"slices"
	"time"
)

// Phase is a named stretch of a run, e.g. "before", "during", "after" a
// rollout. It holds the samples that started in [From, To): a sample
// starting exactly at To belongs to the next phase. A zero From or To leaves
// that side open (from the first sample, until the last).
type Phase struct {
	Name     string
	From, To time.Time
}

func (p Phase) contains(t time.Time) bool {
	return (p.From.IsZero() || !t.Before(p.From)) && (p.To.IsZero() || t.Before(p.To))
}

// PhaseStats is the user-visible latency of one phase. Percentiles are exact
// (nearest rank over the raw latencies) and include failed requests: a user
// waited for those too.
type PhaseStats struct {
	Name   string    `json:"name"`
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	Count  int       `json:"count"`
	Errors int       `json:"errors"`
	// Latencies; all zero when Count is 0.
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
}

// Marker labels a moment of a run on the chart, e.g. "setWeight 20",
// "warm-up done", "abort".
type Marker struct {
	At    time.Time `json:"at"`
	Label string    `json:"label"`
}

// Scenario is one rollout as users saw it: one column group of the side-by-
// side table and one panel of the chart.
type Scenario struct {
	Name            string        `json:"name"`
	Phases          []PhaseStats  `json:"phases"`
	RolloutDuration time.Duration `json:"rolloutDuration"`
	Markers         []Marker      `json:"markers,omitempty"`
}

// Summarize returns the statistics of each phase, in the order given.
// Samples need not be ordered; a sample may fall into several phases if
// they overlap. A phase whose To is not after its From is empty.
func Summarize(samples []Sample, phases []Phase) []PhaseStats {
	out := make([]PhaseStats, len(phases))
	lat := make([]time.Duration, 0, len(samples)) // reused across phases
	for i, p := range phases {
		lat = lat[:0]
		st := PhaseStats{Name: p.Name, From: p.From, To: p.To}
		for _, s := range samples {
			if !p.contains(s.Start) {
				continue
			}
			lat = append(lat, s.Latency)
			if !s.OK() {
				st.Errors++
			}
		}
		st.Count = len(lat)
		if len(lat) > 0 {
			slices.Sort(lat)
			st.P50 = percentile(lat, 50)
			st.P90 = percentile(lat, 90)
			st.P99 = percentile(lat, 99)
			st.P999 = percentile(lat, 99.9)
			st.Max = lat[len(lat)-1]
		}
		out[i] = st
	}
	return out
}

// percentile returns the nearest-rank p-th percentile of sorted latencies:
// the smallest value with at least p % of the values at or below it. It is
// always one of the measured values, never an interpolation.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon absorbs float error (99.9/100*1000 is 999.0000000000001).
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
