package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/wellknown"
	goplugin "github.com/hashicorp/go-plugin"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const trNS = "shop"

type trClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *trClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *trClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// gateFunc adapts a function to shift.Gate (the window start is ignored).
type gateFunc func(ctx context.Context) (bool, string, error)

func (f gateFunc) Check(ctx context.Context, _ time.Time) (bool, string, error) { return f(ctx) }

// trFixture is the adapter served over real go-plugin net/rpc plumbing (gob
// encoding every argument) against a fake Istio clientset.
type trFixture struct {
	plugin rpc.TrafficRouterPlugin // the controller's side of the connection
	impl   *trafficRouter
	istio  *fake.Clientset
	argo   *argofake.Clientset
	kube   *kubefake.Clientset
	clock  *trClock
}

func newTRFixture(t testing.TB, objs ...runtime.Object) *trFixture {
	t.Helper()
	return newTRFixtureWith(t, policy.Local(), objs...)
}

// newTRFixtureWith is newTRFixture under the operator's policy pol.
func newTRFixtureWith(t testing.TB, pol policy.Policy, objs ...runtime.Object) *trFixture {
	t.Helper()
	f := &trFixture{istio: fake.NewSimpleClientset(objs...), argo: argofake.NewSimpleClientset(), kube: kubefake.NewClientset(), clock: &trClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}}
	f.impl = newTrafficRouter(slog.New(slog.DiscardHandler), pol)
	f.impl.newClients = f.clients
	f.impl.router.Now = f.clock.Now
	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{
		"RpcTrafficRouterPlugin": &rpc.RpcTrafficRouterPlugin{Impl: f.impl},
	}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense("RpcTrafficRouterPlugin")
	if err != nil {
		t.Fatalf("dispense RpcTrafficRouterPlugin: %v", err)
	}
	f.plugin = raw.(rpc.TrafficRouterPlugin)
	if err := f.plugin.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	return f
}

func (f *trFixture) clients() (routerClients, error) {
	return routerClients{istio: f.istio, argo: f.argo, kube: f.kube}, nil
}

func (f *trFixture) vs(t *testing.T) *networkingv1.VirtualService {
	t.Helper()
	vs, err := f.istio.NetworkingV1().VirtualServices(trNS).Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func trDest(host, subset string, weight int32) *networking.HTTPRouteDestination {
	return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Subset: subset, Port: &networking.PortSelector{Number: 8080}}, Weight: weight}
}

// trVirtualService has a foreign route above and below the primary route.
func trVirtualService(primary ...*networking.HTTPRouteDestination) *networkingv1.VirtualService {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: trNS}}
	vs.Spec.Hosts = []string{"reviews"}
	vs.Spec.Http = []*networking.HTTPRoute{
		{Name: "health", Route: []*networking.HTTPRouteDestination{trDest("reviews-stable", "", 100)}},
		{Name: "primary", Route: primary},
		{Name: "ratings", Route: []*networking.HTTPRouteDestination{trDest("ratings", "", 100)}},
	}
	return vs
}

func hostVS() *networkingv1.VirtualService {
	return trVirtualService(trDest("reviews-stable", "", 100), trDest("reviews-canary", "", 0))
}

func trRollout(config string, managed ...string) *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: trNS}}
	w20, w60 := int32(20), int32(60)
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{
		StableService: "reviews-stable",
		CanaryService: "reviews-canary",
		TrafficRouting: &v1alpha1.RolloutTrafficRouting{
			Plugins: map[string]json.RawMessage{TrafficRouterName: json.RawMessage(config)},
		},
		Steps: []v1alpha1.CanaryStep{{SetWeight: &w20}, {SetWeight: &w60}},
	}
	for _, m := range managed {
		ro.Spec.Strategy.Canary.TrafficRouting.ManagedRoutes = append(ro.Spec.Strategy.Canary.TrafficRouting.ManagedRoutes, v1alpha1.MangedRoutes{Name: m})
	}
	return ro
}

const hostConfig = `{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 10, "interval": "30s"}}`

func weights(vs *networkingv1.VirtualService, route int) []int32 {
	var out []int32
	for _, d := range vs.Spec.Http[route].Route {
		out = append(out, d.Weight)
	}
	return out
}

func mustOK(t testing.TB, what string, err types.RpcError) {
	t.Helper()
	if err.HasError() {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestRegisteredAsTrafficRouter(t *testing.T) {
	f, ok := factories[KindTrafficRouter]
	if !ok || f.mapKey != "RpcTrafficRouterPlugin" {
		t.Fatalf("traffic router registration = %+v, %v", f, ok)
	}
	if _, ok := f.build(slog.New(slog.DiscardHandler), policy.Local(), nil).(*rpc.RpcTrafficRouterPlugin); !ok {
		t.Fatal("registered factory does not build an RpcTrafficRouterPlugin")
	}
}

func TestRPCTypeIsPluginName(t *testing.T) {
	f := newTRFixture(t)
	if got := f.plugin.Type(); got != "danki/istio" {
		t.Fatalf("Type() = %q", got)
	}
}

// TestRPCSetWeightRampsAndVerifyHoldsTheStep walks one Argo setWeight step
// the way the controller drives it: SetWeight then VerifyWeight on every
// reconcile.
func TestRPCSetWeightRampsAndVerifyHoldsTheStep(t *testing.T) {
	f := newTRFixture(t, hostVS())
	ro := trRollout(hostConfig)
	var seen []int32
	for i := 0; i < 10; i++ {
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
		verified, err := f.plugin.VerifyWeight(ro, 20, nil)
		mustOK(t, "VerifyWeight", err)
		w := weights(f.vs(t), 1)
		if w[0]+w[1] != 100 {
			t.Fatalf("weights %v do not sum to 100", w)
		}
		if len(seen) == 0 || seen[len(seen)-1] != w[1] {
			seen = append(seen, w[1])
		}
		if verified == types.Verified {
			break
		}
		f.clock.Add(15 * time.Second)
	}
	if !slices.Equal(seen, []int32{10, 20}) {
		t.Fatalf("canary weights seen %v, want [10 20]", seen)
	}
	verified, err := f.plugin.VerifyWeight(ro, 20, nil)
	mustOK(t, "VerifyWeight", err)
	if verified != types.Verified {
		t.Fatal("step not verified at the target")
	}
	// A restarted plugin (fresh process state) agrees: the state is on the
	// VirtualService.
	g := newTRFixture(t)
	g.istio = f.istio
	g.impl.newClients = f.clients
	mustOK(t, "InitPlugin", g.plugin.InitPlugin())
	if v, err := g.plugin.VerifyWeight(ro, 20, nil); err.HasError() || v != types.Verified {
		t.Fatalf("restarted plugin VerifyWeight = %v %v", v, err)
	}
	if v, err := g.plugin.VerifyWeight(ro, 60, nil); err.HasError() || v != types.NotVerified {
		t.Fatalf("next step's weight = %v %v, want NotVerified", v, err)
	}
	// Foreign routes untouched.
	vs := f.vs(t)
	if !slices.Equal(weights(vs, 0), []int32{100}) || !slices.Equal(weights(vs, 2), []int32{100}) {
		t.Fatalf("foreign routes changed: %v %v", weights(vs, 0), weights(vs, 2))
	}
}

func TestRPCAbortIsImmediate(t *testing.T) {
	f := newTRFixture(t, hostVS())
	ro := trRollout(hostConfig)
	for range 3 {
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil))
		f.clock.Add(30 * time.Second)
	}
	if w := weights(f.vs(t), 1); w[1] != 30 {
		t.Fatalf("canary at %d after three ramp calls, want 30", w[1])
	}
	mustOK(t, "SetWeight(0)", f.plugin.SetWeight(ro, 0, nil))
	vs := f.vs(t)
	if w := weights(vs, 1); w[0] != 100 || w[1] != 0 {
		t.Fatalf("after abort weights %v, want [100 0]", w)
	}
	if _, ok := vs.Annotations[wellknown.RampAnnotation]; ok {
		t.Fatal("abort left the ramp state")
	}
	if v, err := f.plugin.VerifyWeight(ro, 0, nil); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(0) = %v %v", v, err)
	}
}

func TestRPCGateBreachFailsVerifyNamingTheBreach(t *testing.T) {
	f := newTRFixture(t, hostVS())
	var gotRaw string
	f.impl.router.GateFor = func(raw json.RawMessage) (shift.Gate, error) {
		gotRaw = string(raw)
		return gateFunc(func(context.Context) (bool, string, error) { return false, "p99.9 1.2s > 400ms", nil }), nil
	}
	ro := trRollout(`{"virtualService": {"name": "reviews"}, "ramp": {"step": 20, "interval": "1s", "maxBreaches": 1}, "gate": {"p99": "400ms"}}`)
	if err := f.argo.Tracker().Add(ro); err != nil {
		t.Fatal(err)
	}
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // 0 → 20
	f.clock.Add(time.Second)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // breach at 20 → failed, back to 0
	if !strings.Contains(gotRaw, `"p99"`) {
		t.Fatalf("gate built from %q, want the gate config", gotRaw)
	}
	// A failed ramp holds the step (NotVerified, and no error: Argo reads an
	// error as "no verdict" and would promote at the end of the steps) and
	// aborts the rollout, with an event naming the breach.
	v, err := f.plugin.VerifyWeight(ro, 60, nil)
	if v != types.NotVerified || err.HasError() {
		t.Fatalf("VerifyWeight after the breach = %v %q, want NotVerified, no error", v, err.Error())
	}
	if w := weights(f.vs(t), 1); w[1] != 0 {
		t.Fatalf("canary at %d after the breach, want back at 0", w[1])
	}
	if !abortPatched(f) {
		t.Fatalf("the failed ramp did not abort the rollout; Argo client actions: %v", f.argo.Actions())
	}
	ev := rampEvents(t, f)
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || ev[0].InvolvedObject.Kind != "Rollout" || ev[0].InvolvedObject.Name != "reviews" ||
		!strings.Contains(ev[0].Message, "p99.9 1.2s > 400ms") || !strings.Contains(ev[0].Message, "aborted the rollout") {
		t.Fatalf("events %+v: want one Warning %s on Rollout reviews naming the breach", ev, shift.RampFailedReason)
	}
}

// abortPatched reports whether the rollout was aborted through the status
// subresource, like `kubectl argo rollouts abort`.
func abortPatched(f *trFixture) bool {
	for _, a := range f.argo.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && pa.GetSubresource() == "status" && pa.GetName() == "reviews" &&
			string(pa.GetPatch()) == `{"status":{"abort":true}}` {
			return true
		}
	}
	return false
}

func rampEvents(t *testing.T, f *trFixture) []corev1.Event {
	t.Helper()
	list, err := f.kube.CoreV1().Events(trNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == shift.RampFailedReason {
			out = append(out, e)
		}
	}
	return out
}

func TestRPCFailedRampWhoseAbortFailsStillHoldsTheStep(t *testing.T) {
	f := newTRFixture(t, hostVS())
	f.impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) {
		return gateFunc(func(context.Context) (bool, string, error) { return false, "p99 900ms > 250ms", nil }), nil
	}
	f.argo.PrependReactor("patch", "rollouts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf(`rollouts.argoproj.io "reviews" is forbidden`)
	})
	ro := trRollout(`{"virtualService": {"name": "reviews"}, "ramp": {"step": 20, "interval": "1s", "maxBreaches": 1}, "gate": {}}`)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 100, nil))
	f.clock.Add(time.Second)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 100, nil))
	// Even toward 100 % (the end of the steps), a failed ramp never verifies.
	v, err := f.plugin.VerifyWeight(ro, 100, nil)
	if v != types.NotVerified || err.HasError() {
		t.Fatalf("VerifyWeight = %v %q, want NotVerified, no error", v, err.Error())
	}
	ev := rampEvents(t, f)
	if len(ev) != 1 || !strings.Contains(ev[0].Message, "p99 900ms > 250ms") || !strings.Contains(ev[0].Message, "rollouts/status") || !strings.Contains(ev[0].Message, "forbidden") {
		t.Fatalf("events %+v: want one naming the breach and why the abort failed", ev)
	}
	// An already aborted rollout is not patched again.
	ro.Status.Abort = true
	f.argo.ClearActions()
	if v, err := f.plugin.VerifyWeight(ro, 100, nil); v != types.NotVerified || err.HasError() || len(f.argo.Actions()) != 0 {
		t.Fatalf("VerifyWeight on an aborted rollout = %v %q, actions %v: want NotVerified, no second abort", v, err.Error(), f.argo.Actions())
	}
}

func TestRPCAdditionalDestinations(t *testing.T) {
	f := newTRFixture(t, hostVS())
	ro := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 100}}`)
	extra := []v1alpha1.WeightDestination{{ServiceName: "reviews-exp", PodTemplateHash: "abc", Weight: 15}}
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, extra))
	vs := f.vs(t)
	route := vs.Spec.Http[1].Route
	if len(route) != 3 || route[2].Destination.Host != "reviews-exp" || !slices.Equal(weights(vs, 1), []int32{65, 20, 15}) {
		t.Fatalf("primary route after an experiment: %v", route)
	}
	if v, err := f.plugin.VerifyWeight(ro, 20, extra); err.HasError() || v != types.NotVerified {
		// Not yet gated at 20 (no gate: the next call after the interval).
		t.Fatalf("VerifyWeight right after the move = %v %v", v, err)
	}
	f.clock.Add(time.Minute)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, extra))
	if v, err := f.plugin.VerifyWeight(ro, 20, extra); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight = %v %v", v, err)
	}
	// The experiment ends: its destination goes.
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
	if w := weights(f.vs(t), 1); !slices.Equal(w, []int32{80, 20}) {
		t.Fatalf("after the experiment: %v", w)
	}
}

func TestRPCHeaderAndMirrorRoutes(t *testing.T) {
	f := newTRFixture(t, hostVS())
	ro := trRollout(hostConfig, "canary-header", "canary-mirror")
	ro.Spec.Strategy.Canary.Steps = append(ro.Spec.Strategy.Canary.Steps,
		v1alpha1.CanaryStep{SetHeaderRoute: &v1alpha1.SetHeaderRoute{Name: "canary-header"}},
		v1alpha1.CanaryStep{SetMirrorRoute: &v1alpha1.SetMirrorRoute{Name: "canary-mirror"}})
	mustOK(t, "SetHeaderRoute", f.plugin.SetHeaderRoute(ro, &v1alpha1.SetHeaderRoute{
		Name:  "canary-header",
		Match: []v1alpha1.HeaderRoutingMatch{{HeaderName: "x-canary", HeaderValue: &v1alpha1.StringMatch{Exact: "yes"}}},
	}))
	pct := int32(25)
	mustOK(t, "SetMirrorRoute", f.plugin.SetMirrorRoute(ro, &v1alpha1.SetMirrorRoute{
		Name:       "canary-mirror",
		Percentage: &pct,
		Match:      []v1alpha1.RouteMatch{{Method: &v1alpha1.StringMatch{Exact: "GET"}, Headers: map[string]v1alpha1.StringMatch{"x-user": {Prefix: "qa"}}}},
	}))
	vs := f.vs(t)
	var names []string
	for _, r := range vs.Spec.Http {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"health", "canary-header", "canary-mirror", "primary", "ratings"}) {
		t.Fatalf("routes %v", names)
	}
	if m := vs.Spec.Http[2]; m.Mirror.GetHost() != "reviews-canary" || m.MirrorPercentage.GetValue() != 25 || m.Match[0].Headers["x-user"].GetPrefix() != "qa" || m.Match[0].Method.GetExact() != "GET" {
		t.Fatalf("mirror route %v", m)
	}
	if h := vs.Spec.Http[1]; h.Match[0].Headers["x-canary"].GetExact() != "yes" || h.Route[0].Destination.Host != "reviews-canary" || h.Route[0].Weight != 100 {
		t.Fatalf("header route %v", h)
	}
	// A header route not in managedRoutes is refused, naming the fix.
	err := f.plugin.SetHeaderRoute(ro, &v1alpha1.SetHeaderRoute{Name: "stray", Match: []v1alpha1.HeaderRoutingMatch{{HeaderName: "x", HeaderValue: &v1alpha1.StringMatch{Exact: "1"}}}})
	if !strings.Contains(err.Error(), `header route "stray": not listed in the managed routes`) {
		t.Fatalf("stray header route: %q", err)
	}
	mustOK(t, "RemoveManagedRoutes", f.plugin.RemoveManagedRoutes(ro))
	names = nil
	for _, r := range f.vs(t).Spec.Http {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"health", "primary", "ratings"}) {
		t.Fatalf("after RemoveManagedRoutes: %v", names)
	}
}

func TestRPCSubsetLevelWeightsAndHashes(t *testing.T) {
	dr := &networkingv1.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: trNS}}
	dr.Spec.Host = "reviews"
	dr.Spec.Subsets = []*networking.Subset{{Name: "stable", Labels: map[string]string{"app": "reviews"}}, {Name: "canary", Labels: map[string]string{"app": "reviews"}}}
	f := newTRFixture(t, trVirtualService(trDest("reviews", "stable", 100), trDest("reviews", "canary", 0)), dr)
	ro := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]},
		"destinationRule": {"name": "reviews", "stableSubsetName": "stable", "canarySubsetName": "canary"},
		"ramp": {"weights": [5, 50], "interval": "10s"}}`)
	ro.Spec.Strategy.Canary.StableService, ro.Spec.Strategy.Canary.CanaryService = "", ""
	mustOK(t, "UpdateHash", f.plugin.UpdateHash(ro, "c4n4ry", "st4ble", []v1alpha1.WeightDestination{{ServiceName: "exp", PodTemplateHash: "e1", Weight: 0}}))
	got, err := f.istio.NetworkingV1().DestinationRules(trNS).Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, s := range got.Spec.Subsets {
		labels[s.Name] = s.Labels[shift.PodTemplateHashLabel]
	}
	if labels["stable"] != "st4ble" || labels["canary"] != "c4n4ry" || labels["exp"] != "e1" {
		t.Fatalf("subset hashes %v", labels)
	}
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
	if w := weights(f.vs(t), 1); !slices.Equal(w, []int32{95, 5}) {
		t.Fatalf("first ladder step: %v, want [95 5]", w)
	}
}

func TestRPCConfigurationErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(ro *v1alpha1.Rollout)
		config string
		want   string
	}{
		{"no plugin config", func(ro *v1alpha1.Rollout) { ro.Spec.Strategy.Canary.TrafficRouting.Plugins = nil }, "", `plugins["danki/istio"]: missing`},
		{"unknown field", nil, `{"virtualService": {"name": "reviews"}, "rampp": {}}`, `plugins["danki/istio"].rampp: unknown field`},
		{"no virtual service", nil, `{"ramp": {"step": 10}}`, `plugins["danki/istio"].virtualService.name: required`},
		{"bad interval", nil, `{"virtualService": {"name": "reviews"}, "ramp": {"interval": "soon"}}`, `plugins["danki/istio"].ramp.interval: want a duration, got "soon"`},
		{"numeric interval", nil, `{"virtualService": {"name": "reviews"}, "ramp": {"interval": 30}}`, `plugins["danki/istio"].ramp.interval: want a duration, got a number 30`},
		{"bad step", nil, `{"virtualService": {"name": "reviews"}, "ramp": {"step": 150}}`, `plugins["danki/istio"].ramp.step: must be 1–100 percentage points, got 150`},
		{"negative max hold", nil, `{"virtualService": {"name": "reviews"}, "ramp": {"maxHold": "-1m"}}`, `plugins["danki/istio"].ramp.maxHold: must be positive, got -1m0s`},
		{"duplicate field", nil, `{"virtualService": {"name": "reviews"}, "ramp": {"step": 10, "step": 20}}`, `plugins["danki/istio"].ramp.step: set twice`},
		{"no services", func(ro *v1alpha1.Rollout) { ro.Spec.Strategy.Canary.CanaryService = "" }, hostConfig, "stableService and canaryService: both required"},
		{"partial destination rule", nil, `{"virtualService": {"name": "reviews"}, "destinationRule": {"name": "reviews"}}`, "destinationRule: name, canarySubsetName and stableSubsetName are all required"},
		{"max traffic weight", func(ro *v1alpha1.Rollout) {
			w := int32(1000)
			ro.Spec.Strategy.Canary.TrafficRouting.MaxTrafficWeight = &w
		}, hostConfig, "maxTrafficWeight: 1000"},
		{"no canary strategy", func(ro *v1alpha1.Rollout) { ro.Spec.Strategy.Canary = nil }, hostConfig, "spec.strategy.canary.trafficRouting: required"},
		// The gate takes a danki/latency config; pkg/analysis' validation
		// error comes back under the plugin's field.
		{"invalid gate", nil, `{"virtualService": {"name": "reviews"}, "gate": {"p99": "250ms"}}`, `plugins["danki/istio"].gate: danki/latency config: p99: unknown field`},
		{"missing virtual service object", nil, `{"virtualService": {"name": "nope"}}`, "VirtualService shop/nope not found"},
	}
	f := newTRFixture(t, hostVS())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ro := trRollout(c.config)
			if c.mutate != nil {
				c.mutate(ro)
			}
			err := f.plugin.SetWeight(ro, 20, nil)
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "danki/istio SetWeight: rollout shop/reviews") {
				t.Fatalf("SetWeight error %q, want it to name %q", err, c.want)
			}
			if v, err := f.plugin.VerifyWeight(ro, 20, nil); v != types.NotVerified || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("VerifyWeight = %v %q", v, err)
			}
		})
	}
	if w := weights(f.vs(t), 1); !slices.Equal(w, []int32{100, 0}) {
		t.Fatalf("a refused call changed weights: %v", w)
	}
}

func TestRPCNotInitialised(t *testing.T) {
	r := newTrafficRouter(slog.New(slog.DiscardHandler), policy.Local())
	if err := r.SetWeight(trRollout(hostConfig), 10, nil); !strings.Contains(err.Error(), "not initialised") {
		t.Fatalf("SetWeight before InitPlugin: %q", err)
	}
	r.newClients = func() (routerClients, error) { return routerClients{}, fmt.Errorf("no kubeconfig") }
	if err := r.InitPlugin(); !strings.Contains(err.Error(), "no kubeconfig") {
		t.Fatalf("InitPlugin error %q", err)
	}
}

// TestRPCConcurrentRollouts calls the plugin from many goroutines at once
// for two rollouts (as the controller's workers do); run with -race.
func TestRPCConcurrentRollouts(t *testing.T) {
	other := hostVS()
	other.Name = "ratings"
	f := newTRFixture(t, hostVS(), other)
	roA := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 100, "interval": "1s"}}`)
	roB := trRollout(`{"virtualService": {"name": "ratings", "routes": ["primary"]}, "ramp": {"step": 100, "interval": "1s"}}`)
	roB.Name = "ratings"
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ro, w := roA, int32(30)
			if i%2 == 1 {
				ro, w = roB, 70
			}
			for range 5 {
				if err := f.plugin.SetWeight(ro, w, nil); err.HasError() {
					t.Errorf("SetWeight: %v", err)
				}
				if _, err := f.plugin.VerifyWeight(ro, w, nil); err.HasError() {
					t.Errorf("VerifyWeight: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if w := weights(f.vs(t), 1); !slices.Equal(w, []int32{70, 30}) {
		t.Fatalf("reviews weights %v", w)
	}
	got, _ := f.istio.NetworkingV1().VirtualServices(trNS).Get(context.Background(), "ratings", metav1.GetOptions{})
	if w := weights(got, 1); !slices.Equal(w, []int32{30, 70}) {
		t.Fatalf("ratings weights %v", w)
	}
}

// The gate (and with it its cumulative window) starts at the first real
// target, not while the canary sits at 0 during the warm-up: before that the
// canary Service's metrics may still hold the previous canary's requests.
func TestRPCGateStartsAtTheFirstTarget(t *testing.T) {
	f := newTRFixture(t, hostVS())
	built := 0
	f.impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) {
		built++
		return gateFunc(func(context.Context) (bool, string, error) { return true, "ok", nil }), nil
	}
	ro := trRollout(`{"virtualService": {"name": "reviews"}, "ramp": {"step": 10, "interval": "1s"}, "gate": {}}`)
	for range 3 {
		mustOK(t, "SetWeight(0)", f.plugin.SetWeight(ro, 0, nil))
		if _, err := f.plugin.VerifyWeight(ro, 0, nil); err.HasError() {
			t.Fatal(err)
		}
	}
	if built != 0 {
		t.Fatalf("gate built %d times at weight 0, want none before the first target", built)
	}
	mustOK(t, "SetWeight(20)", f.plugin.SetWeight(ro, 20, nil))
	if built != 1 {
		t.Fatalf("gate built %d times at the first target, want 1", built)
	}
}

// TestRPCAbortWhateverTheRampAnnotationHolds: a corrupt danki.dev/ramp
// annotation made SetWeight(0) fail, and the canary kept its weight.
func TestRPCAbortWhateverTheRampAnnotationHolds(t *testing.T) {
	f := newTRFixture(t, hostVS())
	ro := trRollout(hostConfig)
	for range 3 {
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil))
		f.clock.Add(30 * time.Second)
	}
	vs := f.vs(t)
	vs.Annotations[wellknown.RampAnnotation] = `{"target": 60, "weight":` // cut off mid-write
	if _, err := f.istio.NetworkingV1().VirtualServices(trNS).Update(context.Background(), vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Toward a real weight the step stays unverified (never an error: at the
	// end of the steps Argo would promote on one).
	if v, err := f.plugin.VerifyWeight(ro, 60, nil); err.HasError() || v != types.NotVerified {
		t.Fatalf("VerifyWeight(60) with a corrupt ramp annotation = %v %q, want NotVerified, no error", v, err.Error())
	}
	mustOK(t, "SetWeight(0) with a corrupt ramp annotation", f.plugin.SetWeight(ro, 0, nil))
	vs = f.vs(t)
	if w := weights(vs, 1); !slices.Equal(w, []int32{100, 0}) {
		t.Fatalf("after the abort weights %v, want [100 0]", w)
	}
	if raw, ok := vs.Annotations[wellknown.RampAnnotation]; ok {
		t.Fatalf("the abort left the ramp annotation %q", raw)
	}
	if v, err := f.plugin.VerifyWeight(ro, 0, nil); err.HasError() || v != types.Verified {
		t.Fatalf("VerifyWeight(0) = %v %v", v, err)
	}
}

// sinceGate records the window starts it is asked about.
type sinceGate struct {
	mu     sync.Mutex
	sinces []time.Time
	answer func() (bool, string, error)
}

func (g *sinceGate) Check(_ context.Context, since time.Time) (bool, string, error) {
	g.mu.Lock()
	g.sinces = append(g.sinces, since)
	g.mu.Unlock()
	return g.answer()
}

func eventsWith(t *testing.T, f *trFixture, reason string) []corev1.Event {
	t.Helper()
	list, err := f.kube.CoreV1().Events(trNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// TestRPCNoVerdictIsBoundedAndShown: with Prometheus down the ramp holds at
// most maxHold (never raising the canary), records rate-limited Warning
// events naming the outage, then goes back to the last good weight; once
// the gate answers again the ramp goes on.
func TestRPCNoVerdictIsBoundedAndShown(t *testing.T) {
	f := newTRFixture(t, hostVS())
	down := true
	gate := &sinceGate{answer: func() (bool, string, error) {
		if down {
			return false, "", fmt.Errorf(`latency analysis failed to measure: Post "http://127.0.0.1:9090/api/v1/query": connection refused`)
		}
		return true, "p99 12ms ≤ 500ms", nil
	}}
	f.impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) { return gate, nil }
	ro := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 10, "interval": "10s", "maxHold": "1m"}, "gate": {}}`)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil)) // 0 → 10, 0 known good
	start := f.clock.Now()
	for f.clock.Now().Sub(start) < 50*time.Second {
		f.clock.Add(10 * time.Second)
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
		if w := weights(f.vs(t), 1); w[1] != 10 {
			t.Fatalf("canary at %d%% without a gate verdict, want held at 10", w[1])
		}
	}
	ev := eventsWith(t, f, shift.GateNoVerdictReason)
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || !strings.Contains(ev[0].Message, "connection refused") || !strings.Contains(ev[0].Message, "holding 10%") {
		t.Fatalf("events while holding %+v: want one (rate-limited) Warning naming the outage", ev)
	}
	f.clock.Add(20 * time.Second) // maxHold since the first answer without a verdict
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
	if w := weights(f.vs(t), 1); w[1] != 0 {
		t.Fatalf("after maxHold the canary is at %d%%, want back at the last good 0", w[1])
	}
	ev = eventsWith(t, f, shift.GateNoVerdictReason)
	if len(ev) != 2 || !strings.Contains(ev[1].Message, "gate breach 1/3 at 10%: no verdict for 1m0s (maxHold 1m0s)") {
		t.Fatalf("events after maxHold %+v: want the back-off named", ev)
	}
	// Still down: the weight stays at the last good weight.
	for range 3 {
		f.clock.Add(10 * time.Second)
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
		if w := weights(f.vs(t), 1); w[1] != 0 {
			t.Fatalf("canary at %d%% while the gate is still down", w[1])
		}
	}
	if v, err := f.plugin.VerifyWeight(ro, 20, nil); err.HasError() || v != types.NotVerified {
		t.Fatalf("VerifyWeight while holding = %v %v", v, err)
	}
	// Prometheus is back: the ramp goes on to the target.
	down = false
	for range 10 {
		f.clock.Add(10 * time.Second)
		mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
		if v, _ := f.plugin.VerifyWeight(ro, 20, nil); v == types.Verified {
			return
		}
	}
	t.Fatalf("the ramp did not reach 20%% once the gate answered; weights %v", weights(f.vs(t), 1))
}

// TestRPCInconsistentRampStateRestartsWithAnEvent: a parseable state that
// breaks its invariants restarts the ramp from the current weight, and the
// Rollout gets an event saying so.
func TestRPCInconsistentRampStateRestartsWithAnEvent(t *testing.T) {
	vs := trVirtualService(trDest("reviews-stable", "", 80), trDest("reviews-canary", "", 20))
	vs.Annotations = map[string]string{wellknown.RampAnnotation: `{"target":60,"weight":20,"lastGood":50,"increment":10,"phase":"Ramping","lastChange":"2025-03-01T11:00:00Z"}`}
	f := newTRFixture(t, vs)
	f.impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) {
		return gateFunc(func(context.Context) (bool, string, error) { return false, "p99 900ms > 500ms", nil }), nil
	}
	ro := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 10, "interval": "30s"}, "gate": {}}`)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil))
	if w := weights(f.vs(t), 1); w[1] != 20 {
		t.Fatalf("canary at %d%%: a breach with lastGood 50 above the weight raised it; want 20", w[1])
	}
	ev := eventsWith(t, f, shift.RampStateResetReason)
	if len(ev) != 1 || !strings.Contains(ev[0].Message, "lastGood: 50 is not 0–weight (20)") || !strings.Contains(ev[0].Message, "restarted the ramp from the current weight 20%") {
		t.Fatalf("events %+v: want one naming the broken invariant and the restart", ev)
	}
}

// TestRPCGateWindowSurvivesAPluginRestart: the gate's cumulative window
// starts at the canary's first move and a restarted plugin judges the same
// window (it used to start over in the new process's memory).
func TestRPCGateWindowSurvivesAPluginRestart(t *testing.T) {
	f := newTRFixture(t, hostVS())
	gate := &sinceGate{answer: func() (bool, string, error) { return true, "ok", nil }}
	f.impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) { return gate, nil }
	ro := trRollout(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 10, "interval": "10s"}, "gate": {}}`)
	ro.Status.CurrentPodHash = "c4n4ry"
	first := f.clock.Now()
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 40, nil)) // 0 → 10: the window starts
	f.clock.Add(10 * time.Second)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 40, nil)) // gate at 10

	g := newTRFixture(t) // the controller restarted the plugin
	g.clock = f.clock
	g.impl.router.Now = f.clock.Now
	g.istio = f.istio
	g.impl.newClients = f.clients
	g.impl.router.GateFor = f.impl.router.GateFor
	mustOK(t, "InitPlugin", g.plugin.InitPlugin())
	f.clock.Add(10 * time.Second)
	mustOK(t, "SetWeight after the restart", g.plugin.SetWeight(ro, 40, nil)) // gate at 20
	if len(gate.sinces) != 2 {
		t.Fatalf("gate asked %d times, want 2", len(gate.sinces))
	}
	for i, since := range gate.sinces {
		if !since.Equal(first) {
			t.Fatalf("check %d judged the window from %s, want %s (the canary's first move), restart or not", i, since, first)
		}
	}
}

// TestRPCTenantGateHeldToThePolicy: a Rollout's gate is a tenant's
// danki/latency config. Its prometheus.address must be one the operator
// allows, it names no controller file, and its bearerTokenSecret is read
// from the Rollout's namespace.
func TestRPCTenantGateHeldToThePolicy(t *testing.T) {
	evil, allowed := latencyProm(t), latencyProm(t)
	token := controllerToken(t)
	gate := func(address, extra string) string {
		return `{"virtualService": {"name": "reviews"}, "ramp": {"step": 20, "interval": "1s"}, "gate": {"source": "istio",
		  "prometheus": {"address": "` + address + `"` + extra + `},
		  "istio": {"canary": {"service": "app-canary.default.svc.cluster.local"}, "stable": {"service": "app-stable.default.svc.cluster.local"}},
		  "slo": {"p99": "250ms"}, "minSamples": 1}}`
	}
	pol := policy.Policy{Prometheus: []policy.Prometheus{{Address: allowed.URL}}}
	for _, tc := range []struct{ name, config, want string }{
		{"foreign address", gate(evil.URL, ""), "gate: prometheus.address"},
		{"controller's token file", gate(allowed.URL, `, "bearerTokenFile": "`+token+`"`), "gate: prometheus.bearerTokenFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTRFixtureWith(t, pol, hostVS())
			ro := trRollout(tc.config)
			err := f.plugin.SetWeight(ro, 20, nil)
			if !err.HasError() || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetWeight = %q, want an error naming %s", err.Error(), tc.want)
			}
			if w := weights(f.vs(t), 1); w[1] != 0 {
				t.Errorf("canary at %d, want 0: nothing moves without a gate the operator allows", w[1])
			}
		})
	}
	if n := len(evil.Queries()); n != 0 {
		t.Fatalf("the foreign Prometheus got %d queries (Authorization %q)", n, evil.Authorizations())
	}

	// The allowed address with the Rollout's own Secret: the gate passes
	// and the token is the shop namespace's.
	f := newTRFixtureWith(t, pol, hostVS())
	for _, ns := range []string{trNS, "kube-system"} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom", Namespace: ns}, Data: map[string][]byte{"token": []byte(ns + "-token")}}
		if _, err := f.kube.CoreV1().Secrets(ns).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ro := trRollout(gate(allowed.URL, `, "bearerTokenSecret": {"name": "prom", "key": "token"}`))
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // 0 → 20
	f.clock.Add(time.Second)
	mustOK(t, "SetWeight", f.plugin.SetWeight(ro, 60, nil)) // gate checked at 20
	auth := allowed.Authorizations()
	if len(auth) == 0 {
		t.Fatal("the gate queried nothing")
	}
	for _, a := range auth {
		if a != "Bearer shop-token" {
			t.Fatalf("Authorization %q, want the Rollout namespace's Secret", a)
		}
	}
}

// TestRouterRefusesAnotherNamespacesVirtualService: a Rollout names
// another team's VirtualService (the same short host names resolve there):
// refused over RPC, the other VirtualService untouched — unless the
// operator allows that namespace.
func TestRouterRefusesAnotherNamespacesVirtualService(t *testing.T) {
	foreign := hostVS()
	foreign.Namespace = "payments"
	cfg := `{"virtualService": {"name": "reviews", "namespace": "payments"}}`

	f := newTRFixture(t, foreign)
	err := f.plugin.SetWeight(trRollout(cfg), 20, nil)
	if !err.HasError() || !strings.Contains(err.Error(), "virtualService.namespace") || !strings.Contains(err.Error(), "--allow-virtualservice-namespace") {
		t.Fatalf("SetWeight = %v, want a refusal naming virtualService.namespace and the operator's flag", err)
	}
	vs, gerr := f.istio.NetworkingV1().VirtualServices("payments").Get(context.Background(), "reviews", metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	if w := vs.Spec.Http[1].Route[1].Weight; w != 0 {
		t.Errorf("the other namespace's canary weight = %d, want 0 (untouched)", w)
	}

	allowed := newTRFixtureWith(t, policy.Policy{VirtualServiceNamespaces: []string{"payments"}}, foreign.DeepCopy())
	mustOK(t, "SetWeight with the namespace allowed", allowed.plugin.SetWeight(trRollout(cfg), 20, nil))
}
