package scenario

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// tailBin is the width of GateTail's bins: six per minute after an event,
// fine enough to tell a pod's start (its first seconds) from its warm-up
// and from its first user requests (after Ready).
const tailBin = 10 * time.Second

// slowestPerEvent is how many of each event's slowest requests the JSON
// keeps: the pooled p99.9 of three repeated minutes at 40 qps is about the
// 7th slowest of them all.
const slowestPerEvent = 10

// GateTail says where in time one event kind's excess tail sits: per
// tailBin after the events (repeats pooled), how many user requests were
// slower than the steady state's p99.9 before those events. Without an
// effect about one in a thousand requests of every bin is.
type GateTail struct {
	Event string `json:"event"`
	// Threshold is the pooled steady state's p99.9 (the ratio's divisor).
	Threshold time.Duration `json:"threshold"`
	// Slower[i] of Requests[i] requests in [i×10 s, (i+1)×10 s) after the
	// event were slower than Threshold.
	Slower   []int `json:"slower"`
	Requests []int `json:"requests"`
}

// GateSlowRequest is one of the slowest user requests after an event.
type GateSlowRequest struct {
	Event   string        `json:"event"`
	EventAt time.Time     `json:"eventAt"`
	After   time.Duration `json:"after"` // from the event to the request's start
	Latency time.Duration `json:"latency"`
	Code    int           `json:"code"`
}

// gateTails bins each event kind's minutes after against the pooled steady
// state before them (phases as SummarizeByName returns them).
func gateTails(events []GateEvent, samples []traffic.Sample, pooled []traffic.PhaseStats, after time.Duration) []GateTail {
	var out []GateTail
	for _, p := range eventPhases {
		i := slices.IndexFunc(pooled, func(s traffic.PhaseStats) bool { return s.Name == p.before && s.Count > 0 })
		if i < 0 || !slices.ContainsFunc(events, func(e GateEvent) bool { return e.Name == p.event }) {
			continue
		}
		bins := int((after + tailBin - 1) / tailBin)
		t := GateTail{Event: p.event, Threshold: pooled[i].P999, Slower: make([]int, bins), Requests: make([]int, bins)}
		for _, e := range events {
			if e.Name != p.event {
				continue
			}
			for _, s := range samplesIn(samples, e.At, e.At.Add(after)) {
				bin := int(s.Start.Sub(e.At) / tailBin)
				t.Requests[bin]++
				if s.Latency > t.Threshold {
					t.Slower[bin]++
				}
			}
		}
		out = append(out, t)
	}
	return out
}

// slowestAfter is each event's slowest requests in the minute after it,
// slowest first.
func slowestAfter(events []GateEvent, samples []traffic.Sample, after time.Duration) []GateSlowRequest {
	var out []GateSlowRequest
	for _, e := range events {
		in := slices.Clone(samplesIn(samples, e.At, e.At.Add(after)))
		slices.SortFunc(in, func(a, b traffic.Sample) int { return cmp.Compare(b.Latency, a.Latency) })
		for _, s := range in[:min(len(in), slowestPerEvent)] {
			out = append(out, GateSlowRequest{Event: e.Name, EventAt: e.At, After: s.Start.Sub(e.At), Latency: s.Latency, Code: s.Code})
		}
	}
	return out
}

// samplesIn is the samples that started in [from, to); samples are ordered
// by start (traffic.Result.Samples).
func samplesIn(samples []traffic.Sample, from, to time.Time) []traffic.Sample {
	lo, _ := slices.BinarySearchFunc(samples, from, func(s traffic.Sample, t time.Time) int { return s.Start.Compare(t) })
	hi, _ := slices.BinarySearchFunc(samples, to, func(s traffic.Sample, t time.Time) int { return s.Start.Compare(t) })
	return samples[lo:hi]
}

// writeGateTails is the report's table of GateTail: per way and event, the
// requests over the steady p99.9 in each 10 s after the event, with the
// new pods' Ready times to read them against.
func writeGateTails(b *strings.Builder, ways []GateWayResult) {
	if !slices.ContainsFunc(ways, func(w GateWayResult) bool { return len(w.Tails) > 0 }) {
		return
	}
	b.WriteString("## When the slow requests came: requests slower than the steady p99.9, per 10 s after the event (repeats pooled)\n\n")
	b.WriteString("Without any effect about 1 in 1,000 requests of each column is; read them against when the new pods became Ready.\n\n")
	bins := 0 // as many columns as the longest --after has bins
	for _, w := range ways {
		for _, t := range w.Tails {
			bins = max(bins, len(t.Slower))
		}
	}
	head, align := []string{"way", "event", "steady p99.9"}, "|---|---|---:|"
	for i := range bins {
		from := time.Duration(i) * tailBin
		head = append(head, fmt.Sprintf("%.0f–%.0f s", from.Seconds(), (from+tailBin).Seconds()))
		align += "---:|"
	}
	b.WriteString("| " + strings.Join(head, " | ") + " | new pods Ready after |\n" + align + "---|\n")
	for _, w := range ways {
		for _, t := range w.Tails {
			row := []string{w.Name, t.Event, ms(t.Threshold)}
			for i := range bins {
				if i < len(t.Slower) {
					row = append(row, fmt.Sprintf("%d / %d", t.Slower[i], t.Requests[i]))
				} else {
					row = append(row, "–")
				}
			}
			b.WriteString("| " + strings.Join(row, " | ") + " | " + readyAfterList(w.Pods, t.Event) + " |\n")
		}
	}
	b.WriteString("\n")
}
