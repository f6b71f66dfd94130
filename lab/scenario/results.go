package scenario

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
)

// lab/RESULTS.md holds the lab's measured figures: one dated table per
// scenario, no narrative. make bench rewrites it from its result files
// (danki-lab results); a scenario the results do not measure keeps the
// section it had, as does a table with rows they do not measure
// (ResultsSection.Rows).

// Titles of RESULTS.md's sections, in the order the file lists them.
const (
	ResultsRollouts = "Rollouts under the same users"
	ResultsControl  = "Users on stable during the warm-up: danki ÷ a control with no warm-up"
	ResultsSpring   = "A slow-warming workload (Spring Boot): a fixed 100-request warm-up vs danki"
	ResultsSources  = "Warm-up sources: mirrored user traffic, synthetic load, none"
	ResultsOracle   = "How long a fresh pod takes to warm (the oracle)"
	ResultsBad      = "A bad version"
	ResultsGate     = "The warm gate: new pods of a plain Deployment"
	ResultsAA       = "A/A: is a good version ever rejected?"
	ResultsGoBench  = "Go benchmarks"
)

var resultsOrder = []string{ResultsRollouts, ResultsControl, ResultsSpring, ResultsSources, ResultsOracle, ResultsBad, ResultsGate, ResultsAA, ResultsGoBench}

// ResultsSection is one scenario's dated table.
type ResultsSection struct {
	Title string
	// Measured says when, on what and by what command: "2026-11-26 22:01
	// UTC on 2 CPUs (…); `make bench` (bench-results/run-2/results.json)".
	Measured string
	Table    string // Markdown, ending in a newline
	// Rows, if set, are the rows (first cells) the section measured: a
	// rewrite keeps the file's table when it has a row not among them (a
	// demo without the contenders does not replace the bench's table of
	// them; RewriteResults).
	Rows []string
}

func (s ResultsSection) markdown() string {
	return "## " + s.Title + "\n\nMeasured " + s.Measured + ".\n\n" + s.Table
}

const resultsHeader = `# Measured results

What the lab measured, one dated table per scenario. ` + "`make bench`" + ` rewrites this file from its
result files (` + "`danki-lab results --out lab/RESULTS.md bench-results`" + `; ` + "`make demo`" + `'s and ` + "`make aa`" + `'s
results the same way: ` + "`danki-lab results --out lab/RESULTS.md demo-results aa-results`" + `); a scenario a
run did not measure keeps its table, as does a table with rows the run did not measure. How the lab works and what each scenario does:
[README.md](README.md). Users' latencies are exact percentiles over every user request; ratios
divide two figures measured in the same run.

`

// CollectResults reads the result files under dirs — a demo's or bench
// run's results.json, gatebench.json, aa.json and go-bench.json — and
// returns the sections they measure. Of several files of one kind (bench
// runs run-1, run-2, …) the latest measured wins. machine describes the
// machine they ran on.
func CollectResults(dirs []string, machine string) ([]ResultsSection, error) {
	var (
		demo, gate, aa string
		demoAt, gateAt time.Time
		aaAt           time.Time
		demoRes        *Result
		gateRes        *GateBenchResult
		aaRes          *AAResult
		goBench        string
	)
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch d.Name() {
			case "results.json":
				var r Result
				if err := readJSON(path, &r); err != nil {
					return err
				}
				if demoRes == nil || r.Traffic.Start.After(demoAt) {
					demoRes, demoAt, demo = &r, r.Traffic.Start, path
				}
			case "gatebench.json":
				var r GateBenchResult
				if err := readJSON(path, &r); err != nil {
					return err
				}
				if gateRes == nil || r.From.After(gateAt) {
					gateRes, gateAt, gate = &r, r.From, path
				}
			case "aa.json":
				var r AAResult
				if err := readJSON(path, &r); err != nil {
					return err
				}
				if aaRes == nil || r.Start.After(aaAt) {
					aaRes, aaAt, aa = &r, r.Start, path
				}
			case "go-bench.json":
				goBench = path
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	on := func(at time.Time, cmd, path string) string {
		return fmt.Sprintf("%s on %s; %s (%s)", at.UTC().Format("2006-01-02 15:04 UTC"), machine, cmd, filepath.ToSlash(path))
	}
	var out []ResultsSection
	if demoRes != nil {
		out = append(out, demoSections(demoRes, on(demoAt, "`danki-lab demo`", demo))...)
	}
	if gateRes != nil && len(gateRes.Ways) > 0 {
		out = append(out, ResultsSection{Title: ResultsGate, Measured: on(gateAt, "`danki-lab gate-bench`", gate), Table: gateTable(gateRes)})
	}
	if aaRes != nil && aaRes.Tally.Runs > 0 {
		out = append(out, ResultsSection{Title: ResultsAA, Measured: on(aaAt, "`danki-lab aa`", aa), Table: aaTable(aaRes)})
	}
	if goBench != "" {
		s, err := goBenchSection(goBench, machine)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// demoSections: the rollouts side by side, the warm-up sources (when danki
// also warmed on mirrored traffic), the oracle's curve and the bad version.
func demoSections(res *Result, measured string) []ResultsSection {
	var out []ResultsSection
	var rollouts []traffic.Scenario
	for _, sc := range mainRollouts(res.Scenarios) {
		if sc.Name != BadDanki {
			rollouts = append(rollouts, sc)
		}
	}
	if len(rollouts) > 0 {
		names := make([]string, len(rollouts))
		for i, sc := range rollouts {
			names[i] = sc.Name
		}
		out = append(out, ResultsSection{Title: ResultsRollouts, Measured: measured, Table: rolloutTable(res, rollouts, false), Rows: names})
	}
	if rows := holdRows(res); rows != nil {
		var b strings.Builder
		b.WriteString("Users' latency (all on stable) while danki warmed the new pods at weight 0, and while the control's new pods sat at weight 0 as long with no warm-up traffic (danki's Rollout with a pause instead of the warm-up, rolled out right after it under the same users).\n\n")
		writeRows(&b, traffic.Markdown, rows)
		out = append(out, ResultsSection{Title: ResultsControl, Measured: measured, Table: b.String()})
	}
	if scs := springRollouts(res.Scenarios); len(scs) > 0 {
		var b strings.Builder
		if t := res.SpringTraffic; t != nil {
			fmt.Fprintf(&b, "The Spring Boot sample app rolled v1 → v2 twice under %.0f qps of its own users (its stable pods first loaded with up to %d requests, %d qps asked): a fixed 100 requests per pod, then danki's default warm-up; then setWeight 50 and the promotion.\n\n", t.AskedQPS, springWarmStable, springWarmQPS)
		}
		b.WriteString(rolloutTable(res, scs, true))
		if rows := springHoldRows(res); rows != nil {
			b.WriteString("\nOf their \"during\": the warm-up step, all users on stable.\n\n")
			writeRows(&b, traffic.Markdown, rows)
		}
		if r := springRatios(res.Ratios); len(r) > 0 {
			b.WriteString("\n| " + SpringFixed100 + " ÷ danki | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|\n")
			for _, ph := range []string{"during", "after"} {
				row := []string{ph + " rollout"}
				for _, q := range []string{"p50", "p99", "p99.9", "max"} {
					row = append(row, fmtRatio(r[q+" "+ph]))
				}
				b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			}
		}
		out = append(out, ResultsSection{Title: ResultsSpring, Measured: measured, Table: b.String()})
	}
	if slices.ContainsFunc(rollouts, func(sc traffic.Scenario) bool { return sc.Name == DankiMirror }) {
		var sources []traffic.Scenario
		for _, sc := range rollouts {
			if sc.Name == Baseline || sc.Name == DankiMirror || sc.Name == Danki {
				sources = append(sources, sc)
			}
		}
		out = append(out, ResultsSection{Title: ResultsSources, Measured: measured, Table: rolloutTable(res, sources, true)})
	}
	if o := res.Oracle; o != nil && len(o.Curve) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "A fresh pod loaded at the warm-up's pace: warm after %d requests.\n\n", o.WarmAfter)
		b.WriteString("| requests | p50 | p99 | max |\n|---|---:|---:|---:|\n")
		for _, c := range o.Curve {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Label(), latency.Format(c.P50), latency.Format(c.P99), latency.Format(c.Max))
		}
		out = append(out, ResultsSection{Title: ResultsOracle, Measured: measured, Table: b.String()})
	}
	if bad := res.Bad; bad != nil {
		outcome := "promoted"
		if bad.Aborted {
			outcome = "aborted"
			if bad.MaxWeight == 0 {
				outcome = "aborted at weight 0"
			}
		}
		table := "| version | fault | outcome | after the image change | most users on it | user requests on it (Envoy) |\n|---|---|---|---:|---:|---:|\n" +
			fmt.Sprintf("| %s | %s | %s | %s | %d%% | %d |\n", bad.Version, bad.Slowness, outcome, fmtDuration(bad.SincePatch), bad.MaxWeight, bad.UserRequests)
		out = append(out, ResultsSection{Title: ResultsBad, Measured: measured, Table: table})
	}
	return out
}

// springRatios are the Spring fixed count ÷ danki ratios by "p99 during"
// and the like.
func springRatios(rs []Ratio) map[string]float64 {
	out := map[string]float64{}
	prefix := SpringFixed100 + " ÷ danki, "
	for _, r := range rs {
		if q, ok := strings.CutPrefix(r.Name, prefix); ok {
			out[strings.TrimSuffix(q, " rollout")] = r.Value
		}
	}
	return out
}

// rolloutTable is the users' latency per rollout: the steady p99 before,
// p50 … max during and after; with the warm-up's length and source when
// warmup is set.
func rolloutTable(res *Result, scs []traffic.Scenario, warmup bool) string {
	head := []string{"rollout", "time"}
	if warmup {
		head = append(head, "warm-up")
	}
	head = append(head, "before p99", "during p50", "p99", "p99.9", "max", "after p50", "p99", "p99.9", "max")
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|---" + strings.Repeat("|---:", len(head)-1) + "|\n")
	p50 := func(p *traffic.PhaseStats) time.Duration { return p.P50 }
	p99 := func(p *traffic.PhaseStats) time.Duration { return p.P99 }
	p999 := func(p *traffic.PhaseStats) time.Duration { return p.P999 }
	pmax := func(p *traffic.PhaseStats) time.Duration { return p.Max }
	for _, sc := range scs {
		row := []string{sc.Name, fmtDuration(sc.RolloutDuration)}
		if warmup {
			w := "–"
			if r, ok := res.run(sc.Name); ok {
				w = warmupCell(r)
			}
			row = append(row, w)
		}
		row = append(row, cell(sc, "before", p99),
			cell(sc, "during", p50), cell(sc, "during", p99), cell(sc, "during", p999), cell(sc, "during", pmax),
			cell(sc, "after", p50), cell(sc, "after", p99), cell(sc, "after", p999), cell(sc, "after", pmax))
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// gateTable is each way's users' tail in the minute after each event ÷ the
// steady state right before it.
func gateTable(r *GateBenchResult) string {
	var kinds []string
	for _, w := range r.Ways {
		for _, rt := range w.Ratios {
			if !slices.Contains(kinds, rt.Event) {
				kinds = append(kinds, rt.Event)
			}
		}
	}
	var b strings.Builder
	b.WriteString("Users' p99, p99.9 and max in the minute after each event ÷ the same way's minute right before it.\n\n")
	head, align := []string{"way"}, "|---|"
	for _, k := range kinds {
		head = append(head, k+": p99", "p99.9", "max")
		align += "---:|---:|---:|"
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n" + align + "\n")
	for _, w := range r.Ways {
		row := []string{w.Name}
		for _, k := range kinds {
			rt, _ := findRatio(w.Ratios, k)
			row = append(row, fmtRatio(rt.P99), fmtRatio(rt.P999), fmtRatio(rt.Max))
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

func aaTable(r *AAResult) string {
	users, failed := 0, 0
	for _, run := range r.Runs {
		users += run.UserRequests
		failed += run.UserErrors
	}
	t := r.Tally
	return "| runs | promoted | rejected | failed user requests | closest canary p99 ÷ rejection limit | warm-up length ÷ the rule's minimum: median, max | rollout time: median, max |\n" +
		"|---:|---:|---:|---:|---:|---:|---:|\n" +
		fmt.Sprintf("| %d | %d | %d | %d of %d | %.2f | %.2f, %.2f | %s, %s |\n", t.Runs, t.Promoted, t.Rejected, failed, users,
			t.MaxCanaryToLimit, t.MedianStopRatio, t.MaxStopRatio, fmtDuration(t.MedianElapsed), fmtDuration(t.MaxElapsed))
}

// gomaxprocs is the -N suffix go test adds to a benchmark's name.
var gomaxprocs = regexp.MustCompile(`-\d+$`)

// goBenchSection lists every benchmark of bench.sh's go-bench.json (one
// object per benchmark line: name, n, then one key per unit) with its
// figures; memory figures are left out.
func goBenchSection(path, machine string) (ResultsSection, error) {
	var rows []map[string]any
	if err := readJSON(path, &rows); err != nil {
		return ResultsSection{}, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return ResultsSection{}, err
	}
	var b strings.Builder
	b.WriteString("| benchmark | figures |\n|---|---|\n")
	for _, row := range rows {
		name, _ := row["name"].(string)
		var units []string
		for k := range row {
			if k != "name" && k != "n" && k != "B/op" && k != "allocs/op" {
				units = append(units, k)
			}
		}
		sort.Strings(units)
		var figs []string
		for _, u := range units {
			if v, ok := row[u].(float64); ok && !(u == "ns/op" && v == 0) {
				figs = append(figs, strconv.FormatFloat(v, 'g', 4, 64)+" "+u)
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", gomaxprocs.ReplaceAllString(name, ""), strings.Join(figs, ", "))
	}
	measured := fmt.Sprintf("%s on %s; `go test -bench . ./...` (%s)", info.ModTime().UTC().Format("2006-01-02 15:04 UTC"), machine, filepath.ToSlash(path))
	return ResultsSection{Title: ResultsGoBench, Measured: measured, Table: b.String()}, nil
}

// RewriteResults writes path (lab/RESULTS.md) with sections: each replaces
// the section of the same title, sections the file had and sections does
// not replace stay as they were, in the file's fixed order. A section with
// Rows does not replace a table with rows it did not measure; kept says
// which, and the rows it lacked.
func RewriteResults(path string, sections []ResultsSection) (kept map[string][]string, err error) {
	old := map[string]string{}
	var extra []string // titles RESULTS.md had that this code does not know
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		for _, part := range strings.Split("\n"+string(data), "\n## ")[1:] {
			title, _, _ := strings.Cut(part, "\n")
			old[title] = "## " + strings.TrimRight(part, "\n") + "\n"
			if !slices.Contains(resultsOrder, title) {
				extra = append(extra, title)
			}
		}
	case !os.IsNotExist(err):
		return nil, err
	}
	for _, s := range sections {
		if missing := missingRows(old[s.Title], s.Rows); len(missing) > 0 {
			if kept == nil {
				kept = map[string][]string{}
			}
			kept[s.Title] = missing
			continue
		}
		old[s.Title] = s.markdown()
	}
	var b strings.Builder
	b.WriteString(resultsHeader)
	first := true
	for _, title := range slices.Concat(resultsOrder, extra) {
		md, ok := old[title]
		if !ok {
			continue
		}
		if !first {
			b.WriteString("\n")
		}
		first = false
		b.WriteString(md)
	}
	return kept, os.WriteFile(path, []byte(b.String()), 0o644)
}

// missingRows are the rows of the section md's table (their first cells)
// not among rows; none when rows is nil (the section replaces any table).
func missingRows(md string, rows []string) []string {
	if rows == nil {
		return nil
	}
	var missing []string
	for _, line := range strings.Split(md, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.TrimSpace(cells[0]) != "" {
			continue // not a table row
		}
		name := strings.TrimSpace(cells[1])
		if name == "rollout" || strings.HasPrefix(name, "---") || slices.Contains(rows, name) {
			continue // the header, its rule, or measured
		}
		missing = append(missing, name)
	}
	return missing
}
