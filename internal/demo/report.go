package demo

import (
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

func (p Phase) contains(t time.Time) bool {
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
		lat = lat[:0]
		errs := 0
		st := PhaseStats{Name: p.Name, From: p.From, To: p.To}
		for _, s := range samples {
			if !p.contains(s.Start) {
				continue
			}
			lat = append(lat, s.Latency)
			if !s.OK() {
				errs++
			}
		}
		st.Summary = latency.Summarize(lat, errs)
		out[i] = st
	}
	return out
}
