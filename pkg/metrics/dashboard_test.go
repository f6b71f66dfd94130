package metrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	itest "github.com/danki-dev/danki/internal/testutil"
)

// TestDashboardShowsEveryMetric keeps deploy/grafana/danki-dashboard.json
// true to the code: it parses, every metric the gate and the plugins
// register is on a panel and every danki_ metric a panel queries exists,
// every query goes to the dashboard's Prometheus variable, uses only the
// dashboard's variables, and panel ids are unique. (test/e2e runs every
// query against the lab's Prometheus.)
func TestDashboardShowsEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/danki-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type datasource struct{ Type, UID string }
	var dash struct {
		UID        string
		Title      string
		Templating struct {
			List []struct{ Name, Type string }
		}
		Panels []struct {
			ID          int
			Type, Title string
			Datasource  *datasource
			Targets     []struct {
				Expr       string
				Datasource *datasource
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard does not parse: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("uid %q, title %q: Grafana needs both to import and link it", dash.UID, dash.Title)
	}
	vars := []string{"__rate_interval"} // Grafana's own
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "namespace", "rollout"} {
		if !slices.Contains(vars, want) {
			t.Errorf("no template variable %q", want)
		}
	}

	registered := map[string]bool{}
	for _, f := range itest.RegisteredFamilies(t) {
		registered[f.GetName()] = true
	}

	queried := map[string]bool{}
	ids := map[int]string{}
	metricName := regexp.MustCompile(`danki_[a-z_]+`)
	variable := regexp.MustCompile(`\$\{?([A-Za-z_]+)`)
	for _, p := range dash.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		for _, target := range p.Targets {
			if target.Datasource == nil || target.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query's datasource %+v, want the ${datasource} variable", p.Title, target.Datasource)
			}
			for _, v := range variable.FindAllStringSubmatch(target.Expr, -1) {
				if !slices.Contains(vars, v[1]) {
					t.Errorf("panel %q uses $%s, which the dashboard does not define: %s", p.Title, v[1], target.Expr)
				}
			}
			for _, m := range metricName.FindAllString(target.Expr, -1) {
				// A histogram is queried by its series: _bucket, _count, _sum.
				family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				if !registered[family] {
					t.Errorf("panel %q queries %s, which danki does not export", p.Title, m)
				}
				queried[family] = true
			}
		}
	}
	for name := range registered {
		if !queried[name] {
			t.Errorf("%s is on no panel of the dashboard", name)
		}
	}
}
