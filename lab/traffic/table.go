package traffic

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danki-dev/danki/pkg/latency"
)

// Format is the layout of a written table.
type Format int

const (
	// Text is aligned plain text for a terminal.
	Text Format = iota
	// Markdown is a GitHub-flavoured Markdown table, for README and results.
	Markdown
)

// scenarioColumns are the columns of each scenario in WriteTable.
var scenarioColumns = []string{"p50", "p99", "p99.9", "max", "err/req"}

// WriteTable writes scenarios side by side: one row per phase (in the order
// phases first appear), for each scenario p50, p99, p99.9, max and
// errors/requests ("err/req"), then a line with each scenario's rollout duration. A
// phase a scenario lacks, or in which it had no requests, shows "–".
func WriteTable(w io.Writer, f Format, scenarios []Scenario) error {
	var names []string
	seen := map[string]bool{}
	for _, sc := range scenarios {
		for _, p := range sc.Phases {
			if !seen[p.Name] {
				seen[p.Name] = true
				names = append(names, p.Name)
			}
		}
	}
	t := table{header: []string{"phase"}, span: len(scenarioColumns)}
	for _, sc := range scenarios {
		t.groups = append(t.groups, sc.Name)
		t.header = append(t.header, scenarioColumns...)
	}
	for _, name := range names {
		row := []string{name}
		for _, sc := range scenarios {
			row = append(row, phaseCells(sc, name)...)
		}
		t.rows = append(t.rows, row)
	}
	var b strings.Builder
	t.write(&b, f)
	durations := make([]string, len(scenarios))
	for i, sc := range scenarios {
		durations[i] = sc.Name + " " + fmtRollout(sc.RolloutDuration)
	}
	if f == Markdown {
		b.WriteString("\n") // a line right after a table would become a row
	}
	fmt.Fprintf(&b, "rollout duration: %s\n", strings.Join(durations, ", "))
	_, err := io.WriteString(w, b.String())
	return err
}

func phaseCells(sc Scenario, phase string) []string {
	for _, p := range sc.Phases {
		if p.Name != phase || p.Count == 0 {
			continue
		}
		return []string{latency.Format(p.P50), latency.Format(p.P99), latency.Format(p.P999), latency.Format(p.Max),
			fmtCount(p.Errors) + "/" + fmtCount(p.Count)}
	}
	cells := make([]string, len(scenarioColumns))
	for i := range cells {
		cells[i] = "–"
	}
	return cells
}

func fmtRollout(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// fmtCount writes n with thousands separators, as the field reports do.
func fmtCount(n int) string {
	if n < 0 {
		return "-" + fmtCount(-n)
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// table renders rows as aligned text or Markdown. The first column is a
// left-aligned label; the others are right-aligned numbers. With groups, the
// columns after the first come in groups of span, each headed by a group
// name (its own line in text, a prefix of the column name in Markdown).
type table struct {
	groups []string
	span   int
	header []string
	rows   [][]string
}

func (t table) write(b *strings.Builder, f Format) {
	if f == Markdown {
		t.markdown(b)
	} else {
		t.text(b)
	}
}

func (t table) markdown(b *strings.Builder) {
	header := append([]string(nil), t.header...)
	for i := 1; i < len(header) && len(t.groups) > 0; i++ {
		header[i] = t.groups[(i-1)/t.span] + " " + header[i]
	}
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	b.WriteString("|---|")
	for range header[1:] {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
}

func (t table) text(out *strings.Builder) {
	var b strings.Builder
	defer func() {
		for l := range strings.Lines(b.String()) {
			out.WriteString(strings.TrimRight(l, " \n") + "\n")
		}
	}()
	widths := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	const gap = "  "
	if len(t.groups) > 0 {
		// Widen a group's last column if its name is longer than the group.
		for g, name := range t.groups {
			first, last := 1+g*t.span, g*t.span+t.span
			w := 0
			for i := first; i <= last; i++ {
				w += widths[i] + len(gap)
			}
			if extra := utf8.RuneCountInString(name) + len(gap) - w; extra > 0 {
				widths[last] += extra
			}
		}
		b.WriteString(pad(" ", widths[0], false))
		for g, name := range t.groups {
			w := -len(gap)
			for i := 1 + g*t.span; i <= g*t.span+t.span; i++ {
				w += widths[i] + len(gap)
			}
			b.WriteString(gap + pad(name, w, false))
		}
		b.WriteString("\n")
	}
	line := func(cells []string) {
		for i, c := range cells {
			if i == 0 {
				b.WriteString(pad(c, widths[0], false))
			} else {
				b.WriteString(gap + pad(c, widths[i], true))
			}
		}
		b.WriteString("\n")
	}
	line(t.header)
	total := widths[0]
	for _, w := range widths[1:] {
		total += len(gap) + w
	}
	b.WriteString(strings.Repeat("-", total) + "\n")
	for _, r := range t.rows {
		line(r)
	}
}

// pad pads s with spaces to width runes, on the left when right is set.
func pad(s string, width int, right bool) string {
	n := width - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}
