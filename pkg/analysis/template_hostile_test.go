package analysis

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// parseWithin is ParseConfig in a goroutine, failing the test if it has
// not answered within 5 s: a regression to an unbounded template fails
// rather than hangs.
func parseWithin(t *testing.T, data []byte) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := ParseConfig(data)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer in 5 s: %.200s", data)
		return nil
	}
}

// TestHostileLoadTemplatesRefused: source: load's request templates (an
// AnalysisTemplate's, << >>) are held to the warm-up's budget (issue 55).
func TestHostileLoadTemplatesRefused(t *testing.T) {
	for text, want := range map[string]string{
		"/<<range 1000000000000>><<end>>":                        "range is refused",
		`/<<define "a">><<template "a">><<end>><<template "a">>`: "define is refused",
		`/<<printf "%999999999d" 1>>`:                            "printf is not a function here",
		"/<<randString 4000000000>>":                             "randString: n: 4000000000 is outside 0..4096",
		"/" + strings.Repeat("<<randString 4096>>", 17):          "fails when rendered: renders to more than 65536 bytes",
	} {
		load, _ := json.Marshal(map[string]any{"service": "s", "requests": []any{map[string]string{"path": text}}})
		err := parseWithin(t, []byte(`{"source": "load", "load": `+string(load)+`, "slo": {"p99": "1s"}}`))
		if err == nil || !strings.Contains(err.Error(), "load.requests[0].path: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%.80s: %.300v, want load.requests[0].path: … %s", text, err, want)
		}
	}
}

// TestHostilePromQLTemplatesRefused: PromQL templates have fields only;
// text/template's loops, nested templates and functions are refused, and
// a query over the budget is refused by its sample render.
func TestHostilePromQLTemplatesRefused(t *testing.T) {
	for text, want := range map[string]string{
		"x{<<.Selector>>}<<range 1000000000000>><<end>>":        "range is refused",
		`<<define "a">><<template "a">><<end>><<template "a">>`: "define is refused",
		`x<<printf "%999999999d" 1>>`:                           "printf is not a function here; the functions are: none",
		"x{<<.Selector>>,pod=<<.Pod>>}":                         ".Pod is not a field; the fields are .Selector .Window .Side .Canary .Stable",
		strings.Repeat("x", 70000) + "<<.Window>>":              "renders to more than 65536 bytes",
	} {
		for _, field := range []string{"promql.histogram", "queries[0].query"} {
			promql := map[string]any{"canary": `a="b"`, "histogram": "h{<<.Selector>>}"}
			query := map[string]any{"name": "q", "query": "up", "max": 1}
			if field == "promql.histogram" {
				promql["histogram"] = text
			} else {
				query["query"] = text
			}
			cfg, _ := json.Marshal(map[string]any{"source": "promql", "prometheus": map[string]string{"address": "http://p:9090"},
				"promql": promql, "queries": []any{query}, "slo": map[string]string{"p99": "1s"}})
			if err := parseWithin(t, cfg); err == nil || !strings.Contains(err.Error(), field+": ") || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %.80s: %.300v, want %s: … %s", field, text, err, field, want)
			}
		}
	}
}
