package install

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/test/testenv"
)

// registered is every metric family the gate and the plugins register, with
// the values each label takes (every counter's label values exist at 0 from
// the start: docs/metrics.md).
func registered(t *testing.T) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	for _, f := range testutil.RegisteredFamilies(t) {
		labels := map[string][]string{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = append(labels[l.GetName()], l.GetValue())
			}
		}
		out[f.GetName()] = labels
	}
	return out
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

func chartAlerts(t *testing.T, root string, args ...string) []alertRule {
	t.Helper()
	out := renderChart(t, root, append([]string{"--set", "monitoring.prometheusRule.enabled=true", "--show-only", "templates/prometheus-rule.yaml"}, args...)...)
	var rule struct {
		Kind string
		Spec struct {
			Groups []struct {
				Name  string
				Rules []alertRule
			}
		}
	}
	if err := yaml.Unmarshal(out, &rule); err != nil {
		t.Fatalf("the chart's PrometheusRule: %v\n%s", err, out)
	}
	if rule.Kind != "PrometheusRule" {
		t.Fatalf("templates/prometheus-rule.yaml renders a %q", rule.Kind)
	}
	var rules []alertRule
	for _, g := range rule.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

var (
	metricName = regexp.MustCompile(`\bdanki_[a-z_]+\b`)
	// a metric and its label matchers: danki_x_total{outcome=~"a|b",kind="c"}
	selector = regexp.MustCompile(`\b(danki_[a-z_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// TestAlertsNameRegisteredMetrics: every danki_ metric the chart's alerts
// name (in an expression or an annotation) is one pkg/metrics registers,
// every label value they match on is one it exports, and docs/metrics.md's
// alerts table lists exactly the chart's alerts.
func TestAlertsNameRegisteredMetrics(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	families := registered(t)
	rules := chartAlerts(t, root)
	if len(rules) < 8 {
		t.Fatalf("the chart renders %d alerts: is the template broken?", len(rules))
	}
	var alerts []string
	for _, r := range rules {
		alerts = append(alerts, r.Alert)
		text := r.Expr
		for _, a := range r.Annotations {
			text += "\n" + a
		}
		for _, name := range metricName.FindAllString(text, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if _, ok := families[base]; !ok {
					base = strings.TrimSuffix(base, suffix)
				}
			}
			if _, ok := families[base]; !ok {
				t.Errorf("alert %s names %s, which pkg/metrics does not register", r.Alert, name)
			}
		}
		for _, sel := range selector.FindAllStringSubmatch(r.Expr, -1) {
			labels := families[sel[1]]
			for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
				values := []string{m[3]}
				if strings.HasSuffix(m[2], "~") {
					values = strings.Split(m[3], "|")
				}
				for _, v := range values {
					if !slices.Contains(labels[m[1]], v) {
						t.Errorf("alert %s matches %s{%s%s%q}, a value %s does not export (its %s values: %v)", r.Alert, sel[1], m[1], m[2], v, sel[1], m[1], labels[m[1]])
					}
				}
			}
		}
	}

	// Without the gate, only the plugins' alerts; without plugins alerts, only the gate's.
	for _, c := range []struct {
		args   []string
		prefix string
	}{{[]string{"--set", "gate.enabled=false"}, "DankiGate"}, {[]string{"--set", "monitoring.prometheusRule.plugins=false"}, "Danki[^G]"}} {
		for _, r := range chartAlerts(t, root, c.args...) {
			if regexp.MustCompile("^" + c.prefix).MatchString(r.Alert) {
				t.Errorf("with %v the chart still renders %s", c.args, r.Alert)
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(Danki[A-Za-z]+)` \\|").FindAllStringSubmatch(string(raw), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(alerts)
	slices.Sort(documented)
	if !slices.Equal(alerts, documented) {
		t.Errorf("docs/metrics.md's alerts table lists %v, the chart renders %v", documented, alerts)
	}
}
