package warmup

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	"fortio.org/fortio/stats"
	"fortio.org/fortio/version"

	"github.com/danki-dev/danki/pkg/latency"
)

// Result is what a warm-up measured.
type Result struct {
	// Targets holds one entry per canary target, in the order given.
	Targets []TargetResult `json:"targets"`
	// Stable is the stable pool, loaded side by side (CompareToStable only).
	Stable *TargetResult `json:"stable,omitempty"`
	// Backoffs are the times the neighbour guard lowered the pace because
	// the latency on stable rose (Config.NeighbourGuard).
	Backoffs []Backoff `json:"backoffs,omitempty"`
	// Converged is true when every target converged.
	Converged bool `json:"converged"`
	// Reason says why the warm-up ended.
	Reason  string        `json:"reason"`
	Start   time.Time     `json:"start"`
	Elapsed time.Duration `json:"elapsed"`
	// Seed is the seed the request templates used (Config.Seed, or the
	// random one picked), to reproduce the request stream.
	Seed   int64  `json:"seed"`
	Config Config `json:"config"`
	// Yield says how the targets' yield went (Options.Yield); nil without.
	Yield *YieldResult `json:"yield,omitempty"`
	// Mesh is danki's SPIFFE ID when it dialled targets with Istio mTLS
	// (each target's Target.Peer names the pod's).
	Mesh string `json:"mesh,omitempty"`
}

// TargetResult is the measurement of one target.
type TargetResult struct {
	Target Target `json:"target"`
	// Windows are the complete windows in order, then at most one partial
	// window with the requests left when load stopped.
	Windows  []WindowStats `json:"windows"`
	Requests int64         `json:"requests"`
	Errors   int64         `json:"errors"`
	// Converged, and after how many requests (window ConvergedWindow).
	Converged       bool  `json:"converged"`
	ConvergedAfter  int64 `json:"convergedAfter,omitempty"`
	ConvergedWindow int   `json:"convergedWindow,omitempty"`
	// Warm is, for a converged target, the rule that called it warm, with
	// its thresholds and figures (rule.Decision.Reason).
	Warm string `json:"warm,omitempty"`
	// Settled, when stable was loaded side by side: the target converged
	// on a plateau of its own that lasted half its warm-up without
	// reaching stable's latency (a version a little slower than stable, a
	// pod on a slower node), and its figures; "" when it converged as fast
	// as stable, or without stable.
	Settled string `json:"settled,omitempty"`
	// NearStable: not converged when a bound ended the warm-up, but
	// accepted as warm next to stable (Config.AcceptNearStable).
	NearStable bool          `json:"nearStable,omitempty"`
	RetCodes   map[int]int64 `json:"retCodes,omitempty"`
	// LastError is the last transport error (e.g. connection refused), else
	// the HTTP status of the last failed answer ("HTTP 503"), if any.
	LastError string `json:"lastError,omitempty"`
	// FullPaceAfter is the request count at which the pace ramp first
	// reached qps (0: never; 1: no ramp, startQPS = qps); PaceCuts counts
	// the times the ramp halved the pace because latency jumped;
	// BudgetCuts the steps at which the CPU budget lowered it
	// (Config.CPUBudget), and CPUBudget is that budget in cores (0: none).
	// JIT says whether the JVM's own signal was used (Config.JITMetrics):
	// "used (compile time flat since request 6200)", "not exposed (404 at
	// :8080/actuator/prometheus)", "unreadable (…)"; "" when not read.
	JIT           string  `json:"jit,omitempty"`
	FullPaceAfter int64   `json:"fullPaceAfter,omitempty"`
	PaceCuts      int     `json:"paceCuts,omitempty"`
	BudgetCuts    int     `json:"budgetCuts,omitempty"`
	CPUBudget     float64 `json:"cpuBudget,omitempty"`

	fortio        periodic.RunnerResults
	hist, errHist *stats.Histogram
}

// Latencies returns every request's latency to this target, in no
// particular order (complete windows and the partial one). They are kept in
// memory only, and only with Options.KeepLatencies: a Result read back from
// JSON has none.
func (t *TargetResult) Latencies() []time.Duration {
	n := 0
	for _, w := range t.Windows {
		n += len(w.Latencies())
	}
	out := make([]time.Duration, 0, n)
	for _, w := range t.Windows {
		out = append(out, w.Latencies()...)
	}
	return out
}

// Requests counts warm-up requests sent to all canary targets.
func (r *Result) Requests() int64 {
	var n int64
	for _, t := range r.Targets {
		n += t.Requests
	}
	return n
}

// Windows is the largest number of complete windows of any target.
func (r *Result) Windows() int {
	n := 0
	for _, t := range r.Targets {
		c := 0
		for _, w := range t.Windows {
			if !w.Partial {
				c++
			}
		}
		n = max(n, c)
	}
	return n
}

func (r *Result) convergedTargets() int {
	n := 0
	for _, t := range r.Targets {
		if t.Converged {
			n++
		}
	}
	return n
}

// P99Trend returns the worst first-window p99 and the worst last-complete-
// window p99 across targets; ok is false before any window completed.
func (r *Result) P99Trend() (first, last time.Duration, ok bool) {
	for _, t := range r.Targets {
		if len(t.Windows) == 0 || t.Windows[0].Partial {
			continue
		}
		w, _ := lastComplete(t.Windows)
		first, last, ok = max(first, t.Windows[0].P99), max(last, w.P99), true
	}
	return first, last, ok
}

// jitSummary says, for the summary line, what became of the JIT signal:
// "JIT: used (…)" for one target or when all say the same, else per
// target; "" when it was read on none.
func jitSummary(targets []TargetResult) string {
	var parts []string
	same := true
	for _, t := range targets {
		if t.JIT == "" {
			continue
		}
		if len(parts) > 0 && t.JIT != targets[0].JIT {
			same = false
		}
		parts = append(parts, t.Target.Name+": "+t.JIT)
	}
	switch {
	case len(parts) == 0:
		return ""
	case same && len(parts) == len(targets):
		return "JIT: " + targets[0].JIT
	}
	return "JIT: " + strings.Join(parts, "; ")
}

func lastComplete(ws []WindowStats) (WindowStats, bool) {
	for i := len(ws) - 1; i >= 0; i-- {
		if !ws[i].Partial {
			return ws[i], true
		}
	}
	return WindowStats{}, false
}

// WriteTable writes one "requests vs latency" table per target (and the
// stable pool), in the shape of the field reports' warm-up tables, as
// Markdown.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	for i := range r.Targets {
		t := &r.Targets[i]
		status := "not converged"
		if t.Converged {
			status = fmt.Sprintf("converged after %d requests (window %d)", t.ConvergedAfter, t.ConvergedWindow)
			if t.Warm != "" && r.Config.Converging() {
				status += " " + t.Warm
			}
		}
		if !r.Config.Converging() {
			// A fixed count: convergence was not asked for.
			if t.Converged {
				status = "fixed load (no convergence asked), latency " + status
			} else {
				status = "fixed load (no convergence asked)"
			}
		}
		fmt.Fprintf(&b, "%s: %s, %d requests, %d errors", t.Target, status, t.Requests, t.Errors)
		if t.Errors > 0 && t.LastError != "" {
			fmt.Fprintf(&b, " (last: %s)", t.LastError)
		}
		if t.JIT != "" {
			fmt.Fprintf(&b, "; JIT: %s", t.JIT)
		}
		b.WriteString("\n\n")
		writeWindows(&b, t.Windows, t.ConvergedWindow)
		b.WriteString("\n")
	}
	if r.Stable != nil {
		fmt.Fprintf(&b, "%s, loaded side by side: %d requests, %d errors\n\n", r.Stable.Target.Name, r.Stable.Requests, r.Stable.Errors)
		writeWindows(&b, r.Stable.Windows, 0)
		b.WriteString("\n")
	}
	b.WriteString(r.Summary())
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteWindows writes one table of windows (requests, p50, p90, p99, max,
// errors), marking convergedWindow (0: none), as WriteTable does per
// target: for window series measured elsewhere (the mirror source).
func WriteWindows(w io.Writer, windows []WindowStats, convergedWindow int) error {
	var b strings.Builder
	writeWindows(&b, windows, convergedWindow)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeWindows(b *strings.Builder, windows []WindowStats, convergedWindow int) {
	rows := [][]string{{"window", "requests", "p50", "p90", "p99", "max", "errors", ""}}
	for _, w := range windows {
		note := ""
		switch {
		case w.Partial:
			note = fmt.Sprintf("partial (%d requests)", w.Count)
		case w.Index == convergedWindow:
			note = "converged"
		}
		maxCell := latency.Format(w.Max)
		if w.Max == 0 {
			maxCell = "-" // a histogram's window (the mirror source) has no max
		}
		rows = append(rows, []string{strconv.Itoa(w.Index), strconv.FormatInt(w.Requests, 10),
			latency.Format(w.P50), latency.Format(w.P90), latency.Format(w.P99), maxCell, strconv.Itoa(w.Errors), note})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len(cell))
		}
	}
	line := func(row []string) {
		b.WriteString("|")
		for i, cell := range row {
			if i == len(row)-1 { // note column: left-aligned
				fmt.Fprintf(b, " %-*s |", widths[i], cell)
			} else {
				fmt.Fprintf(b, " %*s |", widths[i], cell)
			}
		}
		b.WriteString("\n")
	}
	line(rows[0])
	b.WriteString("|")
	for i, wd := range widths {
		if i == len(widths)-1 {
			b.WriteString(" " + strings.Repeat("-", max(wd, 3)) + " |")
		} else {
			b.WriteString(" " + strings.Repeat("-", max(wd-1, 2)) + ": |")
		}
	}
	b.WriteString("\n")
	for _, row := range rows[1:] {
		line(row)
	}
}

// Fortio returns this target's measurement as fortio's HTTP result (the JSON
// `fortio load -json` writes and `fortio report` reads), histograms in
// seconds. Every request is in it, the first one on each connection
// included. Nil before the warm-up ran.
func (t *TargetResult) Fortio() *fhttp.HTTPRunnerResults {
	if t.hist == nil {
		return nil
	}
	return fortioResult(t.Target.Name, t.Target.URL, t.fortio, t.hist.Clone(), t.errHist.Clone(), t.RetCodes)
}

// FortioResults merges all canary targets into one fortio HTTP result.
func (r *Result) FortioResults() *fhttp.HTTPRunnerResults {
	var hist, errHist *stats.Histogram
	codes := map[int]int64{}
	var base periodic.RunnerResults
	threads := 0
	var names []string
	for i := range r.Targets {
		t := &r.Targets[i]
		if t.hist == nil {
			continue
		}
		names = append(names, t.Target.Name)
		if hist == nil {
			hist, errHist = stats.NewHistogram(t.hist.Offset, t.hist.Divider), stats.NewHistogram(t.errHist.Offset, t.errHist.Divider)
			base = t.fortio
		}
		hist.Transfer(t.hist.Clone())
		errHist.Transfer(t.errHist.Clone())
		for k, v := range t.RetCodes {
			codes[k] += v
		}
		threads += t.fortio.NumThreads
	}
	if hist == nil {
		return nil
	}
	base.NumThreads = threads
	base.StartTime, base.ActualDuration = r.Start, r.Elapsed
	url := ""
	if len(r.Targets) > 0 {
		url = r.Targets[0].Target.URL
	}
	return fortioResult(strings.Join(names, ","), url, base, hist, errHist, codes)
}

func fortioResult(label, url string, run periodic.RunnerResults, hist, errHist *stats.Histogram, codes map[int]int64) *fhttp.HTTPRunnerResults {
	res := &fhttp.HTTPRunnerResults{RetCodes: maps.Clone(codes)}
	res.RunnerResults = run
	res.RunType = cmp.Or(run.RunType, "HTTP") // "gRPC" for gRPC calls, whose RetCodes are gRPC status codes (0 OK)
	res.Labels = "danki warmup " + label
	res.Version = version.Short()
	res.NoCatchUp = true
	res.RequestedDuration = "until converged"
	res.DurationHistogram = hist.Export().CalcPercentiles(fortioPercentiles)
	res.ErrorsDurationHistogram = errHist.Export().CalcPercentiles(fortioPercentiles)
	if s := run.ActualDuration.Seconds(); s > 0 {
		res.ActualQPS = float64(hist.Count) / s
	}
	res.URL = url
	return res
}

// WriteFortioJSON writes FortioResults as indented JSON.
func (r *Result) WriteFortioJSON(w io.Writer) error {
	res := r.FortioResults()
	if res == nil {
		return fmt.Errorf("no fortio results: the warm-up sent no load")
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
