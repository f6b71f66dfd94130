package scenario

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// GateNoise is what one way's users saw over consecutive minutes with
// nothing happening in the lab but the users themselves: every minute ÷ the
// one before. It is the resolution of the bench's ratios on this machine —
// an event's ratio within this spread cannot be told from no event at all.
type GateNoise struct {
	Way     string               `json:"way"`
	Minutes []traffic.PhaseStats `json:"minutes"`
	Ratios  []GateRatio          `json:"ratios"` // minute i ÷ minute i-1
	Summary GateNoiseSummary     `json:"summary"`
}

// GateNoiseSummary condenses a way's minute-to-minute ratios.
type GateNoiseSummary struct {
	Pairs int `json:"pairs"`
	// MedianP99 etc.: the median and the largest ratio; AboveGoalP99: how
	// many pairs were above the goal (1.2×) with nothing happening.
	MedianP99, MaxP99, MedianP999, MaxP999 float64
	AboveGoalP99, AboveGoalP999            int
}

// noisePhases are n consecutive minutes from start.
func noisePhases(start time.Time, n int, minute time.Duration) []traffic.Phase {
	out := make([]traffic.Phase, n)
	for i := range out {
		from := start.Add(time.Duration(i) * minute)
		out[i] = traffic.Phase{Name: fmt.Sprintf("minute %d", i+1), From: from, To: from.Add(minute)}
	}
	return out
}

// gateNoise divides every minute by the one before and summarises.
func gateNoise(way string, minutes []traffic.PhaseStats) GateNoise {
	n := GateNoise{Way: way, Minutes: minutes}
	var p99, p999 []float64
	for i := 1; i < len(minutes); i++ {
		a, b := minutes[i], minutes[i-1]
		if a.Count == 0 || b.Count == 0 || b.P99 <= 0 || b.P999 <= 0 {
			continue
		}
		r := phaseRatio(a.Name, a, b)
		n.Ratios = append(n.Ratios, r)
		p99, p999 = append(p99, r.P99), append(p999, r.P999)
	}
	s := &n.Summary
	s.Pairs = len(p99)
	s.MedianP99, s.MaxP99, s.AboveGoalP99 = spread(p99)
	s.MedianP999, s.MaxP999, s.AboveGoalP999 = spread(p999)
	return n
}

// spread is the median, the largest value and how many are above the goal.
func spread(xs []float64) (mid, largest float64, above int) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	for _, x := range s {
		if x > gateGoalRatio {
			above++
		}
	}
	return median(s), s[len(s)-1], above
}

// writeGateNoise writes the noise table.
func writeGateNoise(b *strings.Builder, noise []GateNoise) {
	if len(noise) == 0 {
		return
	}
	b.WriteString("## The lab's noise: every quiet minute ÷ the one before (nothing happening but the users)\n\n")
	fmt.Fprintf(b, "| way | pairs | p99: median | largest | above %.1f× | p99.9: median | largest | above %.1f× |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", gateGoalRatio, gateGoalRatio)
	for _, n := range noise {
		s := n.Summary
		fmt.Fprintf(b, "| %s | %d | %s | %s | %d | %s | %s | %d |\n", n.Way, s.Pairs, fmtRatio(s.MedianP99), fmtRatio(s.MaxP99), s.AboveGoalP99, fmtRatio(s.MedianP999), fmtRatio(s.MaxP999), s.AboveGoalP999)
	}
	b.WriteString("\n")
}
