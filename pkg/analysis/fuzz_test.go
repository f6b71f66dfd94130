package analysis

import (
	"path/filepath"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
)

// FuzzParseConfig feeds the danki/latency decoder, Compile and the source
// builders (under an operator's policy, so that no file a fuzzed config
// names is read) arbitrary configs: no input may panic, and a config
// ParseConfig accepts compiles.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("../../examples/analysis/*.yaml")
	lab, _ := filepath.Glob("../../lab/manifests/*/*.yaml")
	for _, seed := range testutil.YAMLValuesUnder(f, "danki/latency", append(files, lab...)) {
		f.Add(seed)
	}
	f.Add([]byte(`{"source":"fortio","fortio":{"canary":"http://10.0.0.1/c.json","stable":"s.json"},"slo":{"max":"1s"}}`))
	f.Add([]byte(`{"source":"load","load":{"urls":["http://10.0.0.5:8080"],"namespace":"x","count":"5"},"slo":{"p99":"1s"}}`))
	f.Add([]byte("source: istio\nprometheus: {address: http://p:9090, bearerTokenSecret: {name: a, key: b}}\nistio: {canary: {service: a}}\nwindow: 1d\nslo: {p99: 1s}"))
	// Templates that hung text/template or exhausted its memory (issue 55;
	// template_hostile_test.go has what each must be refused with).
	for _, seed := range []string{
		`{"source":"load","load":{"service":"s","requests":[{"path":"/<<range 1000000000000>><<end>>"}]},"slo":{"p99":"1s"}}`,
		`{"source":"load","load":{"service":"s","requests":[{"path":"/<<randString 4000000000>>","headers":{"X":"<<printf \"%999999999d\" 1>>"}}]},"slo":{"p99":"1s"}}`,
		`{"source":"promql","prometheus":{"address":"http://p:9090"},"promql":{"canary":"a=\"b\"","histogram":"<<define \"a\">><<template \"a\">><<end>><<template \"a\">>"},"slo":{"p99":"1s"}}`,
	} {
		f.Add([]byte(seed))
	}
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
