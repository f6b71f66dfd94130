package rollouts

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
)

// yamlValuesUnder returns, as JSON, every value under a key named key in
// the YAML documents of files (multi-document files included).
func yamlValuesUnder(t testing.TB, key string, files []string) [][]byte {
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
		for _, doc := range splitYAMLDocuments(data) {
			var v any
			if yaml.Unmarshal(doc, &v) == nil {
				walk(v)
			}
		}
	}
	return out
}

func splitYAMLDocuments(data []byte) [][]byte {
	var docs [][]byte
	start := 0
	for i := 0; i+4 <= len(data); i++ {
		if (i == 0 || data[i-1] == '\n') && string(data[i:i+3]) == "---" && (i+3 == len(data) || data[i+3] == '\n' || data[i+3] == '\r') {
			docs = append(docs, data[start:i])
			start = i + 3
		}
	}
	return append(docs, data[start:])
}

// FuzzRouterConfig feeds the danki/istio config of a Rollout (shift.Bind:
// the routerconfig decoder, the ramp plan) and its gate (built as the
// plugin builds it, under an operator's policy) arbitrary input: nothing
// may panic, and a bound config's plan is valid.
func FuzzRouterConfig(f *testing.F) {
	var files []string
	for _, glob := range []string{"../examples/istio-router/*.yaml", "../examples/lab/*/*.yaml", "../examples/kind/manifests/*.yaml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	for _, seed := range yamlValuesUnder(f, TrafficRouterName, files) {
		f.Add(seed)
	}
	f.Add([]byte(hostConfig))
	f.Add([]byte(`{"virtualService":{"name":"reviews"},"ramp":{"step":20,"interval":"1s","maxBreaches":1},"gate":{"source":"istio","prometheus":{"address":"http://prometheus.istio-system:9090","bearerTokenFile":"/etc/passwd"},"istio":{"canary":{"service":"a"}},"slo":{"p99":"1s"}}}`))
	f.Add([]byte(`{"virtualService":{"name":"reviews","routes":["primary"]},"destinationRule":{"name":"reviews","canarySubsetName":"canary","stableSubsetName":"stable"},"gate":null}`))
	r := newTrafficRouter(slog.New(slog.DiscardHandler), policy.Policy{Prometheus: []policy.Prometheus{{Address: "http://prometheus.istio-system:9090"}}})
	scope := shift.Scope{Namespace: trNS, StableHost: "reviews-stable", CanaryHost: "reviews-canary", ManagedRoutes: []string{"header-route"},
		ConfigField: configField, HostsField: "spec.strategy.canary.stableService and canaryService"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := shift.Bind(raw, scope)
		if err != nil {
			return
		}
		if err := b.Plan.Validate(); err != nil {
			t.Fatalf("Bind accepted a plan that does not validate: %v\n%s", err, raw)
		}
		_, _ = r.gateFor(b.Gate) // an error is fine; a panic is not
	})
}
