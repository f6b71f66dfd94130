package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// WriteGateBenchReport writes the gate bench's Markdown report: the ratios
// table (each event's minute ÷ the steady state right before it), the raw
// figures per phase, when the new pods became Ready, and the goal.
func WriteGateBenchReport(w io.Writer, r *GateBenchResult) error {
	var b strings.Builder
	if r.Mesh != "" {
		fmt.Fprintf(&b, "Users' path: %s (LAB_MESH=%s).\n\n", meshPath(r.Mesh), r.Mesh)
	}
	fmt.Fprintf(&b, "Users: %.0f requests/s per way, through the lab gateway (Envoy) by Host, all ways' users at once for the whole run. "+
		"The events happen one way at a time (a way's new pods share the lab's two cores with its users, as on a node, not with the other ways' cold starts); "+
		"each way's minute after its event is divided by its own steady state right before it, measured as long. "+
		"The control's scale-up starts two pods of the same app that get no request at all: what starting JVMs on the node costs its users, the floor under any warm-up; "+
		"before it, its users' next minute ÷ the one before with nothing happening: the lab's noise.\n\n", r.QPS)
	writeGateNoise(&b, r.Noise)
	b.WriteString("## Users' tail in the minute after each event ÷ the steady state right before it\n\n")
	var kinds []string // the events run, in order
	for _, e := range r.Events {
		if !slices.Contains(kinds, e.Name) {
			kinds = append(kinds, e.Name)
		}
	}
	head, align := []string{"way"}, "|---|"
	for _, ev := range kinds {
		head = append(head, ev+": p99", "p99.9", "max", "new pods Ready after")
		align += "---:|---:|---:|---|"
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n" + align + "\n")
	for _, w := range r.Ways {
		row := []string{w.Name}
		for _, ev := range kinds {
			rt, ok := findRatio(w.Ratios, ev)
			if !ok {
				row = append(row, "–", "–", "–", readyAfterList(w.Pods, ev))
				continue
			}
			row = append(row, fmtRatio(rt.P99), fmtRatio(rt.P999), fmtRatio(rt.Max), readyAfterList(w.Pods, ev))
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n" + r.Goal + "\n\n")
	writeGateRepeats(&b, r.Ways, kinds)
	writeGateTails(&b, r.Ways)
	b.WriteString("## Raw figures per phase (ms): p50 / p99 / p99.9 / max (requests, errors)\n\n")
	var phaseNames []string // every phase any way went through, in order
	for _, name := range []string{PhaseQuietPrev, PhaseQuiet, PhaseSteady, PhaseScaleUp, PhaseSteady4, PhasePodKill} {
		if slices.ContainsFunc(r.Ways, func(w GateWayResult) bool {
			return slices.ContainsFunc(w.Phases, func(p traffic.PhaseStats) bool { return p.Name == name })
		}) {
			phaseNames = append(phaseNames, name)
		}
	}
	head = []string{"way"}
	for _, name := range phaseNames {
		head = append(head, phaseTitle[name])
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
	for _, w := range r.Ways {
		row := []string{w.Name}
		for _, name := range phaseNames {
			i := slices.IndexFunc(w.Phases, func(p traffic.PhaseStats) bool { return p.Name == name })
			if i < 0 {
				row = append(row, "–")
				continue
			}
			p := w.Phases[i]
			row = append(row, fmt.Sprintf("%s / %s / %s / %s (%d, %d)", ms(p.P50), ms(p.P99), ms(p.P999), ms(p.Max), p.Count, p.Errors))
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	writeGateCPU(&b, r.Ways, phaseNames)
	b.WriteString("\n## New pods\n\n")
	for _, w := range r.Ways {
		for _, p := range w.Pods {
			ready := "not Ready"
			if p.Ready {
				ready = fmt.Sprintf("Ready %.0f s after", p.ReadyAfter.Seconds())
				if p.Started && p.StartedAfter < p.ReadyAfter {
					ready = fmt.Sprintf("containers ready %.0f s, %s", p.StartedAfter.Seconds(), ready)
				}
			}
			line := fmt.Sprintf("- %s: %s (%s): %s", w.Name, p.Name, p.Event, ready)
			if p.Warm != "" {
				line += "; danki.dev/warm: " + p.Warm
			}
			b.WriteString(line + "\n")
		}
	}
	if len(r.WarmUps) > 0 {
		var parts, retried []string
		for _, pod := range slices.Sorted(maps.Keys(r.WarmUps)) {
			parts = append(parts, fmt.Sprintf("%s %d", pod, r.WarmUps[pod]))
			if r.WarmUps[pod] > 1 && !slices.Contains(r.Rewarmed, pod) {
				retried = append(retried, pod)
			}
		}
		fmt.Fprintf(&b, "\ndanki gate's warm-ups per pod: %s.\n", strings.Join(parts, ", "))
		if len(retried) > 0 {
			fmt.Fprintf(&b, "\nRetried after a failed warm-up (the pod stayed out of load balancing until one converged): %s.\n", strings.Join(retried, ", "))
		}
		if len(r.Rewarmed) > 0 {
			fmt.Fprintf(&b, "\n**Warmed again after it was warm: %s** — the further warm-up set the condition False again, taking a warm pod out of load balancing.\n", strings.Join(r.Rewarmed, ", "))
		}
	}
	if r.Envoy != "" {
		fmt.Fprintf(&b, "\nEnvoy's load balancing for the slow-start way: %s\n", r.Envoy)
	}
	for _, w := range r.Ways {
		fmt.Fprintf(&b, "\nUser traffic, %s: %d requests, %d not OK, %.1f of %.0f qps achieved.", w.Name, w.Traffic.Requests, w.Traffic.Errors, w.Traffic.AchievedQPS, w.Traffic.AskedQPS)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

var phaseTitle = map[string]string{
	PhaseQuietPrev: "a quiet minute",
	PhaseQuiet:     "the next quiet minute",
	PhaseSteady:    "steady (2 pods)",
	PhaseScaleUp:   "minute after scale 2 → 4",
	PhaseSteady4:   "steady (4 pods)",
	PhasePodKill:   "minute after a pod kill",
}

func findRatio(rs []GateRatio, event string) (GateRatio, bool) {
	for _, r := range rs {
		if r.Event == event {
			return r, true
		}
	}
	return GateRatio{}, false
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// WriteGateBenchResults writes gatebench.md, gatebench.json and the chart
// (gatebench.svg, gatebench.png: one panel per way, the two events and the
// new pods' Ready moments marked) into dir, and returns their paths.
func WriteGateBenchResults(dir string, r *GateBenchResult) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "gatebench.json")
	if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	var md strings.Builder
	md.WriteString("# danki gate bench: new pods without warm-up, with Istio slow start, behind the warm gate\n\n")
	if err := WriteGateBenchReport(&md, r); err != nil {
		return nil, err
	}
	p = filepath.Join(dir, "gatebench.md")
	if err := os.WriteFile(p, []byte(md.String()), 0o644); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	panels := gateChartPanels(r)
	for _, ext := range []string{"svg", "png"} {
		p := filepath.Join(dir, "gatebench."+ext)
		if err := traffic.SaveChart(p, panels); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// gateChartPanels is one panel per way over [From, To), with the events and
// each new pod's Ready moment as markers.
func gateChartPanels(r *GateBenchResult) []traffic.ChartPanel {
	var panels []traffic.ChartPanel
	for _, w := range r.Ways {
		var samples []traffic.Sample
		for _, s := range w.Traffic.Samples {
			if !s.Start.Before(r.From) && s.Start.Before(r.To) {
				samples = append(samples, s)
			}
		}
		var markers []traffic.Marker
		for _, e := range w.Events {
			markers = append(markers, traffic.Marker{At: e.At, Label: e.Name})
			for _, p := range w.Pods {
				if p.EventAt.Equal(e.At) && p.Ready {
					markers = append(markers, traffic.Marker{At: e.At.Add(p.ReadyAfter), Label: "Ready"})
				}
			}
		}
		panels = append(panels, traffic.ChartPanel{Name: w.Name + " (" + w.Host + ")", Samples: samples, Markers: markers, Start: r.From})
	}
	return panels
}

// writeGateRepeats lists every repeat's own ratios per way and event (the
// table above pools them), with their median.
func writeGateRepeats(b *strings.Builder, ways []GateWayResult, kinds []string) {
	if !slices.ContainsFunc(ways, func(w GateWayResult) bool { return len(w.EachRepeat) > 0 }) {
		return
	}
	b.WriteString("## Each repeat on its own: p99 and p99.9 ratios in order, (median)\n\n")
	b.WriteString("The table above pools the repeats: all minutes after ÷ all steady states before.\n\n")
	b.WriteString("| way | event | p99 | p99.9 |\n|---|---|---|---|\n")
	for _, w := range ways {
		for _, ev := range kinds {
			var p99, p999 []float64
			for _, r := range w.EachRepeat {
				if r.Event == ev {
					p99, p999 = append(p99, r.P99), append(p999, r.P999)
				}
			}
			if len(p99) == 0 {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", w.Name, ev, ratioList(p99), ratioList(p999))
		}
	}
	b.WriteString("\n")
}

// ratioList renders ratios and their median: "1.10×, 1.31×, 0.95× (1.10×)".
func ratioList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmtRatio(x)
	}
	return strings.Join(parts, ", ") + " (" + fmtRatio(median(slices.Sorted(slices.Values(xs)))) + ")"
}

// writeGateCPU is the machine's CPU busy share in each phase of each way.
func writeGateCPU(b *strings.Builder, ways []GateWayResult, phaseNames []string) {
	if !slices.ContainsFunc(ways, func(w GateWayResult) bool { return len(w.CPU) > 0 }) {
		return
	}
	b.WriteString("\n## The machine's CPUs in each phase: mean busy share, all cores (the lab's pods, Envoys and control plane share them)\n\n")
	head := []string{"way"}
	for _, name := range phaseNames {
		head = append(head, phaseTitle[name])
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
	for _, w := range ways {
		row := []string{w.Name}
		for _, name := range phaseNames {
			if v, ok := w.CPU[name]; ok {
				row = append(row, fmt.Sprintf("%.0f %%", 100*v))
			} else {
				row = append(row, "–")
			}
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
}
