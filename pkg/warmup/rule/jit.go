package rule

import (
	"fmt"
	"strings"
)

// The JVM's own signal (the warm-up reads it from the pod's metrics page):
// a JIT makes a pod faster in steps, so a latency plateau between two
// steps looks converged; its cumulative compile time still rising is the
// evidence that a step is still coming.

// Reading is the JIT's cumulative compile time, in ms (MS), read when the
// target had been sent Requests requests.
type Reading struct {
	Requests int64
	MS       float64
}

// jitQuietShare and jitQuietPeakShare say when the JIT has stopped
// compiling, judged over the stopping rule's latest block of requests (a
// quarter of the warm-up, at least 300 requests: the span the latency is
// judged over). The JIT is quiet when the compile time it added over the
// block is at most jitQuietShare of its total so far, or when its compile
// time per request over the block has fallen to at most jitQuietPeakShare
// of the highest it had over any earlier look's block.
//
// The share: measured on the sample app (JDK 17, one CPU; docs/stopping-rule.md),
// 4.6 s compiled by its 500th request, then, its latency long settled,
// +0 to +56 ms per 100 requests with single compiles of 100–350 ms — 1–2 %
// of its total per block, up to 3.5 % around one of those compiles. The
// total includes the compiling before the first request (the JVM's start,
// a pod that warmed itself): a pod warm from the start is quiet at once.
//
// The fall from the peak: a Spring Boot service keeps compiling in the
// background for thousands of requests (the lab's Spring sample behind its
// sidecar, one CPU: ~5 ms of compiling per request over its first blocks,
// a burst of 2 ms per request around request 6,000, then 0.4–0.5 ms), so
// its blocks, which grow with the warm-up, add more than 3 % of its total
// long after its latency settled; a rate a tenth of its peak is a JIT
// that has done its work, whatever the service's size. Not an absolute
// cap: a block of 2,000 requests of a big service passes any fixed number
// of milliseconds of background compiling.
const (
	jitQuietShare     = 0.03
	jitQuietPeakShare = 0.1
)

// jitSignal is the stopping rule's view of a target's JIT (stopState.jit):
// its readings, and what the rule made of them.
type jitSignal struct {
	readings []Reading
	// quietFrom is the request count from which the JIT has been quiet
	// (jitQuietShare, jitQuietPeakShare) at every look since (0: not quiet
	// at the latest look); held counts the looks at which a still compiling JIT held
	// back a stop.
	quietFrom int64
	held      int
	// busy is the latest look's "still compiling" figures ("" quiet).
	busy string
	// peak is the highest compile time per request over a look's block.
	peak float64
}

// quiet says whether the JIT has stopped compiling over the span of
// requests up to n, and known whether the readings tell: a reading within
// the span and one at least a span before it (from: its request count). A
// signal that went stale (no reading for a span) tells nothing: the
// warm-up never needs it. Each look's compile time per request counts
// towards the peak (jitQuietPeakShare).
func (j *jitSignal) quiet(n, span int64) (quiet, known bool, added float64, over, from int64) {
	if j == nil || len(j.readings) < 2 {
		return false, false, 0, 0, 0
	}
	b := j.readings[len(j.readings)-1]
	if n-b.Requests > span {
		return false, false, 0, 0, 0
	}
	for i := len(j.readings) - 2; i >= 0; i-- {
		if a := j.readings[i]; a.Requests <= b.Requests-span {
			added, over = b.MS-a.MS, b.Requests-a.Requests
			rate := added / float64(over)
			j.peak = max(j.peak, rate)
			return added <= jitQuietShare*b.MS || rate <= jitQuietPeakShare*j.peak, true, added, over, a.Requests
		}
	}
	return false, false, 0, 0, 0
}

// hold is the JVM signal's part in the stopping rule (Config.next), given
// the rule's check on latency alone: a target whose JIT is still compiling
// is not called warm — next to stable or on its own plateau — however
// flat its latency: the JIT gets faster in steps, and a flat stretch
// between two is no end. Rejection is never held, nor the bounds
// (deadline, maxRequests, acceptNearStable: Pod.AtBound).
//
// A quiet JIT releases nothing sooner: caches fill and lazy endpoints
// warm without it, so it cannot vouch for a plateau (a plateau judged
// only since the JIT went quiet released the zoo's cache-fill early in 60 %
// of runs: docs/stopping-rule.md).
func (j *jitSignal) hold(c *Config, ch check, windows []Window) check {
	if j == nil {
		return ch
	}
	complete := completePrefix(windows)
	if len(complete) == 0 {
		return ch
	}
	n := complete[len(complete)-1].Requests
	span := int64(max(c.blockWindows(len(complete)), 1) * c.Window)
	quiet, known, added, over, from := j.quiet(n, span)
	switch {
	case !known:
		j.quietFrom, j.busy = 0, ""
		return ch
	case quiet:
		if j.quietFrom == 0 {
			j.quietFrom = from
		}
		j.busy = ""
		if ch.converged && ch.rejected == "" {
			ch.by += fmt.Sprintf("; the JIT quiet since request %d (+%s over the last %d requests)", j.quietFrom, formatMS(added), over)
		}
		return ch
	}
	total := j.readings[len(j.readings)-1].MS
	j.quietFrom = 0
	j.busy = fmt.Sprintf("the JIT is still compiling: +%s over the last %d requests (%.1f %% of its %s, %.2f ms per request; quiet is at most %g %% or %g of its peak %.2f ms per request)",
		formatMS(added), over, 100*added/max(total, 1), formatMS(total), added/float64(max(over, 1)), 100*jitQuietShare, jitQuietPeakShare, j.peak)
	if ch.converged && ch.rejected == "" {
		j.held++
		ch.converged, ch.settled, ch.plateau = false, "", false
		ch.why = "latency converged but " + j.busy
	}
	return ch
}

func formatMS(ms float64) string {
	if ms >= 10000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// notes say what the rule made of the signal, for the warm-up's result:
// since when the JIT has been quiet, or why it is still compiling, and how
// often it held the stop back.
func (j *jitSignal) notes() string {
	var notes []string
	switch {
	case j.quietFrom > 0:
		notes = append(notes, fmt.Sprintf("compile time flat since request %d", j.quietFrom))
	case j.busy != "":
		notes = append(notes, j.busy)
	default:
		notes = append(notes, "too few readings to judge")
	}
	if j.held > 0 {
		notes = append(notes, fmt.Sprintf("it held the stop back at %d window(s)", j.held))
	}
	return strings.Join(notes, "; ")
}
