package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// TestGateTailsPlaceSlowRequestsInTime: two scale-ups, each followed by a
// minute of 1 ms requests with a 50 ms one 25 s (first) and 45 s (second)
// after; the steady minutes before are 2 ms. The bins count only the
// requests over the steady p99.9, in the 10 s they started in, and the
// slowest list names them with their time after the event.
func TestGateTailsPlaceSlowRequestsInTime(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	events := []GateEvent{{Name: EventScaleUp, At: t0.Add(time.Minute)}, {Name: EventScaleUp, At: t0.Add(3 * time.Minute)}}
	var samples []traffic.Sample
	for i, e := range events {
		samples = append(samples, samplesAt(e.At.Add(-time.Minute), time.Minute, 2*time.Millisecond, 0)...)
		samples = append(samples, samplesAt(e.At, time.Minute, time.Millisecond, 0)...)
		samples = append(samples, traffic.Sample{Start: e.At.Add(time.Duration(25+20*i) * time.Second), Latency: 50 * time.Millisecond, Code: 200})
	}
	slices.SortFunc(samples, func(a, b traffic.Sample) int { return a.Start.Compare(b.Start) })
	phases := gatePhases(events, time.Minute, time.Minute)
	pooled := traffic.SummarizeByName(samples, phases)

	tails := gateTails(events, samples, pooled, time.Minute)
	if len(tails) != 1 || tails[0].Event != EventScaleUp {
		t.Fatalf("tails = %+v, want one for the scale-up", tails)
	}
	tl := tails[0]
	if tl.Threshold != 2*time.Millisecond {
		t.Errorf("threshold = %v, want the steady p99.9, 2 ms", tl.Threshold)
	}
	if want := []int{0, 0, 1, 0, 1, 0}; !slices.Equal(tl.Slower, want) {
		t.Errorf("slower per bin = %v, want %v", tl.Slower, want)
	}
	if tl.Requests[0] != 2000 || tl.Requests[2] != 2001 || tl.Requests[4] != 2001 {
		t.Errorf("requests per bin = %v, want 2000 per 10 s of two events, one more in bins 2 and 4", tl.Requests)
	}

	slow := slowestAfter(events, samples, time.Minute)
	if len(slow) != 2*slowestPerEvent {
		t.Fatalf("slowest has %d requests, want %d per event", len(slow), slowestPerEvent)
	}
	if s := slow[0]; s.Latency != 50*time.Millisecond || s.After != 25*time.Second || !s.EventAt.Equal(events[0].At) {
		t.Errorf("first event's slowest = %+v, want 50 ms at 25 s", s)
	}
	if s := slow[slowestPerEvent]; s.Latency != 50*time.Millisecond || s.After != 45*time.Second {
		t.Errorf("second event's slowest = %+v, want 50 ms at 45 s", s)
	}
}

// The report's table puts each way's counts in its 10 s columns, with the
// pods' start and Ready times beside them.
func TestWriteGateTails(t *testing.T) {
	r := &GateBenchResult{QPS: 40, Events: []GateEvent{{Name: EventScaleUp, Way: GateWays[2].Name}}}
	r.Ways = append(r.Ways, GateWayResult{GateWay: GateWays[2],
		Tails: []GateTail{{Event: EventScaleUp, Threshold: 12600 * time.Microsecond, Slower: []int{15, 2, 4, 0, 2, 4}, Requests: []int{1199, 1200, 1201, 1200, 1200, 1200}}},
		Pods:  []GatePod{{Name: "p", Event: EventScaleUp, Ready: true, Started: true, StartedAfter: time.Second, ReadyAfter: 73 * time.Second}}})
	var b strings.Builder
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| danki warm gate | " + EventScaleUp + " | 12.6 | 15 / 1199 | 2 / 1200 | 4 / 1201 | 0 / 1200 | 2 / 1200 | 4 / 1200 | 73 s |",
		"p (" + EventScaleUp + "): containers ready 1 s, Ready 73 s after",
		"| way | event | steady p99.9 | 0–10 s | 10–20 s | 20–30 s | 30–40 s | 40–50 s | 50–60 s | new pods Ready after |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
