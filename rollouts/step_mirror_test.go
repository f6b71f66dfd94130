package rollouts

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// mirrorStepFixture is a Rollout routed by danki/istio on a fake Istio API
// whose VirtualService carries a warm-up mirror (as a plugin process that
// died mid-warm-up leaves it).
func mirrorStepFixture(t *testing.T) (*warmupStep, *v1alpha1.Rollout, *fake.Clientset) {
	t.Helper()
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"},
		Spec: networking.VirtualService{Hosts: []string{"cart"}, Http: []*networking.HTTPRoute{{Name: "primary",
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "cart-stable"}, Weight: 100},
				{Destination: &networking.Destination{Host: "cart-canary"}, Weight: 0}}}}}}
	cs := fake.NewSimpleClientset(vs)
	ro := stepRollout("cart", "h2", 1)
	ro.Spec.Strategy.Canary.StableService, ro.Spec.Strategy.Canary.CanaryService = "cart-stable", "cart-canary"
	ro.Spec.Strategy.Canary.TrafficRouting = &v1alpha1.RolloutTrafficRouting{Plugins: map[string]json.RawMessage{
		TrafficRouterName: json.RawMessage(`{"virtualService":{"name":"cart","routes":["primary"]}}`)}}
	b, err := bind(ro, policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	if err := shift.New(cs, nil).SetWarmupMirror(context.Background(), b.Target, shift.WarmupMirror{Percent: 8}); err != nil {
		t.Fatal(err)
	}
	s := newTestWarmupStep(t)
	s.istio = cs
	return s, ro, cs
}

func mirrorLeft(t *testing.T, cs *fake.Clientset) bool {
	t.Helper()
	vs, err := cs.NetworkingV1().VirtualServices("shop").Get(context.Background(), "cart", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, annotated := vs.Annotations[wellknown.MirrorAnnotation]
	return annotated || len(vs.Spec.Http[0].Mirrors) > 0
}

const mirrorStepConfig = `{"urls":["http://127.0.0.1:1"],"mirror":{"allowSideEffects":true,"source":"envoy",
  "prometheus":{"address":"http://127.0.0.1:1"},"envoy":{"canaryCluster":"outbound|8080||cart-canary.shop.svc.cluster.local"}}}`

// Abort and Terminate after a plugin restart (no run in memory) still
// remove the mirror the old process left.
func TestStepAbortRemovesLeftoverMirror(t *testing.T) {
	for _, op := range []string{"abort", "terminate"} {
		s, ro, cs := mirrorStepFixture(t)
		sc := &types.RpcStepContext{Config: json.RawMessage(mirrorStepConfig)}
		if op == "abort" {
			s.Abort(ro, sc)
		} else {
			s.Terminate(ro, sc)
		}
		if mirrorLeft(t, cs) {
			t.Fatalf("%s left the warm-up mirror", op)
		}
	}
}

func TestStepRefusesMirrorWithoutSideEffectsOptIn(t *testing.T) {
	s, ro, _ := mirrorStepFixture(t)
	raw := strings.Replace(mirrorStepConfig, `"allowSideEffects":true,`, "", 1)
	res, _ := s.Run(ro, &types.RpcStepContext{Config: json.RawMessage(raw)})
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "mirror.allowSideEffects") {
		t.Fatalf("Run = %s %q; want a failure naming mirror.allowSideEffects", res.Phase, res.Message)
	}
}

// mode only replaces the synthetic load (Job.Main); afterSynthetic runs the
// mirror after it, before the check that was already there (Job.After).
func TestStepMirrorModes(t *testing.T) {
	s, ro, _ := mirrorStepFixture(t)
	for _, tc := range []struct {
		mode      string
		wantMain  bool
		wantAfter bool
	}{{"only", true, false}, {"afterSynthetic", false, true}} {
		raw := strings.Replace(mirrorStepConfig, `"mirror":{`, `"mirror":{"mode":"`+tc.mode+`",`, 1)
		cfg, err := warmupstep.ParseStepConfig([]byte(raw), policy.Local())
		if err != nil {
			t.Fatal(err)
		}
		var job warmupstep.Job
		if err := s.step.WithMirror(s.rollout(ro), cfg, &job); err != nil {
			t.Fatal(err)
		}
		if (job.Main != nil) != tc.wantMain || (job.After != nil) != tc.wantAfter {
			t.Errorf("mode %s: Main set %v, After set %v", tc.mode, job.Main != nil, job.After != nil)
		}
	}
	// Without the Rollout's danki/istio router there is no VirtualService to mirror on.
	ro.Spec.Strategy.Canary.TrafficRouting = nil
	cfg, _ := warmupstep.ParseStepConfig([]byte(mirrorStepConfig), policy.Local())
	if err := s.step.WithMirror(s.rollout(ro), cfg, &warmupstep.Job{}); err == nil || !strings.Contains(err.Error(), "danki/istio") {
		t.Fatalf("withMirror without a traffic router: %v", err)
	}
}

// TestStepMirrorHeldToThePolicyThroughRPC: a step's mirror block is a
// tenant's Prometheus config too: only the operator's addresses, no
// controller file.
func TestStepMirrorHeldToThePolicyThroughRPC(t *testing.T) {
	evil, allowed := latencyProm(t), latencyProm(t)
	token := controllerToken(t)
	for _, tc := range []struct{ prometheus, want string }{
		{`{"address":"` + evil.URL + `"}`, "prometheus.address"},
		{`{"address":"` + allowed.URL + `","bearerTokenFile":"` + token + `"}`, "prometheus.bearerTokenFile"},
		{`{"address":"` + allowed.URL + `","caFile":"` + token + `"}`, "prometheus.caFile"},
	} {
		s, ro, _ := mirrorStepFixture(t)
		s.step.Policy = policy.Policy{Prometheus: []policy.Prometheus{{Address: allowed.URL}},
			Network: policy.Network{AllowLoopback: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
		raw := strings.Replace(mirrorStepConfig, `"prometheus":{"address":"http://127.0.0.1:1"}`, `"prometheus":`+tc.prometheus, 1)
		res, rerr := warmupStepClient(t, s).Run(ro, &types.RpcStepContext{Config: json.RawMessage(raw)})
		if rerr.HasError() || res.Phase != types.PhaseFailed || !strings.Contains(res.Message, tc.want) {
			t.Errorf("%s: Run = %s %q (%v); want Failed naming %s", tc.prometheus, res.Phase, res.Message, rerr, tc.want)
		}
	}
	if n := len(evil.Queries()) + len(allowed.Queries()); n != 0 {
		t.Fatalf("%d queries sent (Authorization %q %q), want none", n, evil.Authorizations(), allowed.Authorizations())
	}
}
