package scenario

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
)

// WriteReport writes the demo's findings: the side-by-side table of what
// users saw, each rollout's path (canary weights, warm-up), the bad
// version's detection and the user traffic actually sent.
func WriteReport(w io.Writer, f traffic.Format, res *Result) error {
	var b strings.Builder
	if res.Mesh != "" {
		fmt.Fprintf(&b, "Users' path: %s (LAB_MESH=%s)\n\n", meshPath(res.Mesh), res.Mesh)
	}
	if err := traffic.WriteTable(&b, f, res.Scenarios); err != nil {
		return err
	}
	b.WriteString("\n")
	if hasContenders(res) {
		writeContenderTable(&b, f, res, mainRollouts(res.Scenarios))
		b.WriteString("\n")
	}
	if rows := holdRows(res); rows != nil {
		b.WriteString("Users on stable while the new pods sat at weight 0: danki's warm-up vs the control's pause of the same length (no warm-up traffic)\n\n")
		writeRows(&b, f, rows)
		b.WriteString("\n")
	}
	if scs := springRollouts(res.Scenarios); len(scs) > 0 {
		b.WriteString("The slow-warming workload (the Spring Boot sample app, its own users): a fixed warm-up of 100 requests per pod vs danki\n\n")
		writeContenderTable(&b, f, res, scs)
		b.WriteString("\n")
		if rows := springHoldRows(res); rows != nil {
			b.WriteString("Of their \"during\": the warm-up step, all Spring users on stable\n\n")
			writeRows(&b, f, rows)
			b.WriteString("\n")
		}
	}
	bullet := "  "
	if f == traffic.Markdown {
		bullet = "- "
	}
	for _, r := range res.Runs {
		fmt.Fprintf(&b, "%s%s (%s): %s after %s; canary weights %s\n", bullet, r.Scenario, r.Version, r.Outcome,
			r.End.Sub(r.Start).Round(time.Second), weightPath(r.Weights))
		if r.Warmup != "" {
			fmt.Fprintf(&b, "%s  warm-up: %s\n", bullet, r.Warmup)
		}
		if r.Envoy != "" {
			fmt.Fprintf(&b, "%s  Envoy's load balancing (config_dump): %s\n", bullet, r.Envoy)
		}
	}
	if res.Bad != nil {
		writeBadVersion(&b, bullet, res.Bad)
	}
	if o := res.Oracle; o != nil {
		fmt.Fprintf(&b, "%soracle: a fresh pod stopped improving after %d requests (windows of %d; plateau p50 %s, p99 %s); its warm-up curve:\n\n",
			bullet, o.WarmAfter, o.Window, o.PlateauP50.Round(10*time.Microsecond), o.PlateauP99.Round(10*time.Microsecond))
		if err := traffic.WriteWarmupTable(&b, f, o.Curve); err != nil {
			return err
		}
	}
	if len(res.Ratios) > 0 {
		b.WriteString("\n")
		for _, r := range res.Ratios {
			fmt.Fprintf(&b, "%s%-52s %7.2f   (%s / %s)\n", bullet, r.Name, r.Value, r.Num, r.Den)
		}
		b.WriteString("\n")
	}
	t := res.Traffic
	fmt.Fprintf(&b, "%susers: %d requests at %.1f of %.0f qps asked (%s), through %s\n", bullet, t.Requests, t.AchievedQPS, t.AskedQPS, failed(t.Errors, res.UserFailures), t.URL)
	if res.SpringError != "" {
		fmt.Fprintf(&b, "%sthe Spring app's rollouts failed (not in the tables): %s\n", bullet, res.SpringError)
	}
	if t := res.SpringTraffic; t != nil {
		fmt.Fprintf(&b, "%sSpring users: %d requests at %.1f of %.0f qps asked (%s), through %s (host %s)\n", bullet, t.Requests, t.AchievedQPS, t.AskedQPS, failed(t.Errors, res.SpringUserFailures), t.URL, springHost)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// failed is "N failed", with where they fell when that is known and some
// did.
func failed(errors int, where *UserFailures) string {
	if where == nil || errors == 0 {
		return fmt.Sprintf("%d failed", errors)
	}
	return fmt.Sprintf("%d failed: %s", errors, where)
}

// writeBadVersion says how danki handled the bad version.
func writeBadVersion(b *strings.Builder, bullet string, bad *BadVersion) {
	if bad.MaxWeight == 0 {
		fmt.Fprintf(b, "%sbad version %s (%s): aborted %t before any user weight, %s after the image change; "+
			"%d user requests reached it (counted at Envoy); canary weight now %d%%\n", bullet, bad.Version, bad.Slowness, bad.Aborted,
			bad.SincePatch.Round(time.Second), bad.UserRequests, bad.FinalWeight)
	} else {
		fmt.Fprintf(b, "%sbad version %s (%s): aborted %t, %s after its canary first got users (%s after the image change); "+
			"at most %d%% of users on it, %d user requests (counted at Envoy); canary weight now %d%%\n", bullet, bad.Version, bad.Slowness, bad.Aborted,
			bad.Detection.Round(time.Second), bad.SincePatch.Round(time.Second), bad.MaxWeight, bad.UserRequests, bad.FinalWeight)
	}
	if bad.Reason != "" {
		fmt.Fprintf(b, "%s  why: %s\n", bullet, bad.Reason)
	}
}

// hasContenders says whether the result has a scenario of the sample app
// besides the baseline, danki and the bad version.
func hasContenders(res *Result) bool {
	for _, sc := range res.Scenarios {
		if sc.Name == SlowStart || sc.Name == Fixed100 || sc.Name == DankiMirror || sc.Name == Control {
			return true
		}
	}
	return false
}

// isSpring says whether a scenario rolled out the Spring app (its own
// users: its figures are not comparable with the sample app's).
func isSpring(name string) bool { return name == SpringFixed100 || name == SpringDanki }

// mainRollouts are the sample app's scenarios; springRollouts the Spring
// app's.
func mainRollouts(scs []traffic.Scenario) []traffic.Scenario {
	return slices.DeleteFunc(slices.Clone(scs), func(sc traffic.Scenario) bool { return isSpring(sc.Name) })
}

func springRollouts(scs []traffic.Scenario) []traffic.Scenario {
	return slices.DeleteFunc(slices.Clone(scs), func(sc traffic.Scenario) bool { return !isSpring(sc.Name) })
}

// writeContenderTable writes one row per rollout of scs — the side-by-side
// view of the bench's contenders, which the phase table spreads over too
// many columns to read: rollout time, the danki/warmup step's length, the
// steady p99 before, and what users saw during and after.
func writeContenderTable(b *strings.Builder, f traffic.Format, res *Result, scs []traffic.Scenario) {
	rows := [][]string{{"rollout", "time", "warm-up", "before p99", "during p50", "p99", "p99.9", "max", "after p50", "p99", "p99.9", "max"}}
	for _, sc := range scs {
		warm := "–"
		if r, ok := res.run(sc.Name); ok {
			warm = warmupCell(r)
		}
		row := []string{sc.Name, fmtDuration(sc.RolloutDuration), warm, cell(sc, "before", func(p *traffic.PhaseStats) time.Duration { return p.P99 })}
		for _, ph := range []string{"during", "after"} {
			for _, q := range []func(*traffic.PhaseStats) time.Duration{
				func(p *traffic.PhaseStats) time.Duration { return p.P50 },
				func(p *traffic.PhaseStats) time.Duration { return p.P99 },
				func(p *traffic.PhaseStats) time.Duration { return p.P999 },
				func(p *traffic.PhaseStats) time.Duration { return p.Max },
			} {
				row = append(row, cell(sc, ph, q))
			}
		}
		rows = append(rows, row)
	}
	writeRows(b, f, rows)
}

// holdRows is the control's comparison, rows[0] the header: what users
// (all on stable) saw while danki's new pods were warmed at weight 0, and
// while the control's sat there as long with no warm-up traffic; then
// danki ÷ control. Nil without both.
func holdRows(res *Result) [][]string {
	d, okD := res.run(Danki)
	c, okC := res.run(Control)
	if !okD || !okC || d.Hold == nil || c.Hold == nil {
		return nil
	}
	rows := holdTable(d, c)
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "–"
		}
		return fmtRatio(float64(a) / float64(b))
	}
	dh, ch := d.Hold, c.Hold
	return append(rows, []string{Danki + " ÷ control", "", "", ratio(dh.P50, ch.P50), ratio(dh.P99, ch.P99), ratio(dh.P999, ch.P999), ratio(dh.Max, ch.Max)})
}

// holdTable is what users saw while each run's new pods sat at weight 0
// (rows[0] the header); runs without a measured hold are left out.
func holdTable(runs ...Run) [][]string {
	rows := [][]string{{"rollout", "new pods at weight 0", "users' requests", "p50", "p99", "p99.9", "max"}}
	for _, r := range runs {
		h := r.Hold
		if h == nil {
			continue
		}
		what := "warm-up"
		if r.WarmupDuration() <= 0 {
			what = "pause, no warm-up"
		}
		rows = append(rows, []string{r.Scenario, fmtDuration(r.HoldDuration()) + " " + what, fmt.Sprint(h.Count),
			latency.Format(h.P50), latency.Format(h.P99), latency.Format(h.P999), latency.Format(h.Max)})
	}
	return rows
}

// springHoldRows: the Spring rollouts' warm-up stretches (all users on
// stable), to tell a tail the warm-up's load caused from one cold pods
// caused after it; nil without them.
func springHoldRows(res *Result) [][]string {
	var runs []Run
	for _, name := range []string{SpringFixed100, SpringDanki} {
		if r, ok := res.run(name); ok {
			runs = append(runs, r)
		}
	}
	if rows := holdTable(runs...); len(rows) > 1 {
		return rows
	}
	return nil
}

// writeRows writes rows (rows[0] the header) as a Markdown table, or as
// aligned text columns.
func writeRows(b *strings.Builder, f traffic.Format, rows [][]string) {
	if f == traffic.Markdown {
		for i, r := range rows {
			b.WriteString("| " + strings.Join(r, " | ") + " |\n")
			if i == 0 {
				b.WriteString("|---" + strings.Repeat("|---:", len(r)-1) + "|\n")
			}
		}
		return
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
}

// warmupCell formats a rollout's warm-up: the danki/warmup step's length
// and what warmed the canary — synthetic requests per pod, mirrored user
// requests over all its pods; "none (pause …)" for the control, whose new
// pods sat at weight 0 as long with no warm-up traffic; "–" without either.
func warmupCell(r Run) string {
	d := r.WarmupDuration()
	if d <= 0 {
		if h := r.HoldDuration(); h > 0 {
			return "none (pause " + fmtDuration(h) + ")"
		}
		return "–"
	}
	parts := []string{fmtDuration(d)}
	if r.WarmupRequests > 0 {
		parts = append(parts, fmt.Sprintf("%d/pod", r.WarmupRequests))
	}
	if r.WarmupMirrored > 0 {
		parts = append(parts, fmt.Sprintf("%d mirrored", r.WarmupMirrored))
	}
	return strings.Join(parts, ", ")
}

// cell formats one statistic of a scenario's phase; "–" when the phase had
// no requests.
func cell(sc traffic.Scenario, phase string, stat func(*traffic.PhaseStats) time.Duration) string {
	for i := range sc.Phases {
		if p := &sc.Phases[i]; p.Name == phase && p.Count > 0 {
			return latency.Format(stat(p))
		}
	}
	return "–"
}

func fmtDuration(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(time.Second).String()
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

// ratios computes the bench's headline figures from a demo result: danki's
// cost over its own steady state, then each contender (the baseline, and in
// make bench Istio's slow start and a fixed warm-up of 100 requests) ÷ danki,
// all measured in the same run under the same users.
func ratios(res *Result) []Ratio {
	var out []Ratio
	scenario := func(name string) *traffic.Scenario {
		for i := range res.Scenarios {
			if res.Scenarios[i].Name == name {
				return &res.Scenarios[i]
			}
		}
		return nil
	}
	phase := func(sc *traffic.Scenario, name string) *traffic.PhaseStats {
		if sc == nil {
			return nil
		}
		for i := range sc.Phases {
			if p := &sc.Phases[i]; p.Name == name && p.Count > 0 {
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
	dankiSc := scenario(Danki)
	dk, steady := phase(dankiSc, "during"), phase(dankiSc, "before")
	if dk != nil && steady != nil {
		add("danki p99 during rollout ÷ warm steady state", dk.P99, steady.P99, "danki during p99", "danki before p99")
		add("danki max during rollout ÷ warm steady state", dk.Max, steady.Max, "danki during max", "danki before max")
	}
	for _, name := range contenders {
		sc := scenario(name)
		if sc == nil || dankiSc == nil {
			continue
		}
		if c := phase(sc, "during"); c != nil && dk != nil {
			add(name+" ÷ danki, p99 during rollout", c.P99, dk.P99, name+" during p99", "danki during p99")
			add(name+" ÷ danki, p99.9 during rollout", c.P999, dk.P999, name+" during p99.9", "danki during p99.9")
			add(name+" ÷ danki, max during rollout", c.Max, dk.Max, name+" during max", "danki during max")
		}
		// A canary pod created at 100 % meets its users cold after the
		// promotion: compare the after phase too.
		if c, d := phase(sc, "after"), phase(dankiSc, "after"); c != nil && d != nil {
			add(name+" ÷ danki, p99.9 after rollout", c.P999, d.P999, name+" after p99.9", "danki after p99.9")
			add(name+" ÷ danki, max after rollout", c.Max, d.Max, name+" after max", "danki after max")
		}
		if sc.RolloutDuration > 0 && dankiSc.RolloutDuration > 0 {
			out = append(out, Ratio{Name: name + " ÷ danki, rollout time", Value: float64(sc.RolloutDuration) / float64(dankiSc.RolloutDuration),
				Num: name + " " + fmtDuration(sc.RolloutDuration), Den: "danki " + fmtDuration(dankiSc.RolloutDuration)})
		}
		// Both warmed (danki/warmup): how long each warm-up held the
		// rollout at weight 0.
		c, _ := res.run(name)
		d, _ := res.run(Danki)
		if cw, dw := c.WarmupDuration(), d.WarmupDuration(); cw > 0 && dw > 0 {
			out = append(out, Ratio{Name: name + " ÷ danki, warm-up time", Value: float64(cw) / float64(dw),
				Num: name + " " + fmtDuration(cw), Den: "danki " + fmtDuration(dw)})
		}
	}
	// The users' cost of danki's warm-up, against the same stretch with no
	// warm-up traffic (the control): all users are on stable meanwhile.
	if d, ok := res.run(Danki); ok && d.Hold != nil {
		if c, ok := res.run(Control); ok && c.Hold != nil {
			for _, q := range []struct {
				name string
				f    func(*latency.Summary) time.Duration
			}{
				{"p50", func(s *latency.Summary) time.Duration { return s.P50 }},
				{"p99", func(s *latency.Summary) time.Duration { return s.P99 }},
				{"p99.9", func(s *latency.Summary) time.Duration { return s.P999 }},
				{"max", func(s *latency.Summary) time.Duration { return s.Max }},
			} {
				add("danki ÷ control, users' "+q.name+" during the warm-up (all on stable)", q.f(d.Hold), q.f(c.Hold),
					"danki warm-up "+q.name, "control pause "+q.name)
			}
		}
	}
	// The slow-warming workload: the fixed count ÷ danki, during the
	// rollout and after it (where a pod warmed too little meets all users).
	if fx, dk := scenario(SpringFixed100), scenario(SpringDanki); fx != nil && dk != nil {
		for _, ph := range []string{"during", "after"} {
			c, d := phase(fx, ph), phase(dk, ph)
			if c == nil || d == nil {
				continue
			}
			for _, q := range []struct {
				name string
				f    func(*traffic.PhaseStats) time.Duration
			}{
				{"p50", func(p *traffic.PhaseStats) time.Duration { return p.P50 }},
				{"p99", func(p *traffic.PhaseStats) time.Duration { return p.P99 }},
				{"p99.9", func(p *traffic.PhaseStats) time.Duration { return p.P999 }},
				{"max", func(p *traffic.PhaseStats) time.Duration { return p.Max }},
			} {
				add(SpringFixed100+" ÷ danki, "+q.name+" "+ph+" rollout", q.f(c), q.f(d),
					SpringFixed100+" "+ph+" "+q.name, SpringDanki+" "+ph+" "+q.name)
			}
		}
	}
	if o := res.Oracle; o != nil && o.WarmAfter > 0 {
		for _, name := range []string{Danki, Fixed100} {
			if r, ok := res.run(name); ok && r.WarmupRequests > 0 {
				out = append(out, Ratio{Name: name + " warm-up length ÷ oracle", Value: float64(r.WarmupRequests) / float64(o.WarmAfter),
					Num: fmt.Sprintf("%s %d requests per pod", name, r.WarmupRequests), Den: fmt.Sprintf("oracle: warm after %d requests", o.WarmAfter)})
			}
		}
	}
	if t := res.Traffic; t.AskedQPS > 0 {
		out = append(out, Ratio{Name: "user traffic achieved ÷ asked QPS", Value: t.AchievedQPS / t.AskedQPS,
			Num: fmt.Sprintf("%.1f qps", t.AchievedQPS), Den: fmt.Sprintf("%.0f qps", t.AskedQPS)})
	}
	return out
}

// meshPath is the data path the lab's users' requests take in mesh mode m.
func meshPath(m string) string {
	switch m {
	case MeshStrict:
		return "gateway → sidecar → app, Istio mTLS, PeerAuthentication STRICT"
	case MeshPermissive:
		return "gateway → sidecar → app, Istio mTLS, PERMISSIVE"
	default:
		return "gateway → app, no sidecars"
	}
}
