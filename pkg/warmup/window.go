package warmup

import (
	"time"

	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// WindowStats is the latency of one window of consecutive requests to one
// target (or to the stable pool), with exact nearest-rank percentiles: the
// stopping rule's window (rule.Window).
type WindowStats = rule.Window

// sample is one completed request.
type sample struct {
	latency time.Duration
	ok      bool
}

// computeWindow summarizes one window's samples. It keeps the latencies,
// sorted, for the stopping rule's histogram of the window (and for
// Options.KeepLatencies): one allocation per window, which the summary's
// in-place sort reuses.
func computeWindow(samples []sample) WindowStats {
	lat := make([]time.Duration, len(samples))
	errs := 0
	for i, s := range samples {
		lat[i] = s.latency
		if !s.ok {
			errs++
		}
	}
	return rule.NewWindow(lat, errs) // sorts lat
}

// shed drops the newest window's latencies once the stopping rule has its
// histogram (the rule judged it before), unless Options.KeepLatencies: a run's
// memory then does not grow by a latency per request.
func (c *coordinator) shed(windows []WindowStats) {
	if n := len(windows); n > 0 && !c.opts.KeepLatencies {
		windows[n-1].DropLatencies()
	}
}

// trend renders the last n complete windows' p99 for failure messages
// (rule.Trend).
func trend(windows []WindowStats, n int) string { return rule.Trend(windows, n) }
