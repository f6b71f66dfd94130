package rule

import (
	"fmt"
	"time"

	"github.com/danki-dev/danki/pkg/latency"
)

// nearStable says whether a target that has not converged when a bound
// (deadline, maxRequests) ends its warm-up is warm enough for users anyway
// (Config.AcceptNearStable), and why. The bar is the one a converged pod
// must meet next to stable — the rejection rule's, or compareToStable's
// when set — so it accepts no pod the stopping rule would not have passed
// had its tail stopped improving.
func (c *Config) nearStable(pool *blockPool, windows []Window, stableP99 time.Duration) (string, bool) {
	if !c.AcceptNearStable || stableP99 == 0 {
		return "", false
	}
	complete := completePrefix(windows)
	p, ok := c.progressOf(pool, complete)
	if !ok || p.improving == "p50" || len(complete) < c.StableWindows {
		return "", false // too few windows, or its typical request is still getting faster
	}
	for _, w := range complete[len(complete)-c.StableWindows:] {
		if float64(w.Errors) > c.MaxErrorRatio*float64(w.Count) {
			return "", false
		}
	}
	limit := max(time.Duration(c.RejectRatio*float64(stableP99)), stableP99+c.RejectFloor)
	bar := fmt.Sprintf("rejectRatio %g, rejectFloor %s", c.RejectRatio, c.RejectFloor)
	if c.CompareToStable {
		limit = max(time.Duration(c.StableRatio*float64(stableP99)), stableP99+c.AbsoluteTolerance)
		bar = fmt.Sprintf("stableRatio %g", c.StableRatio)
	}
	if p.recent.p99 > limit {
		return "", false
	}
	return fmt.Sprintf("p99 %s (still %s) within %s of stable's %s (%s)",
		latency.Format(p.recent.p99), p, latency.Format(limit), latency.Format(stableP99), bar), true
}
