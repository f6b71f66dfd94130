package rule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// Window is the latency of one window of consecutive requests to one
// target (or to the stable pool), with exact nearest-rank percentiles.
type Window struct {
	// Index counts windows from 1.
	Index int `json:"index"`
	// Requests is the number of requests to this target so far, this window
	// included.
	Requests int64 `json:"requests"`
	// Summary's Count is the number of requests in this window (the window
	// size, or fewer for the last, partial window).
	latency.Summary
	// Partial marks the requests left over when the load stopped; partial
	// windows never count towards convergence.
	Partial bool `json:"partial,omitempty"`

	// sorted are the window's latencies in order, kept in memory only
	// (never in a status): the stopping rule takes its histogram from them
	// (blockPool); each holder of the window drops them once it no longer
	// needs them (DropLatencies).
	sorted []time.Duration
}

// NewWindow summarizes one window of requests: their latencies (sorted in
// place and kept, for the rule's histogram of the window) and how many of
// them failed. Index and Requests are the caller's to set.
func NewWindow(latencies []time.Duration, errors int) Window {
	w := Window{Summary: latency.Summarize(latencies, errors)} // sorts latencies
	w.sorted = latencies
	return w
}

// Latencies are the window's latencies, sorted; nil once dropped, and in
// a window decoded from JSON or built from a summary.
func (w *Window) Latencies() []time.Duration { return w.sorted }

// DropLatencies lets the window's latencies go (its summary stays): a
// warm-up that keeps a window per 100 requests does not also keep every
// request's latency.
func (w *Window) DropLatencies() { w.sorted = nil }

// completePrefix is windows without the partial one: only the last window
// can be partial (a warm-up adds it when its load stops). It returns
// windows itself, not a copy, so the target's pool follows its windows
// from check to check.
func completePrefix(windows []Window) []Window {
	n := len(windows)
	if n > 0 && windows[n-1].Partial {
		windows = windows[:n-1]
	}
	if slices.ContainsFunc(windows, func(w Window) bool { return w.Partial }) {
		return completeWindows(windows) // never built so; judged as before
	}
	return windows
}

// completeWindows drops the partial windows (left over when load stops).
func completeWindows(windows []Window) []Window {
	complete := make([]Window, 0, len(windows))
	for _, w := range windows {
		if !w.Partial {
			complete = append(complete, w)
		}
	}
	return complete
}

// Trend renders the last few windows' p99 for failure messages: "p99 of
// windows 8–10: 41.2ms → 30.8ms → 22.0ms (window 1: 412ms); last p50 3.10ms,
// still falling: …".
func Trend(windows []Window, n int) string {
	complete := completeWindows(windows)
	if len(complete) == 0 {
		return "no complete window"
	}
	first := max(0, len(complete)-n)
	var vals []string
	for _, w := range complete[first:] {
		vals = append(vals, latency.Format(w.P99))
	}
	lastW := complete[len(complete)-1]
	s := fmt.Sprintf("p99 of windows %d–%d: %s", complete[first].Index, lastW.Index, strings.Join(vals, " → "))
	if first > 0 {
		s += fmt.Sprintf(" (window 1: %s)", latency.Format(complete[0].P99))
	}
	s += "; last p50 " + latency.Format(lastW.P50)
	falling := len(complete) >= 3
	for i := max(1, len(complete)-3); i < len(complete); i++ {
		if complete[i].P99 >= complete[i-1].P99 {
			falling = false
		}
	}
	if falling {
		s += ", still falling: give it more time or requests (deadline, maxRequests)"
	} else if len(complete) >= 3 {
		s += ", not settling: check errors, or widen tolerance / window"
	}
	return s
}
