package scenario

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
)

const msec = time.Millisecond

// fixtureScenario builds a scenario's before/during/after stats from p50, p99,
// p99.9 and max each.
func fixtureScenario(name string, took time.Duration, before, during, after [4]time.Duration) traffic.Scenario {
	ph := func(n string, v [4]time.Duration) traffic.PhaseStats {
		return traffic.PhaseStats{Name: n, Summary: latency.Summary{Count: 2400, P50: v[0], P99: v[1], P999: v[2], Max: v[3]}}
	}
	return traffic.Scenario{Name: name, RolloutDuration: took, Phases: []traffic.PhaseStats{ph("before", before), ph("during", during), ph("after", after)}}
}

func writeFixture(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRewriteResults: bench-results as make bench leaves them (two runs, the
// gate bench, go-bench.json) rewrite RESULTS.md: the later run's tables
// replace the old ones, the A/A section no result measured stays, the
// header is the writer's.
func TestRewriteResults(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench-results")
	start := time.Date(2026, 11, 24, 15, 2, 0, 0, time.UTC)
	run := func(at time.Time, dankiDuringP99 time.Duration) *Result {
		warmStart := at.Add(10 * time.Minute)
		return &Result{
			Scenarios: []traffic.Scenario{
				fixtureScenario(Baseline, 62*time.Second, [4]time.Duration{2 * msec, 5310 * time.Microsecond, 9 * msec, 11 * msec},
					[4]time.Duration{2780 * time.Microsecond, 8090 * time.Microsecond, 40600 * time.Microsecond, 422 * msec},
					[4]time.Duration{2910 * time.Microsecond, 22800 * time.Microsecond, 541 * msec, 580 * msec}),
				fixtureScenario(DankiMirror, 200*time.Second, [4]time.Duration{2 * msec, 15 * msec, 20 * msec, 30 * msec},
					[4]time.Duration{5720 * time.Microsecond, 31200 * time.Microsecond, 88600 * time.Microsecond, 126 * msec},
					[4]time.Duration{5140 * time.Microsecond, 12500 * time.Microsecond, 22100 * time.Microsecond, 45100 * time.Microsecond}),
				fixtureScenario(Danki, 171*time.Second, [4]time.Duration{2 * msec, 5380 * time.Microsecond, 9 * msec, 11 * msec},
					[4]time.Duration{2660 * time.Microsecond, dankiDuringP99, 27600 * time.Microsecond, 81600 * time.Microsecond},
					[4]time.Duration{2510 * time.Microsecond, 4540 * time.Microsecond, 11700 * time.Microsecond, 17 * msec}),
			},
			Runs: []Run{
				{Scenario: DankiMirror, WarmupStart: warmStart, WarmupEnd: warmStart.Add(79 * time.Second), WarmupMirrored: 3958},
				{Scenario: Danki, WarmupStart: warmStart, WarmupEnd: warmStart.Add(100 * time.Second), WarmupRequests: 1950},
			},
			Traffic: traffic.Result{Start: at},
			Oracle: &Oracle{WarmAfter: 500, Curve: []traffic.WarmupBucket{
				{First: 1, Last: 1, Summary: latency.Summary{P50: 277 * msec, P99: 277 * msec, Max: 277 * msec}},
				{First: 1001, Last: 5003, Summary: latency.Summary{P50: 1990 * time.Microsecond, P99: 3800 * time.Microsecond, Max: 8360 * time.Microsecond}},
			}},
		}
	}
	writeFixture(t, filepath.Join(bench, "run-1", "results.json"), run(start, 99*msec))
	writeFixture(t, filepath.Join(bench, "run-2", "results.json"), run(start.Add(20*time.Minute), 7160*time.Microsecond))
	writeFixture(t, filepath.Join(bench, "gate", "gatebench.json"), &GateBenchResult{
		From: start.Add(time.Hour),
		Ways: []GateWayResult{
			{GateWay: GateWay{Name: "no warm-up"}, Ratios: []GateRatio{{Event: EventScaleUp, P99: 3.14, P999: 41.3, Max: 35.5}, {Event: EventPodKill, P99: 1.69, P999: 9.04, Max: 29.3}}},
			{GateWay: GateWay{Name: "JVM start only (control)"}, Ratios: []GateRatio{{Event: EventScaleUp, P99: 1.22, P999: 3.78, Max: 4.92}, {Event: EventQuiet, P99: 0.96, P999: 1, Max: 0.99}}},
		},
	})
	goBench := filepath.Join(bench, "go-bench.json")
	if err := os.WriteFile(goBench, []byte(`[
{"name":"BenchmarkTailTest-2","n":2000000,"ns/op":550,"B/op":0,"allocs/op":0},
{"name":"BenchmarkUsersDuringWarmup/ramp+guard-2","n":1,"ns/op":0,"user-p99-ratio":1.06}
]`), 0o644); err != nil {
		t.Fatal(err)
	}
	at := start.Add(2 * time.Hour)
	if err := os.Chtimes(goBench, at, at); err != nil {
		t.Fatal(err)
	}

	results := filepath.Join(dir, "RESULTS.md")
	old := "# old header\n\nold words\n\n## " + ResultsRollouts + "\n\nMeasured long ago.\n\n| rollout | time |\n|---|---:|\n| baseline | 9m |\n| danki | 9m |\n\n" +
		"## " + ResultsAA + "\n\nMeasured 2026-11-26 on a machine.\n\n| runs |\n|---:|\n| 20 |\n"
	if err := os.WriteFile(results, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	sections, err := CollectResults([]string{bench}, "2 CPUs (Xeon), 24 GiB RAM")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RewriteResults(results, sections); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	want := resultsHeader +
		"## " + ResultsRollouts + "\n\nMeasured 2026-11-24 15:22 UTC on 2 CPUs (Xeon), 24 GiB RAM; `danki-lab demo` (" + filepath.ToSlash(filepath.Join(bench, "run-2", "results.json")) + ").\n\n" +
		"| rollout | time | before p99 | during p50 | p99 | p99.9 | max | after p50 | p99 | p99.9 | max |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| baseline | 1m2s | 5.31ms | 2.78ms | 8.09ms | 40.6ms | 422ms | 2.91ms | 22.8ms | 541ms | 580ms |\n" +
		"| danki (mirror) | 3m20s | 15.0ms | 5.72ms | 31.2ms | 88.6ms | 126ms | 5.14ms | 12.5ms | 22.1ms | 45.1ms |\n" +
		"| danki | 2m51s | 5.38ms | 2.66ms | 7.16ms | 27.6ms | 81.6ms | 2.51ms | 4.54ms | 11.7ms | 17.0ms |\n" +
		"\n## " + ResultsSources + "\n\nMeasured 2026-11-24 15:22 UTC on 2 CPUs (Xeon), 24 GiB RAM; `danki-lab demo` (" + filepath.ToSlash(filepath.Join(bench, "run-2", "results.json")) + ").\n\n" +
		"| rollout | time | warm-up | before p99 | during p50 | p99 | p99.9 | max | after p50 | p99 | p99.9 | max |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| baseline | 1m2s | – | 5.31ms | 2.78ms | 8.09ms | 40.6ms | 422ms | 2.91ms | 22.8ms | 541ms | 580ms |\n" +
		"| danki (mirror) | 3m20s | 1m19s, 3958 mirrored | 15.0ms | 5.72ms | 31.2ms | 88.6ms | 126ms | 5.14ms | 12.5ms | 22.1ms | 45.1ms |\n" +
		"| danki | 2m51s | 1m40s, 1950/pod | 5.38ms | 2.66ms | 7.16ms | 27.6ms | 81.6ms | 2.51ms | 4.54ms | 11.7ms | 17.0ms |\n" +
		"\n## " + ResultsOracle + "\n\nMeasured 2026-11-24 15:22 UTC on 2 CPUs (Xeon), 24 GiB RAM; `danki-lab demo` (" + filepath.ToSlash(filepath.Join(bench, "run-2", "results.json")) + ").\n\n" +
		"A fresh pod loaded at the warm-up's pace: warm after 500 requests.\n\n" +
		"| requests | p50 | p99 | max |\n|---|---:|---:|---:|\n" +
		"| 1 | 277ms | 277ms | 277ms |\n" +
		"| 1,001–5,003 | 1.99ms | 3.80ms | 8.36ms |\n" +
		"\n## " + ResultsGate + "\n\nMeasured 2026-11-24 16:02 UTC on 2 CPUs (Xeon), 24 GiB RAM; `danki-lab gate-bench` (" + filepath.ToSlash(filepath.Join(bench, "gate", "gatebench.json")) + ").\n\n" +
		"Users' p99, p99.9 and max in the minute after each event ÷ the same way's minute right before it.\n\n" +
		"| way | scale 2 → 4: p99 | p99.9 | max | pod killed: p99 | p99.9 | max | nothing (a quiet minute): p99 | p99.9 | max |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| no warm-up | 3.14× | 41.30× | 35.50× | 1.69× | 9.04× | 29.30× | – | – | – |\n" +
		"| JVM start only (control) | 1.22× | 3.78× | 4.92× | – | – | – | 0.96× | 1.00× | 0.99× |\n" +
		"\n## " + ResultsAA + "\n\nMeasured 2026-11-26 on a machine.\n\n| runs |\n|---:|\n| 20 |\n" +
		"\n## " + ResultsGoBench + "\n\nMeasured 2026-11-24 17:02 UTC on 2 CPUs (Xeon), 24 GiB RAM; `go test -bench . ./...` (" + filepath.ToSlash(goBench) + ").\n\n" +
		"| benchmark | figures |\n|---|---|\n" +
		"| BenchmarkTailTest | 550 ns/op |\n" +
		"| BenchmarkUsersDuringWarmup/ramp+guard | 1.06 user-p99-ratio |\n"
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("RESULTS.md line %d:\n got %q\nwant %q\n\nwhole file:\n%s", i+1, gl[i], wl[i], got)
			}
		}
		t.Fatalf("RESULTS.md has %d lines, want %d:\n%s", len(gl), len(wl), got)
	}

	// Rewriting with the same results changes nothing.
	if _, err := RewriteResults(results, sections); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(results)
	if string(again) != got {
		t.Fatalf("a second rewrite changed the file:\n%s", again)
	}

	// A run that measured fewer rollouts than the file's table (a demo
	// without the contenders) keeps that table and says which rows it
	// lacked; its other sections are written.
	fewer := run(start.Add(time.Hour), 5*msec)
	fewer.Scenarios = slices.DeleteFunc(fewer.Scenarios, func(sc traffic.Scenario) bool { return sc.Name == DankiMirror })
	fewer.Runs = slices.DeleteFunc(fewer.Runs, func(r Run) bool { return r.Scenario == DankiMirror })
	writeFixture(t, filepath.Join(dir, "demo-results", "results.json"), fewer)
	sections, err = CollectResults([]string{filepath.Join(dir, "demo-results")}, "m")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := RewriteResults(results, sections)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{ResultsRollouts: {DankiMirror}}; !reflect.DeepEqual(kept, want) {
		t.Errorf("kept %v; want %v", kept, want)
	}
	after, _ := os.ReadFile(results)
	if !strings.Contains(string(after), "| "+DankiMirror+" | 3m20s | 15.0ms") || strings.Count(string(after), "2026-11-24 16:02 UTC on m") == 0 {
		t.Errorf("want the rollouts table kept and the run's other sections written:\n%s", after)
	}
}

// TestCollectResultsEmpty: no result files, no sections (the command
// refuses rather than rewrite the file with nothing).
func TestCollectResultsEmpty(t *testing.T) {
	sections, err := CollectResults([]string{t.TempDir()}, "m")
	if err != nil || len(sections) != 0 {
		t.Fatalf("CollectResults(empty) = %v, %v", sections, err)
	}
}

// TestCheckedInResultsParse: lab/RESULTS.md is in the writer's shape: its
// header is the writer's and every section is one the writer knows, with a
// "Measured" line and a table, and the writer keeps it as it is.
func TestCheckedInResultsParse(t *testing.T) {
	data, err := os.ReadFile("../RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if !strings.HasPrefix(doc, resultsHeader) {
		t.Fatal("lab/RESULTS.md does not start with the writer's header (lab/scenario/results.go)")
	}
	parts := strings.Split("\n"+doc, "\n## ")[1:]
	if len(parts) < 5 {
		t.Fatalf("lab/RESULTS.md has %d sections", len(parts))
	}
	for _, part := range parts {
		title, body, _ := strings.Cut(part, "\n")
		known := false
		for _, s := range resultsOrder {
			known = known || s == title
		}
		if !known {
			t.Errorf("section %q: not one the writer writes", title)
		}
		if !strings.HasPrefix(body, "\nMeasured ") || !strings.Contains(body, "\n|---") {
			t.Errorf("section %q: want a Measured line and a table", title)
		}
	}
	// The writer keeps it byte for byte when no result replaces a section.
	tmp := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RewriteResults(tmp, nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(tmp); string(again) != doc {
		t.Fatalf("RewriteResults changed lab/RESULTS.md with nothing to replace:\n%s", again)
	}
}

// TestControlAndSpringReport: a bench run with the control and the Spring
// pair reports danki ÷ control over the users' latency during the warm-up,
// and the Spring fixed count ÷ danki during and after, as ratio lines
// (bench.sh copies them into summary.md), as tables in results.md, and as
// RESULTS.md's two sections; the sample app's table leaves the Spring
// rollouts out.
func TestControlAndSpringReport(t *testing.T) {
	us := time.Microsecond
	at := time.Date(2026, 11, 28, 18, 0, 0, 0, time.UTC)
	hold := func(p50, p99, p999, max time.Duration) *latency.Summary {
		return &latency.Summary{Count: 4800, P50: p50, P99: p99, P999: p999, Max: max}
	}
	res := &Result{
		Scenarios: []traffic.Scenario{
			fixtureScenario(Danki, 171*time.Second, [4]time.Duration{2 * msec, 5 * msec, 9 * msec, 11 * msec},
				[4]time.Duration{2660 * us, 7160 * us, 27600 * us, 81600 * us}, [4]time.Duration{2510 * us, 4540 * us, 11700 * us, 17 * msec}),
			fixtureScenario(Control, 95*time.Second, [4]time.Duration{2 * msec, 5 * msec, 9 * msec, 11 * msec},
				[4]time.Duration{3 * msec, 40 * msec, 400 * msec, 600 * msec}, [4]time.Duration{3 * msec, 30 * msec, 300 * msec, 500 * msec}),
			fixtureScenario(SpringFixed100, 50*time.Second, [4]time.Duration{3 * msec, 6 * msec, 10 * msec, 20 * msec},
				[4]time.Duration{4 * msec, 60 * msec, 300 * msec, 500 * msec}, [4]time.Duration{6 * msec, 90 * msec, 200 * msec, 400 * msec}),
			fixtureScenario(SpringDanki, 100*time.Second, [4]time.Duration{3 * msec, 6 * msec, 10 * msec, 20 * msec},
				[4]time.Duration{3 * msec, 12 * msec, 30 * msec, 50 * msec}, [4]time.Duration{3 * msec, 9 * msec, 20 * msec, 40 * msec}),
		},
		Runs: []Run{
			{Scenario: Danki, WarmupStart: at, WarmupEnd: at.Add(60 * time.Second), WarmupRequests: 1500, HoldStart: at, HoldEnd: at.Add(60 * time.Second),
				Hold: hold(3*msec, 12*msec, 30*msec, 90*msec)},
			{Scenario: Control, HoldStart: at.Add(10 * time.Minute), HoldEnd: at.Add(11 * time.Minute), Hold: hold(2*msec, 8*msec, 40*msec, 60*msec)},
			{Scenario: SpringFixed100, WarmupStart: at, WarmupEnd: at.Add(2 * time.Second), WarmupRequests: 100},
			// The fixed count's hold was not seen: its row is left out.
			{Scenario: SpringDanki, WarmupStart: at, WarmupEnd: at.Add(35 * time.Second), WarmupRequests: 1900, HoldStart: at, HoldEnd: at.Add(35 * time.Second),
				Hold: &latency.Summary{Count: 1400, P50: 4 * msec, P99: 25 * msec, P999: 45 * msec, Max: 48 * msec}},
		},
		Traffic:       traffic.Result{Start: at, AskedQPS: 80, AchievedQPS: 80},
		SpringTraffic: &traffic.Result{AskedQPS: 40, AchievedQPS: 40, URL: DefaultGatewayURL},
	}
	res.Ratios = ratios(res)
	got := map[string]float64{}
	for _, r := range res.Ratios {
		got[r.Name] = r.Value
	}
	for name, w := range map[string]float64{
		"danki ÷ control, users' p50 during the warm-up (all on stable)":   1.5,
		"danki ÷ control, users' p99 during the warm-up (all on stable)":   1.5,
		"danki ÷ control, users' p99.9 during the warm-up (all on stable)": 0.75,
		"danki ÷ control, users' max during the warm-up (all on stable)":   1.5,
		"Spring: fixed warm-up 100 ÷ danki, p50 during rollout":            4.0 / 3,
		"Spring: fixed warm-up 100 ÷ danki, p99 during rollout":            5,
		"Spring: fixed warm-up 100 ÷ danki, p99.9 during rollout":          10,
		"Spring: fixed warm-up 100 ÷ danki, max during rollout":            10,
		"Spring: fixed warm-up 100 ÷ danki, p50 after rollout":             2,
		"Spring: fixed warm-up 100 ÷ danki, p99 after rollout":             10,
		"Spring: fixed warm-up 100 ÷ danki, p99.9 after rollout":           10,
		"Spring: fixed warm-up 100 ÷ danki, max after rollout":             10,
		// Kept: danki over its own steady state.
		"danki p99 during rollout ÷ warm steady state": 1.432,
	} {
		if g, ok := got[name]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %t), want %v", name, g, ok, w)
		}
	}
	// The control and the Spring rollouts are no contenders of danki's.
	for name := range got {
		if strings.HasPrefix(name, Control+" ÷") || strings.HasPrefix(name, SpringDanki+" ÷") || strings.Contains(name, "Spring: fixed warm-up 100 ÷ danki, rollout time") {
			t.Errorf("unexpected ratio %q", name)
		}
	}

	var b strings.Builder
	if err := WriteReport(&b, traffic.Markdown, res); err != nil {
		t.Fatal(err)
	}
	report := b.String()
	summary := regexp.MustCompile(`(?m)^- .* ÷ .*$`).FindAllString(report, -1)
	if len(summary) != len(res.Ratios) { // every ratio's name has its ÷
		t.Errorf("report has %d ratio lines bench.sh would pick up, want %d:\n%s", len(summary), len(res.Ratios), strings.Join(summary, "\n"))
	}
	for _, line := range []string{
		"| danki | 1m0s warm-up | 4800 | 3.00ms | 12.0ms | 30.0ms | 90.0ms |",
		"| control (no warm-up) | 1m0s pause, no warm-up | 4800 | 2.00ms | 8.00ms | 40.0ms | 60.0ms |",
		"| danki ÷ control |  |  | 1.50× | 1.50× | 0.75× | 1.50× |",
		"| control (no warm-up) | 1m35s | none (pause 1m0s) | 5.00ms | 3.00ms | 40.0ms | 400ms | 600ms | 3.00ms | 30.0ms | 300ms | 500ms |",
		"| Spring: fixed warm-up 100 | 50s | 2s, 100/pod | 6.00ms | 4.00ms | 60.0ms | 300ms | 500ms | 6.00ms | 90.0ms | 200ms | 400ms |",
		"| Spring: danki | 1m40s | 35s, 1900/pod | 6.00ms | 3.00ms | 12.0ms | 30.0ms | 50.0ms | 3.00ms | 9.00ms | 20.0ms | 40.0ms |",
		"| Spring: danki | 35s warm-up | 1400 | 4.00ms | 25.0ms | 45.0ms | 48.0ms |",
		"- Spring users: 0 requests at 40.0 of 40 qps asked (0 failed), through " + DefaultGatewayURL + " (host spring.lab)",
	} {
		if !strings.Contains(report, line) {
			t.Errorf("report lacks %q:\n%s", line, report)
		}
	}

	sections := demoSections(res, "now")
	titles := map[string]string{}
	for _, s := range sections {
		titles[s.Title] = s.Table
	}
	if tbl := titles[ResultsRollouts]; strings.Contains(tbl, "Spring") || !strings.Contains(tbl, "| "+Control+" | 1m35s |") {
		t.Errorf("the sample app's rollout table: want the control and no Spring rollout:\n%s", tbl)
	}
	if tbl := titles[ResultsControl]; !strings.Contains(tbl, "| rollout | new pods at weight 0 | users' requests | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|---:|\n| danki | 1m0s warm-up | 4800 |") ||
		!strings.Contains(tbl, "| danki ÷ control |  |  | 1.50× | 1.50× | 0.75× | 1.50× |\n") {
		t.Errorf("RESULTS.md's control section:\n%s", tbl)
	}
	wantSpring := "The Spring Boot sample app rolled v1 → v2 twice under 40 qps of its own users (its stable pods first loaded with up to 12000 requests, 200 qps asked): a fixed 100 requests per pod, then danki's default warm-up; then setWeight 50 and the promotion.\n\n" +
		"| rollout | time | warm-up | before p99 | during p50 | p99 | p99.9 | max | after p50 | p99 | p99.9 | max |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| Spring: fixed warm-up 100 | 50s | 2s, 100/pod | 6.00ms | 4.00ms | 60.0ms | 300ms | 500ms | 6.00ms | 90.0ms | 200ms | 400ms |\n" +
		"| Spring: danki | 1m40s | 35s, 1900/pod | 6.00ms | 3.00ms | 12.0ms | 30.0ms | 50.0ms | 3.00ms | 9.00ms | 20.0ms | 40.0ms |\n" +
		"\nOf their \"during\": the warm-up step, all users on stable.\n\n" +
		"| rollout | new pods at weight 0 | users' requests | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|---:|\n" +
		"| Spring: danki | 35s warm-up | 1400 | 4.00ms | 25.0ms | 45.0ms | 48.0ms |\n" +
		"\n| Spring: fixed warm-up 100 ÷ danki | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|\n" +
		"| during rollout | 1.33× | 5.00× | 10.00× | 10.00× |\n" +
		"| after rollout | 2.00× | 10.00× | 10.00× | 10.00× |\n"
	if tbl := titles[ResultsSpring]; tbl != wantSpring {
		t.Errorf("RESULTS.md's Spring section:\n%s\nwant:\n%s", tbl, wantSpring)
	}
	// A run without the control or Spring leaves their sections alone; a
	// failed Spring pair says why it is missing.
	plain := &Result{Scenarios: res.Scenarios[:1], Runs: res.Runs[:1], SpringError: "app-spring: aborted"}
	b.Reset()
	if err := WriteReport(&b, traffic.Text, plain); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "the Spring app's rollouts failed (not in the tables): app-spring: aborted") || strings.Contains(b.String(), "Spring users") {
		t.Errorf("report of a failed Spring pair:\n%s", b.String())
	}
	for _, s := range demoSections(plain, "now") {
		if s.Title == ResultsControl || s.Title == ResultsSpring {
			t.Errorf("a run without them writes section %q", s.Title)
		}
	}
}
