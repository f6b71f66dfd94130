package analysis

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/danki-dev/danki/pkg/latency"
)

// WriteTable writes the verdict as `danki analyze` prints it: a header
// naming the source and window, canary vs stable per percentile with each
// row's SLOs and worst result, one line per check, and the summary.
// source is the Config's source (the Verdict does not keep it).
func (v Verdict) WriteTable(w io.Writer, source string) error {
	var b strings.Builder
	checks := map[string][]Check{}
	for _, c := range v.Checks {
		row := strings.TrimPrefix(c.Name, "ratio:")
		checks[row] = append(checks[row], c)
	}
	fmt.Fprintf(&b, "danki analyze: source %s, window %s\n\n", source, v.Window)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tcanary\tstable\tcanary/stable\tSLO\tresult")
	c, s := v.Canary, v.Stable
	if c == nil {
		c = &SideStats{}
	}
	fmt.Fprintf(tw, "requests\t%s\t%s\t\t\t\n", tableRequests(c), tableRequests(s))
	if c.ErrorRate != nil || checks["error-rate"] != nil {
		fmt.Fprintf(tw, "error rate\t%s\t%s\t\t%s\t%s\n", tablePercent(c.ErrorRate), tablePercent(tableErrorRate(s)), tableSLO(checks["error-rate"]), tableResult(checks["error-rate"]))
	}
	for _, qs := range quantiles {
		cv, sv := c.Percentile(qs.key), s.Percentile(qs.key)
		ratio := ""
		if cv != nil && sv != nil && *sv > 0 {
			ratio = fmt.Sprintf("%.2f", *cv / *sv)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", qs.label, tableMillis(cv), tableMillis(sv), ratio, tableSLO(checks[qs.key]), tableResult(checks[qs.key]))
	}
	if c.Max != nil || checks["max"] != nil {
		var sMax *float64
		if s != nil {
			sMax = s.Max
		}
		fmt.Fprintf(tw, "max\t%s\t%s\t\t%s\t%s\n", tableMillis(c.Max), tableMillis(sMax), tableSLO(checks["max"]), tableResult(checks["max"]))
	}
	if t := v.Tail; t != nil {
		fmt.Fprintf(tw, "> %s (stable p%g bound)\t%.2f%%\t%.2f%%\t\te=%.3g, fail at %g (%g%%)\t%s\n",
			latency.FormatMs(t.ThresholdMs), t.Quantile*100,
			100*t.CanaryRate, 100*t.StableRate, t.EValue, t.RejectAt, t.Confidence*100, tableResult(checks["tail-test"]))
	} else if cs := checks["tail-test"]; cs != nil {
		fmt.Fprintf(tw, "tail test\t\t\t\t\t%s\n", tableResult(cs))
	}
	for _, cs := range v.Checks {
		if strings.HasPrefix(cs.Name, "query") && cs.Value != nil {
			fmt.Fprintf(tw, "%s\t%.4g\t\t\t≤ %g\t%s\n", cs.Name, *cs.Value, cs.Limit, strings.ToLower(string(cs.Phase)))
		}
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail

	fmt.Fprintln(&b)
	for _, cs := range v.Checks {
		fmt.Fprintf(&b, "  %-12s %s\n", strings.ToUpper(string(cs.Phase)), cs.Message)
	}
	if len(v.Checks) > 0 {
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b, v.Summary)
	_, err := io.WriteString(w, b.String())
	return err
}

func tableRequests(s *SideStats) string {
	switch {
	case s == nil:
		return "-"
	case s.Requests != nil:
		return strconv.FormatFloat(*s.Requests, 'f', 0, 64)
	}
	return strconv.FormatFloat(s.Count, 'f', 0, 64)
}

func tableErrorRate(s *SideStats) *float64 {
	if s == nil {
		return nil
	}
	return s.ErrorRate
}

// tableMillis formats a latency for the table's columns; it keeps the
// table's own precision (3 significant figures, "-" when not measured),
// which the summary's ms does not share.
func tableMillis(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v >= 1000:
		return fmt.Sprintf("%.2fs", *v/1000)
	case *v >= 100:
		return fmt.Sprintf("%.0fms", *v)
	case *v >= 10:
		return fmt.Sprintf("%.1fms", *v)
	}
	return fmt.Sprintf("%.2fms", *v)
}

func tablePercent(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100**v)
}

// tableSLO lists a row's limits.
func tableSLO(cs []Check) string {
	var parts []string
	for _, c := range cs {
		switch c.Unit {
		case "ms":
			parts = append(parts, "≤ "+tableMillis(&c.Limit))
		case "ratio":
			parts = append(parts, fmt.Sprintf("≤ %g× stable", c.Limit))
		case "fraction":
			parts = append(parts, fmt.Sprintf("≤ %.2f%%", 100*c.Limit))
		}
	}
	return strings.Join(parts, ", ")
}

// tableResult is the worst result of a row's checks.
func tableResult(cs []Check) string {
	worst := ""
	rank := map[Phase]int{Pass: 1, Inconclusive: 2, Fail: 3}
	for _, c := range cs {
		if rank[c.Phase] > rank[Phase(worst)] {
			worst = string(c.Phase)
		}
	}
	return strings.ToLower(worst)
}
