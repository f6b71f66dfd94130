package shift

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the status as `danki shift get` prints it: a header
// with t (the Status does not keep its Target), the canary weight and the
// ramp's progress, any problem, then one row per route and destination.
func (st *Status) WriteTable(w io.Writer, t Target) error {
	var b strings.Builder
	head := "VirtualService " + t.String()
	if st.CanaryWeight >= 0 {
		head += fmt.Sprintf("  canary weight %d%%", st.CanaryWeight)
	}
	if r := st.Ramp; r != nil {
		switch r.Phase {
		case PhaseRamping:
			head += "  " + r.Progress(r.Weight)
		default:
			head += fmt.Sprintf("  ramp %s toward %d%%", strings.ToLower(string(r.Phase)), r.Target)
			if r.Reason != "" {
				head += " (" + r.Reason + ")"
			}
		}
	}
	fmt.Fprintln(&b, head)
	if st.Problem != "" {
		fmt.Fprintln(&b, "problem: "+st.Problem)
	}
	if st.RampProblem != "" {
		fmt.Fprintln(&b, "ramp state: "+st.RampProblem+" (--canary-weight 0 always works and clears it)")
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tROUTE\tMANAGED\tDESTINATION\tROLE\tWEIGHT")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range st.Routes {
		route := fmt.Sprintf("[%d]", r.Index)
		if r.Name != "" {
			route += " " + r.Name
		}
		if len(r.Destinations) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\n", r.Kind, route, dash(r.Managed))
		}
		for _, d := range r.Destinations {
			dest := d.Host
			if d.Subset != "" {
				dest += "/" + d.Subset
			}
			if d.Port != 0 {
				dest += fmt.Sprintf(":%d", d.Port)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.Kind, route, dash(r.Managed), dest, dash(d.Role), d.Weight)
		}
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	_, err := io.WriteString(w, b.String())
	return err
}
