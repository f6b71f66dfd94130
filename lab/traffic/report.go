package traffic

import (
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// Phase is a named stretch of a run, e.g. "before", "during", "after" a
// rollout. It holds the samples that started in [From, To): a sample
// starting exactly at To belongs to the next phase. A zero From or To leaves
// that side open (from the first sample, until the last).
type Phase struct {
	Name     string
	From, To time.Time
}

// Contains reports whether a sample started at t belongs to the phase.
func (p Phase) Contains(t time.Time) bool {
	return (p.From.IsZero() || !t.Before(p.From)) && (p.To.IsZero() || t.Before(p.To))
}

// PhaseStats is the user-visible latency of one phase: exact percentiles
// over the raw latencies, failed requests included (a user waited for
// those too).
type PhaseStats struct {
	Name string    `json:"name"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	latency.Summary
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
		out[i] = PhaseStats{Name: p.Name, From: p.From, To: p.To, Summary: summarizeIn(samples, &lat, p.Contains)}
	}
	return out
}

// SummarizeByName pools the phases that share a name (an event repeated):
// one PhaseStats per name, in first-seen order, over the samples in any
// phase of that name; From is the first one's, To the last one's.
func SummarizeByName(samples []Sample, phases []Phase) []PhaseStats {
	var out []PhaseStats
	lat := make([]time.Duration, 0, len(samples))
	for _, p := range phases {
		if slices.ContainsFunc(out, func(s PhaseStats) bool { return s.Name == p.Name }) {
			continue
		}
		st := PhaseStats{Name: p.Name, From: p.From, To: p.To}
		var same []Phase
		for _, q := range phases {
			if q.Name == p.Name {
				same = append(same, q)
				st.To = q.To
			}
		}
		st.Summary = summarizeIn(samples, &lat, func(t time.Time) bool {
			return slices.ContainsFunc(same, func(q Phase) bool { return q.Contains(t) })
		})
		out = append(out, st)
	}
	return out
}

// summarizeIn summarises the samples that started where in says; lat is
// scratch space, reused between calls.
func summarizeIn(samples []Sample, lat *[]time.Duration, in func(time.Time) bool) latency.Summary {
	*lat = (*lat)[:0]
	errs := 0
	for _, s := range samples {
		if !in(s.Start) {
			continue
		}
		*lat = append(*lat, s.Latency)
		if !s.OK() {
			errs++
		}
	}
	return latency.Summarize(*lat, errs)
}
