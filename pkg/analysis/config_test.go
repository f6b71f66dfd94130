package analysis

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const validIstio = `{
  "source": "istio",
  "prometheus": {"address": "http://prometheus.istio-system:9090", "bearerTokenFile": "/var/run/secrets/token"},
  "istio": {
    "canary": {"service": "app-canary.default.svc.cluster.local"},
    "stable": {"service": "app-stable.default.svc.cluster.local", "labels": {"destination_cluster": "east"}}
  },
  "window": "5m",
  "slo": {"p99": "250ms", "p999": "1s", "maxErrorRate": "1%", "ratio": {"p99": "1.2"}},
  "tailTest": {"confidence": 0.99},
  "minSamples": "200"
}`

func TestParseConfigValid(t *testing.T) {
	c, err := ParseConfig([]byte(validIstio))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.window != 5*time.Minute || r.cumulative {
		t.Errorf("window %v cumulative %v, want 5m fixed", r.window, r.cumulative)
	}
	if len(r.limits) != 2 || r.limits[0].key != "p99" || r.limits[0].limit != 250 || r.limits[1].limit != 1000 {
		t.Errorf("limits %+v, want p99 250 ms and p999 1000 ms", r.limits)
	}
	if !r.hasErrorRate || r.errorRate != 0.01 {
		t.Errorf("error rate %v/%v, want 0.01 from \"1%%\"", r.hasErrorRate, r.errorRate)
	}
	if len(r.ratios) != 1 || r.ratios[0].limit != 1.2 {
		t.Errorf("ratios %+v, want p99 1.2 (given as a string, as Argo args are)", r.ratios)
	}
	if r.tail == nil || r.tail.q != 0.99 || r.tail.confidence != 0.99 {
		t.Errorf("tail %+v, want q 0.99 (default) confidence 0.99", r.tail)
	}
	if r.minSamples != 200 || r.minTailCount != DefaultMinTailCount || r.timeout != DefaultTimeout {
		t.Errorf("minSamples %v minTailCount %v timeout %v", r.minSamples, r.minTailCount, r.timeout)
	}
	if c.Istio.Reporter != "source" {
		t.Errorf("reporter %q, want the default source", c.Istio.Reporter)
	}
}

func TestParseConfigDefaultsToCumulativeWindow(t *testing.T) {
	c, err := ParseConfig([]byte(`{"source":"envoy","prometheus":{"address":"http://p:9090"},"envoy":{"canaryCluster":"c"},"slo":{"p99":"100ms"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := Compile(c); err != nil || !r.cumulative {
		t.Fatal("window defaults to fixed; want cumulative")
	}
	if c.Envoy.ResponseCodeLabel != "response_code" {
		t.Fatalf("responseCodeLabel %q, want response_code", c.Envoy.ResponseCodeLabel)
	}
}

// TestConfigErrorsNameTheField: every validation error starts from the
// field's path and says how to fix it.
func TestConfigErrorsNameTheField(t *testing.T) {
	const prom = `"prometheus":{"address":"http://p:9090"}`
	const istio = `"istio":{"canary":{"service":"c"},"stable":{"service":"s"}}`
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"empty", ``, []string{"empty"}},
		{"not json", `{"source":`, []string{"not valid JSON"}},
		{"unknown field", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99ratio":1.2}}`, []string{`slo.p99ratio: unknown field`}},
		{"wrong type", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"minSamples":{}}`, []string{"minSamples: want a number, got an object"}},
		{"no source", `{"slo":{"p99":"1s"}}`, []string{"source: missing"}},
		{"bad source", `{"source":"datadog","slo":{"p99":"1s"}}`, []string{`source: "datadog" is not a source`}},
		{"missing block", `{"source":"istio",` + prom + `,"slo":{"p99":"1s"}}`, []string{"istio: missing"}},
		{"foreign block", `{"source":"istio",` + prom + `,` + istio + `,"envoy":{"canaryCluster":"x"},"slo":{"p99":"1s"}}`, []string{"envoy: set, but source is \"istio\""}},
		{"no address", `{"source":"istio",` + istio + `,"slo":{"p99":"1s"}}`, []string{"prometheus.address: missing"}},
		{"bad address", `{"source":"istio","prometheus":{"address":"prometheus:9090"},` + istio + `,"slo":{"p99":"1s"}}`, []string{"prometheus.address", "not an http(s) URL"}},
		{"two tokens", `{"source":"istio","prometheus":{"address":"http://p","bearerToken":"a","bearerTokenFile":"/t"},` + istio + `,"slo":{"p99":"1s"}}`, []string{"prometheus.bearerTokenFile", "keep only one"}},
		{"empty selector", `{"source":"istio",` + prom + `,"istio":{"canary":{}},"slo":{"p99":"1s"}}`, []string{"istio.canary: selects nothing"}},
		{"bad reporter", `{"source":"istio",` + prom + `,"istio":{"reporter":"both","canary":{"service":"c"}},"slo":{"p99":"1s"}}`, []string{"istio.reporter"}},
		{"bad label", `{"source":"istio",` + prom + `,"istio":{"canary":{"labels":{"a-b":"x"}}},"slo":{"p99":"1s"}}`, []string{"istio.canary.labels", `"a-b"`}},
		{"no unit", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":250}}`, []string{`slo.p99: want a duration, got a number 250`, `"30s"`}},
		{"bad duration", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p999":"fast"}}`, []string{`slo.p999: want a duration, got "fast"`}},
		{"negative", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p50":"-1ms"}}`, []string{"slo.p50", "positive"}},
		{"bad ratio", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"ratio":{"p99":"x"}}}`, []string{"slo.ratio.p99"}},
		{"zero ratio", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"ratio":{"p99":0}}}`, []string{"slo.ratio.p99: 0 is below 1"}},
		{"error rate > 1", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"maxErrorRate":5}}`, []string{"slo.maxErrorRate", "outside 0…1"}},
		{"max on prometheus", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"max":"1s"}}`, []string{"slo.max", "no raw maximum"}},
		{"ratio without stable", `{"source":"istio",` + prom + `,"istio":{"canary":{"service":"c"}},"slo":{"ratio":{"p99":1.2}},"tailTest":{}}`, []string{"slo.ratio.p99, tailTest", "set istio.stable"}},
		{"nothing to check", `{"source":"istio",` + prom + `,` + istio + `,"slo":{}}`, []string{"slo: nothing to check"}},
		{"bad window", `{"source":"istio",` + prom + `,` + istio + `,"window":"forever","slo":{"p99":"1s"}}`, []string{`window: want a duration, got "forever"`, `or "cumulative"`}},
		{"tiny window", `{"source":"istio",` + prom + `,` + istio + `,"window":"10ms","slo":{"p99":"1s"}}`, []string{"window: 10ms is shorter than 1s"}},
		{"bad confidence", `{"source":"istio",` + prom + `,` + istio + `,"tailTest":{"confidence":95}}`, []string{"tailTest.confidence", "0.5 to 0.9999"}},
		{"bad minSamples", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"minSamples":0}`, []string{"minSamples", "whole number"}},
		{"bad timeout", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"timeout":"soon"}`, []string{"timeout"}},
		{"envoy cluster", `{"source":"envoy",` + prom + `,"envoy":{},"slo":{"p99":"1s"}}`, []string{"envoy.canaryCluster: missing"}},
		{"promql canary", `{"source":"promql",` + prom + `,"promql":{"histogram":"x"},"slo":{"p99":"1s"}}`, []string{"promql.canary: missing"}},
		{"promql template", `{"source":"promql",` + prom + `,"promql":{"canary":"a=\"b\"","histogram":"x{<<.Selecter>>}"},"slo":{"p99":"1s"}}`, []string{"promql.histogram", "Selecter"}},
		{"promql syntax", `{"source":"promql",` + prom + `,"promql":{"canary":"a=\"b\"","histogram":"x{<<.Selector>}"},"slo":{"p99":"1s"}}`, []string{"promql.histogram"}},
		{"promql unit", `{"source":"promql",` + prom + `,"promql":{"canary":"a=\"b\"","histogram":"x","unit":"us"},"slo":{"p99":"1s"}}`, []string{"promql.unit"}},
		{"promql no histogram", `{"source":"promql",` + prom + `,"promql":{"canary":"a=\"b\""},"slo":{"p99":"1s"}}`, []string{"promql.histogram: missing"}},
		{"promql errors alone", `{"source":"promql",` + prom + `,"promql":{"canary":"a=\"b\"","errors":"x"},"slo":{"maxErrorRate":0.01}}`, []string{"promql.requests: missing"}},
		{"fortio canary", `{"source":"fortio","fortio":{},"slo":{"p99":"1s"}}`, []string{"fortio.canary: missing"}},
		{"fortio with prometheus", `{"source":"fortio",` + prom + `,"fortio":{"canary":"c.json"},"slo":{"p99":"1s"}}`, []string{"prometheus: set, but source is fortio"}},
		{"query no name", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"query":"up","max":1}]}`, []string{"queries[0].name: missing"}},
		{"query no limit", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"name":"gc","query":"up"}]}`, []string{"queries[0]: set max and/or maxRatio"}},
		{"query no selector", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"name":"gc","query":"x{<<.Selector>>}","max":1}]}`, []string{"queries[0].canary: missing"}},
		{"query ratio no stable", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"name":"gc","query":"x{<<.Selector>>}","canary":"a=\"b\"","maxRatio":1.5}]}`, []string{"queries[0].stable: missing"}},
		{"query dup", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"name":"gc","query":"up","max":1},{"name":"gc","query":"up","max":1}]}`, []string{"queries[1].name", "used twice"}},
		{"ratio below 1", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"ratio":{"p99":"0.8"}}}`, []string{"slo.ratio.p99: 0.8 is below 1", "write at least 1"}},
		{"query ratio below 1", `{"source":"istio",` + prom + `,` + istio + `,"queries":[{"name":"gc","query":"up","maxRatio":0.5}]}`, []string{"queries[0].maxRatio: 0.5 is below 1"}},
		{"object duration", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":{"ms":250}}}`, []string{"slo.p99: want a duration, got an object"}},
		{"object window", `{"source":"istio",` + prom + `,` + istio + `,"window":{"minutes":5},"slo":{"p99":"1s"}}`, []string{"window: want a duration, got an object"}},
		{"object timeout", `{"source":"istio",` + prom + `,` + istio + `,"timeout":["30s"],"slo":{"p99":"1s"}}`, []string{"timeout: want a duration, got a list"}},
		{"trailing text", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"}} {"slo":{}}`, []string{"not valid JSON"}},
		{"duplicate field", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s","p99":"5s"}}`, []string{"slo.p99: set twice"}},
		{"wrong case", `{"source":"istio",` + prom + `,` + istio + `,"SLO":{"p99":"1s"}}`, []string{"SLO: unknown field"}},
		{"huge minSamples", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"minSamples":10000000}`, []string{"minSamples: 1e+07 must be a whole number from 1 to 1000000"}},
		{"huge minTailCount", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"minTailCount":"5000"}`, []string{"minTailCount: 5000 must be a whole number from 1 to 1000"}},
		{"fractional minTailCount", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"minTailCount":2.5}`, []string{"minTailCount: 2.5 must be a whole number"}},
		{"long timeout", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"timeout":"1h"}`, []string{"timeout: 1h0m0s is longer than 5m0s"}},
		{"long window", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"1s"},"window":"1y"}`, []string{"window: 8760h0m0s is longer than"}},
		{"zero latency", `{"source":"istio",` + prom + `,` + istio + `,"slo":{"p99":"0s"}}`, []string{"slo.p99: 0s must be positive"}},
		{"query fortio", `{"source":"fortio","fortio":{"canary":"c"},"queries":[{"name":"gc","query":"up","max":1}]}`, []string{"queries: need Prometheus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			if err == nil {
				t.Fatalf("ParseConfig accepted %s", tc.json)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigReportsAllProblemsAtOnce(t *testing.T) {
	_, err := ParseConfig([]byte(`{"source":"istio","istio":{"canary":{}},"slo":{"p99":"-1s","p50":"0s"}}`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"prometheus.address", "istio.canary", "slo.p99", "slo.p50"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
}

// TestConfigYAMLAndJSONAgree: the same configuration as YAML (a CLI
// --config file) compiles to the same rules; Prometheus-style windows work.
func TestConfigYAMLAndJSONAgree(t *testing.T) {
	const yamlDoc = `
source: istio
prometheus: {address: "http://prometheus.istio-system:9090", bearerTokenFile: /var/run/secrets/token}
istio:
  canary: {service: app-canary.default.svc.cluster.local}
  stable: {service: app-stable.default.svc.cluster.local, labels: {destination_cluster: east}}
window: 5m
slo: {p99: 250ms, p999: 1s, maxErrorRate: 1%, ratio: {p99: "1.2"}}
tailTest: {confidence: 0.99}
minSamples: "200"
`
	fromJSON, err := ParseConfig([]byte(validIstio))
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := ParseConfig([]byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromJSON)
	b, _ := json.Marshal(fromYAML)
	if string(a) != string(b) {
		t.Fatalf("JSON and YAML differ:\n%s\n%s", a, b)
	}
	c, err := ParseConfig([]byte(`{"source":"envoy","prometheus":{"address":"http://p:9090"},"envoy":{"canaryCluster":"c"},"window":"1d","slo":{"p99":"100ms"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := Compile(c); r.window != 24*time.Hour {
		t.Fatalf("window 1d compiled to %v", r.window)
	}
}

// TestValidateAndCompileChangeNothing: WithDefaults returns a copy,
// Validate and Compile leave the config as it was (the old Validate filled
// in defaults and stored private rules).
func TestValidateAndCompileChangeNothing(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(validIstio), &c); err != nil {
		t.Fatal(err)
	}
	c.Queries = []QueryCheck{{Name: "gc", Query: "x{<<.Selector>>}", Max: number("1")}}
	c.PromQL = &PromQLConfig{Canary: `a="b"`}
	before, _ := json.Marshal(c)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(c); err != nil {
		t.Fatal(err)
	}
	d := c.WithDefaults()
	after, _ := json.Marshal(c)
	if string(before) != string(after) {
		t.Fatalf("config changed:\nbefore %s\nafter  %s", before, after)
	}
	if c.Istio.Reporter != "" || d.Istio.Reporter != DefaultIstioReporter || c.Queries[0].Canary != "" || d.Queries[0].Canary != `a="b"` {
		t.Errorf("defaults: original reporter %q query canary %q; defaulted %q %q", c.Istio.Reporter, c.Queries[0].Canary, d.Istio.Reporter, d.Queries[0].Canary)
	}
	if c.TailTest.Quantile != nil || d.TailTest.Quantile == nil || *d.TailTest.Quantile != DefaultTailQuantile {
		t.Errorf("tail test defaults leaked into the original or are missing: %v / %v", c.TailTest.Quantile, d.TailTest.Quantile)
	}
}
