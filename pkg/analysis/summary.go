package analysis

import (
	"fmt"
	"strings"

	"github.com/danki-dev/danki/pkg/latency"
)

// summarize writes the one-line summary: the phase, why (failed or
// inconclusive checks), and the key numbers.
func summarize(v Verdict) string {
	var reasons []string
	seen := map[string]bool{}
	for _, c := range v.Checks {
		if c.Phase == v.Phase && (v.Phase == Fail || v.Phase == Inconclusive) && !seen[c.Message] {
			seen[c.Message] = true
			reasons = append(reasons, c.Message)
		}
	}
	var b strings.Builder
	b.WriteString(string(v.Phase))
	b.WriteString(": ")
	if len(reasons) > 0 {
		b.WriteString(strings.Join(reasons, "; "))
		b.WriteString(" | ")
	} else if v.Phase == Pass {
		b.WriteString("all SLOs hold | ")
	}
	b.WriteString(keyNumbers(v))
	return oneLine(b.String())
}

func keyNumbers(v Verdict) string {
	c, s := v.Canary, v.Stable
	if c == nil {
		return "no data"
	}
	var parts []string
	for _, key := range []string{"p99", "p999"} {
		label := map[string]string{"p99": "p99", "p999": "p99.9"}[key]
		cv := c.percentileText(key)
		if cv == "" {
			continue
		}
		part := fmt.Sprintf("canary %s %s", label, cv)
		if sv := s.percentileText(key); sv != "" {
			part += fmt.Sprintf(" (stable %s)", sv)
		}
		parts = append(parts, part)
	}
	if c.ErrorRate != nil {
		part := "errors " + pct(*c.ErrorRate)
		if s != nil && s.ErrorRate != nil {
			part += fmt.Sprintf(" (stable %s)", pct(*s.ErrorRate))
		}
		parts = append(parts, part)
	} else if v.hasCheck("error-rate") {
		parts = append(parts, "errors n/a")
	}
	if c.Count > 0 || c.Requests != nil || v.Tail != nil {
		n := fmt.Sprintf("n=%s", count(c.Count))
		if c.Count == 0 && c.Requests != nil {
			n = fmt.Sprintf("n=%s", count(*c.Requests))
		}
		if s != nil {
			sn := s.Count
			if sn == 0 && s.Requests != nil {
				sn = *s.Requests
			}
			n += "/" + count(sn)
		}
		parts = append(parts, n)
	}
	for _, ch := range v.Checks {
		if strings.HasPrefix(ch.Name, "query:") && ch.Value != nil {
			parts = append(parts, fmt.Sprintf("%s %.4g", strings.TrimPrefix(ch.Name, "query:"), *ch.Value))
		}
	}
	if v.Tail != nil {
		parts = append(parts, "tail e="+evalue(v.Tail.EValue))
	}
	parts = append(parts, "window "+v.Window)
	return strings.Join(parts, ", ")
}

// percentileText formats a percentile for the summary: its value, ">X" when
// it lies above the top bucket bound X, or "" when it was not measured.
func (s *SideStats) percentileText(key string) string {
	if s == nil {
		return ""
	}
	if p := s.Percentile(key); p != nil {
		return ms(*p)
	}
	if top, ok := s.AboveMs[key]; ok {
		return ">" + ms(top)
	}
	return ""
}

// ms formats milliseconds the way every danki report does.
func ms(v float64) string { return latency.FormatMs(v) }

func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.001:
		return fmt.Sprintf("%.3f%%", f*100)
	}
	return fmt.Sprintf("%.2f%%", f*100)
}

// count formats a request count (increase() extrapolates, so round).
func count(f float64) string { return fmt.Sprintf("%.0f", f) }

func evalue(e float64) string {
	if e >= 1e6 {
		return fmt.Sprintf("%.2g", e)
	}
	return fmt.Sprintf("%.3g", e)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
