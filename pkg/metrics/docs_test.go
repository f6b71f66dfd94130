package metrics_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	itest "github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/metrics"
)

// TestDocsListEveryMetric keeps docs/metrics.md true: its tables name every
// metric the gate and the plugins register, with its type, and nothing else.
func TestDocsListEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(danki_[a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = m[2]
	}
	families := itest.RegisteredFamilies(t)
	var registered []string
	for _, f := range families {
		registered = append(registered, f.GetName())
	}
	for _, f := range families {
		typ := map[string]string{"COUNTER": "counter", "GAUGE": "gauge", "HISTOGRAM": "histogram"}[f.GetType().String()]
		if got, ok := documented[f.GetName()]; !ok {
			t.Errorf("%s is not in docs/metrics.md's tables", f.GetName())
		} else if got != typ {
			t.Errorf("docs/metrics.md says %s is a %s; it is a %s", f.GetName(), got, typ)
		}
	}
	for name := range documented {
		if !slices.Contains(registered, name) {
			t.Errorf("docs/metrics.md lists %s, which nothing registers", name)
		}
	}
	if len(documented) < 17 {
		t.Errorf("found %d metrics in docs/metrics.md's tables: the table format changed?", len(documented))
	}
}

// TestDocsScrapeExampleFits: docs/metrics.md's Deployment patch names a
// container port for each --metrics-address of its table, its PodMonitors
// scrape ports that are named (the patch's, or deploy/gate's), and every
// YAML block parses.
func TestDocsScrapeExampleFits(t *testing.T) {
	raw, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	ports := map[string]int{} // container port name → number
	var scraped []string
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc, -1)
	for _, b := range blocks {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Ports []struct {
								Name          string `json:"name"`
								ContainerPort int    `json:"containerPort"`
							} `json:"ports"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
				PodMetricsEndpoints []struct {
					Port string `json:"port"`
					Path string `json:"path"`
				} `json:"podMetricsEndpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(b[1]), &obj); err != nil {
			t.Fatalf("docs/metrics.md: a YAML block does not parse: %v\n%s", err, b[1])
		}
		for _, c := range obj.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
		}
		for _, e := range obj.Spec.PodMetricsEndpoints {
			if e.Path != metrics.Path {
				t.Errorf("PodMonitor endpoint %s scrapes %q, not %s", e.Port, e.Path, metrics.Path)
			}
			scraped = append(scraped, e.Port)
		}
	}
	ports["metrics"] = 8080 // deploy/gate/deployment.yaml's
	rows := regexp.MustCompile("(?m)^\\| `danki/[a-z]+` \\| `\"--metrics-address\", \":([0-9]+)\"` \\| `([a-z-]+)` \\|$").FindAllStringSubmatch(doc, -1)
	if len(rows) != 3 || len(scraped) != 4 {
		t.Fatalf("found %d plugin rows and %d PodMonitor endpoints in docs/metrics.md; want 3 and 4", len(rows), len(scraped))
	}
	for _, r := range rows {
		if n := ports[r[2]]; fmt.Sprint(n) != r[1] {
			t.Errorf("the table serves port %s as %s; the Deployment patch names it on %d", r[1], r[2], n)
		}
	}
	for _, p := range scraped {
		if _, ok := ports[p]; !ok {
			t.Errorf("a PodMonitor scrapes port %q, which no container names", p)
		}
	}
}
