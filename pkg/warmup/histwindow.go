package warmup

import "github.com/danki-dev/danki/pkg/warmup/rule"

// JudgeWindows applies the warm-up's stopping rule (package rule) to
// windows measured outside the synthetic load: the mirror source's windows
// from Prometheus histograms. Such windows carry no per-request latencies,
// so the rule compares the blocks' median p50 and median p99 and skips the
// share of slow requests; it never compares with stable (mirrored requests
// have no stable counterpart in the same window). Like the synthetic
// warm-up's, a plateau counts once it has held for flatShare of the
// windows (and minPlateauRequests once the latency fell): the rule is
// replayed over every window (a few dozen summaries), so the caller keeps
// no state, and the last window's look decides. Such windows give the rule
// less to see (no slow requests, percentiles as coarse as the buckets), so
// it waits for at least histMinRequests. c must have its defaults.
func (c Config) JudgeWindows(windows []WindowStats) (converged bool, why string) {
	rc := c.ruleConfig(false, false)
	rc.CompareToStable = false
	rc.MinRequests = max(rc.MinRequests, histMinRequests)
	r, err := rule.New(rc)
	if err != nil {
		return false, err.Error()
	}
	pod := r.NewPod(false)
	var d rule.Decision
	for _, w := range windows {
		d = pod.Window(w)
	}
	return d.Kind == rule.Warm, d.Look
}

// histMinRequests is JudgeWindows' least number of requests: two blocks of
// 500, as the rule waited for before it pooled every request's latency
// (with a share of slow requests to see) into blocks of 300.
const histMinRequests = 1000

// Trend renders the last n complete windows' p99 for progress and failure
// messages (as the synthetic warm-up's failures do).
func Trend(windows []WindowStats, n int) string { return rule.Trend(windows, n) }
