package analysis

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/danki-dev/danki/pkg/policy"
)

func TestVerdictFigures(t *testing.T) {
	p99, p999, rate := 12.5, 40.0, 0.002
	v := Verdict{
		Phase: Pass, Summary: "Pass: all SLOs hold", Window: "5m",
		Canary:  &SideStats{Count: 1000, P99: &p99, P999: &p999, ErrorRate: &rate},
		Stable:  &SideStats{Count: 10000},
		Checks:  []Check{{Name: "p99", Phase: Pass, Value: &p99, Limit: 250, Unit: "ms"}},
		Tail:    &TailTest{EValue: 0.5, ThresholdMs: 25},
		Queries: []string{"sum by (le) (…)"},
	}
	f := v.Figures()
	want := map[string]string{
		"summary": "Pass: all SLOs hold", "window": "5m",
		"canaryCount": "1000", "canaryP99Ms": "12.5", "canaryP999Ms": "40", "canaryErrorRate": "0.002",
		"stableCount": "10000", "tailEValue": "0.5", "tailThresholdMs": "25",
	}
	if len(f.Metadata) != len(want) {
		t.Errorf("metadata %v, want %v", f.Metadata, want)
	}
	for k, w := range want {
		if f.Metadata[k] != w {
			t.Errorf("metadata[%s] = %q, want %q", k, f.Metadata[k], w)
		}
	}
	var value MeasuredValue
	if err := json.Unmarshal([]byte(f.Value), &value); err != nil {
		t.Fatalf("value is not JSON: %v: %s", err, f.Value)
	}
	if value.Phase != Pass || value.Window != "5m" || value.Canary.Count != 1000 || len(value.Checks) != 1 || value.Tail.ThresholdMs != 25 {
		t.Errorf("value %s lacks the numbers", f.Value)
	}
	if strings.Contains(f.Value, "queries") {
		t.Errorf("value %s holds the queries; the metric's metadata shows those", f.Value)
	}
	// No numbers measured: only the summary and the window.
	if md := (Verdict{Phase: Error, Summary: "Error: …", Window: "5m"}).Figures().Metadata; len(md) != 2 {
		t.Errorf("metadata of a verdict without numbers: %v", md)
	}
}

func TestAnalyzersKeepOnePerConfiguration(t *testing.T) {
	c := NewAnalyzers(WithPolicy(policy.Local()))
	cfg := func(p99 string) []byte {
		return []byte(`{"source":"envoy","prometheus":{"address":"http://p:9090"},"envoy":{"canaryCluster":"c"},"slo":{"p99":"` + p99 + `"}}`)
	}
	a, err := c.Get(cfg("100ms"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Get(cfg("100ms")); again != a {
		t.Error("the same configuration built a second analyzer")
	}
	if other, _ := c.Get(cfg("200ms")); other == a {
		t.Error("another configuration got the first one's analyzer")
	}
	if _, err := c.Get([]byte(`{"source":"envoy","slo":{"p99x":"1s"}}`)); err == nil || !strings.Contains(err.Error(), "slo.p99x: unknown field") {
		t.Errorf("bad configuration: %v, want the field named", err)
	}
	if n := c.Len(); n != 2 {
		t.Errorf("%d analyzers kept, want 2 (errors are not kept)", n)
	}
	for i := range keptAnalyzers {
		if _, err := c.Get(cfg(strconv.Itoa(i+1) + "s")); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Len(); n > keptAnalyzers {
		t.Errorf("%d analyzers kept, want at most %d", n, keptAnalyzers)
	}
	md := a.Describe()
	if md["source"] != "envoy" || md["window"] == "" || !strings.Contains(md["queries"], "envoy_cluster_upstream_rq_time_bucket") {
		t.Errorf("Describe = %v", md)
	}
}
