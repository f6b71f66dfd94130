package rollouts

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
)

// FuzzRouterConfig feeds the danki/istio config of a Rollout (shift.Bind:
// the routerconfig decoder, the ramp plan) and its gate (built as the
// plugin builds it, under an operator's policy) arbitrary input: nothing
// may panic, and a bound config's plan is valid.
func FuzzRouterConfig(f *testing.F) {
	var files []string
	for _, glob := range []string{"../examples/istio-router/*.yaml", "../lab/manifests/*/*.yaml", "../examples/kind/manifests/*.yaml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	for _, seed := range testutil.YAMLValuesUnder(f, TrafficRouterName, files) {
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
