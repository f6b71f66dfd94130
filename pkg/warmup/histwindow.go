package warmup

// JudgeWindows applies the warm-up's stopping rule (judge, progressOf) to
// windows measured outside the synthetic load: the mirror source's windows
// from Prometheus histograms. Such windows carry no per-request latencies,
// so the rule compares the blocks' median p50 and median p99 and skips the
// share of slow requests; it never compares with stable (mirrored requests
// have no stable counterpart in the same window). Like the synthetic
// warm-up's, a plateau counts once it has held for flatShare of the
// windows (and minPlateauRequests once the latency fell): the rule is
// replayed over every prefix of windows (a few dozen summaries), so the
// caller keeps no state. Such windows give the rule
// less to see (no slow requests, percentiles as coarse as the buckets), so
// it waits for at least histMinRequests. c must have its defaults.
func (c Config) JudgeWindows(windows []WindowStats) (converged bool, why string) {
	c.CompareToStable = false
	c.MinRequests = max(c.MinRequests, histMinRequests)
	var s stopState
	var v check
	for i := range windows {
		v = c.next(&s, windows[:i+1], stableRef{}, false)
	}
	return v.converged, v.why
}

// histMinRequests is JudgeWindows' least number of requests: two blocks of
// 500, as the rule waited for before it pooled every request's latency
// (with a share of slow requests to see) into blocks of 300.
const histMinRequests = 1000

// Trend renders the last n complete windows' p99 for progress and failure
// messages (as the synthetic warm-up's failures do).
func Trend(windows []WindowStats, n int) string { return trend(windows, n) }
