package analysis

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/policy"
)

// pluginConfigs returns every value under a key named key in the YAML
// documents of files, as JSON: the danki/latency blocks of the examples.
func pluginConfigs(t testing.TB, key string, files ...string) [][]byte {
	t.Helper()
	var out [][]byte
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, inner := range v {
				if k == key {
					if b, err := json.Marshal(inner); err == nil {
						out = append(out, b)
					}
				}
				walk(inner)
			}
		case []any:
			for _, inner := range v {
				walk(inner)
			}
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if yaml.Unmarshal(data, &doc) == nil {
			walk(doc)
		}
	}
	return out
}

// FuzzParseConfig feeds the danki/latency decoder, Compile and the source
// builders (under an operator's policy, so that no file a fuzzed config
// names is read) arbitrary configs: no input may panic, and a config
// ParseConfig accepts compiles.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("../../examples/analysis/*.yaml")
	lab, _ := filepath.Glob("../../examples/lab/*/*.yaml")
	for _, seed := range pluginConfigs(f, "danki/latency", append(files, lab...)...) {
		f.Add(seed)
	}
	f.Add([]byte(`{"source":"fortio","fortio":{"canary":"http://10.0.0.1/c.json","stable":"s.json"},"slo":{"max":"1s"}}`))
	f.Add([]byte(`{"source":"load","load":{"urls":["http://10.0.0.5:8080"],"namespace":"x","count":"5"},"slo":{"p99":"1s"}}`))
	f.Add([]byte("source: istio\nprometheus: {address: http://p:9090, bearerTokenSecret: {name: a, key: b}}\nistio: {canary: {service: a}}\nwindow: 1d\nslo: {p99: 1s}"))
	pol := policy.Policy{Prometheus: []policy.Prometheus{{Address: "http://prometheus.istio-system:9090"}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		if _, err := Compile(cfg); err != nil {
			t.Fatalf("ParseConfig accepted a config Compile refuses: %v\n%s", err, data)
		}
		a, err := NewAnalyzer(cfg, WithPolicy(pol), WithLogger(quiet))
		if err != nil {
			return
		}
		_ = a.Describe()
	})
}
