package rollouts

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
)

// The warm-up's neighbour guard watches the users on stable through the
// Rollout's danki/istio gate when that gate reads a stable latency series
// from Prometheus, over neighbourWindow; otherwise only the stable probe.
func TestWarmupWatchesUsersThroughTheGatesMetrics(t *testing.T) {
	s := newTestWarmupStep(t)
	rollout := func(gate string) *v1alpha1.Rollout {
		ro := stepRollout("cart", "h2", 1)
		ro.Spec.Strategy.Canary.StableService, ro.Spec.Strategy.Canary.CanaryService = "cart-stable", "cart-canary"
		router := `{"virtualService":{"name":"cart","routes":["primary"]}`
		if gate != "" {
			router += `,"gate":` + gate
		}
		ro.Spec.Strategy.Canary.TrafficRouting = &v1alpha1.RolloutTrafficRouting{Plugins: map[string]json.RawMessage{
			TrafficRouterName: json.RawMessage(router + `}`)}}
		return ro
	}
	const envoyGate = `{"source":"envoy","prometheus":{"address":"http://127.0.0.1:9"},"envoy":{"canaryCluster":"c","stableCluster":"s"},"slo":{"p99":"500ms"}}`
	cfg := warmup.Config{NeighbourWindow: config.Duration(10 * time.Second)}.WithDefaults()

	sig := s.step.UsersOnStable(s.rollout(rollout(envoyGate)), cfg)
	tail, ok := sig.(*analysis.StableTail)
	if !ok || tail.Range != 10*time.Second {
		t.Fatalf("gate with a stable cluster: signal %#v, want a StableTail over 10s", sig)
	}
	// No stable series in the gate, no gate, or the guard turned off: none.
	noStable := `{"source":"envoy","prometheus":{"address":"http://127.0.0.1:9"},"envoy":{"canaryCluster":"c"},"slo":{"p99":"500ms"}}`
	off := false
	guardOff := cfg
	guardOff.NeighbourGuard = &off
	for name, got := range map[string]warmup.NeighbourSignal{
		"no stable series": s.step.UsersOnStable(s.rollout(rollout(noStable)), cfg),
		"no gate":          s.step.UsersOnStable(s.rollout(rollout("")), cfg),
		"guard off":        s.step.UsersOnStable(s.rollout(rollout(envoyGate)), guardOff),
	} {
		if got != nil {
			t.Errorf("%s: signal %#v, want none", name, got)
		}
	}
}
