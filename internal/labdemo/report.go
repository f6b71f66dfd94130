package labdemo

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/danki-dev/danki/internal/demo"
)

// WriteReport writes the demo's findings: the side-by-side table of what
// users saw, each rollout's path (canary weights, warm-up), the bad
// version's detection and the user traffic actually sent.
func WriteReport(w io.Writer, f demo.Format, res *Result) error {
	var b strings.Builder
	if err := demo.WriteTable(&b, f, res.Scenarios); err != nil {
		return err
	}
	b.WriteString("\n")
	bullet := "  "
	if f == demo.Markdown {
		bullet = "- "
	}
	for _, r := range res.Runs {
		fmt.Fprintf(&b, "%s%s (%s): %s after %s; canary weights %s\n", bullet, r.Scenario, r.Version, r.Outcome,
			r.End.Sub(r.Start).Round(time.Second), weightPath(r.Weights))
		if r.Warmup != "" {
			fmt.Fprintf(&b, "%s  warm-up: %s\n", bullet, r.Warmup)
		}
	}
	bad := res.Bad
	if bad.MaxWeight == 0 {
		fmt.Fprintf(&b, "%sbad version %s (%s): aborted %t before any user weight, %s after the image change; "+
			"%d user requests reached it (counted at Envoy); canary weight now %d%%\n", bullet, bad.Version, bad.Slowness, bad.Aborted,
			bad.SincePatch.Round(time.Second), bad.UserRequests, bad.FinalWeight)
	} else {
		fmt.Fprintf(&b, "%sbad version %s (%s): aborted %t, %s after its canary first got users (%s after the image change); "+
			"at most %d%% of users on it, %d user requests (counted at Envoy); canary weight now %d%%\n", bullet, bad.Version, bad.Slowness, bad.Aborted,
			bad.Detection.Round(time.Second), bad.SincePatch.Round(time.Second), bad.MaxWeight, bad.UserRequests, bad.FinalWeight)
	}
	if bad.Reason != "" {
		fmt.Fprintf(&b, "%s  why: %s\n", bullet, bad.Reason)
	}
	if o := res.Oracle; o != nil {
		fmt.Fprintf(&b, "%soracle: a fresh pod stopped improving after %d requests (windows of %d; plateau p50 %s, p99 %s); its warm-up curve:\n\n",
			bullet, o.WarmAfter, o.Window, o.PlateauP50.Round(10*time.Microsecond), o.PlateauP99.Round(10*time.Microsecond))
		if err := demo.WriteWarmupTable(&b, f, o.Curve); err != nil {
			return err
		}
	}
	if len(res.Ratios) > 0 {
		b.WriteString("\n")
		for _, r := range res.Ratios {
			fmt.Fprintf(&b, "%s%-46s %7.2f   (%s / %s)\n", bullet, r.Name, r.Value, r.Num, r.Den)
		}
		b.WriteString("\n")
	}
	t := res.Traffic
	fmt.Fprintf(&b, "%susers: %d requests at %.1f of %.0f qps asked (%d failed), through %s\n", bullet, t.Requests, t.AchievedQPS, t.AskedQPS, t.Errors, t.URL)
	_, err := io.WriteString(w, b.String())
	return err
}

// weightPath renders weight changes as "0 → 10 → 20 (…)".
func weightPath(ws []WeightChange) string {
	if len(ws) == 0 {
		return "-"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprint(w.Weight)
	}
	return strings.Join(parts, " → ")
}

// Ratio is one headline figure: Num ÷ Den, both measured in the same run.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Num   string  `json:"num"`
	Den   string  `json:"den"`
}

// ratios computes the bench's headline figures from a demo result.
func ratios(res *Result) []Ratio {
	var out []Ratio
	phase := func(sc int, name string) *demo.PhaseStats {
		if sc >= len(res.Scenarios) {
			return nil
		}
		for i := range res.Scenarios[sc].Phases {
			if p := &res.Scenarios[sc].Phases[i]; p.Name == name && p.Count > 0 {
				return p
			}
		}
		return nil
	}
	add := func(name string, num, den time.Duration, numS, denS string) {
		if den > 0 {
			out = append(out, Ratio{Name: name, Value: float64(num) / float64(den), Num: numS + " " + num.Round(10*time.Microsecond).String(), Den: denS + " " + den.Round(10*time.Microsecond).String()})
		}
	}
	base, dk := phase(0, "during"), phase(1, "during")
	steady := phase(1, "before")
	if dk != nil && steady != nil {
		add("danki p99 during rollout ÷ warm steady state", dk.P99, steady.P99, "danki during p99", "danki before p99")
		add("danki max during rollout ÷ warm steady state", dk.Max, steady.Max, "danki during max", "danki before max")
	}
	if base != nil && dk != nil {
		add("baseline ÷ danki, p99 during rollout", base.P99, dk.P99, "baseline during p99", "danki during p99")
		add("baseline ÷ danki, p99.9 during rollout", base.P999, dk.P999, "baseline during p99.9", "danki during p99.9")
		add("baseline ÷ danki, max during rollout", base.Max, dk.Max, "baseline during max", "danki during max")
	}
	// The baseline's second canary pod is created at 100 % and meets its
	// users cold after the promotion: compare the after phase too.
	if ba, da := phase(0, "after"), phase(1, "after"); ba != nil && da != nil {
		add("baseline ÷ danki, p99.9 after rollout", ba.P999, da.P999, "baseline after p99.9", "danki after p99.9")
		add("baseline ÷ danki, max after rollout", ba.Max, da.Max, "baseline after max", "danki after max")
	}
	if o := res.Oracle; o != nil && o.WarmAfter > 0 && len(res.Runs) > 1 && res.Runs[1].WarmupRequests > 0 {
		n := res.Runs[1].WarmupRequests
		out = append(out, Ratio{Name: "danki warm-up length ÷ oracle", Value: float64(n) / float64(o.WarmAfter),
			Num: fmt.Sprintf("danki %d requests per pod", n), Den: fmt.Sprintf("oracle: warm after %d requests", o.WarmAfter)})
	}
	if t := res.Traffic; t.AskedQPS > 0 {
		out = append(out, Ratio{Name: "user traffic achieved ÷ asked QPS", Value: t.AchievedQPS / t.AskedQPS,
			Num: fmt.Sprintf("%.1f qps", t.AchievedQPS), Den: fmt.Sprintf("%.0f qps", t.AskedQPS)})
	}
	return out
}
