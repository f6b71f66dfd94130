package warmup

// JudgeWindows applies the warm-up's stopping rule (judge, progressOf) to
// windows measured outside the synthetic load: the mirror source's windows
// from Prometheus histograms. Such windows carry no per-request latencies,
// so the rule compares the blocks' median p50 and median p99 and skips the
// share of slow requests; it never compares with stable (mirrored requests
// have no stable counterpart in the same window). c must have its defaults.
func (c Config) JudgeWindows(windows []WindowStats) (converged bool, why string) {
	c.CompareToStable = false
	v := c.judge(windows, 0, false)
	return v.converged, v.why
}

// Trend renders the last n complete windows' p99 for progress and failure
// messages (as the synthetic warm-up's failures do).
func Trend(windows []WindowStats, n int) string { return trend(windows, n) }
