package warmup

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
func (c *Config) nearStable(windows []WindowStats, stableP99 time.Duration) (string, bool) {
	if c.AcceptNearStable == nil || !*c.AcceptNearStable || stableP99 == 0 {
		return "", false
	}
	complete := completePrefix(windows)
	p, ok := c.progressOf(complete)
	if !ok || p.improving == "p50" || len(complete) < c.StableWindows {
		return "", false // too few windows, or its typical request is still getting faster
	}
	for _, w := range complete[len(complete)-c.StableWindows:] {
		if float64(w.Errors) > *c.MaxErrorRatio*float64(w.Count) {
			return "", false
		}
	}
	limit := max(time.Duration(c.RejectRatio*float64(stableP99)), stableP99+c.RejectFloor.D())
	bar := fmt.Sprintf("rejectRatio %g, rejectFloor %s", c.RejectRatio, c.RejectFloor)
	if c.CompareToStable {
		limit = max(time.Duration(c.StableRatio*float64(stableP99)), stableP99+c.AbsoluteTolerance.D())
		bar = fmt.Sprintf("stableRatio %g", c.StableRatio)
	}
	if p.recent.p99 > limit {
		return "", false
	}
	return fmt.Sprintf("p99 %s (still %s) within %s of stable's %s (%s)",
		latency.Format(p.recent.p99), p, latency.Format(limit), latency.Format(stableP99), bar), true
}

// acceptNearStable marks every unconverged target warm when each is near
// stable (see nearStable) and says so; "" when any is not (nothing marked).
func (c *coordinator) acceptNearStable() string {
	stableP99 := c.stableP99()
	var pending []*targetState
	var whys []string
	for _, st := range c.canary {
		if st.res.Converged {
			continue
		}
		why, ok := c.cfg.nearStable(st.res.Windows, stableP99)
		if !ok {
			return ""
		}
		pending = append(pending, st)
		whys = append(whys, fmt.Sprintf("%s: %s", st.res.Target, why))
	}
	for _, st := range pending {
		last := st.res.Windows[len(st.res.Windows)-1]
		st.res.Converged, st.res.NearStable = true, true
		st.res.ConvergedAfter, st.res.ConvergedWindow = last.Requests, last.Index
	}
	if len(pending) == 0 {
		return ""
	}
	return fmt.Sprintf("%d target(s) accepted near stable (acceptNearStable): %v", len(pending), whys)
}
