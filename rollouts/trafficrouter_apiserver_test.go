package rollouts

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
	goplugin "github.com/hashicorp/go-plugin"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// exampleObjects reads a multi-document example manifest and creates every
// object through the real API server (so the examples must pass the Argo
// Rollouts and Istio CRD schemas), returning the Rollout as stored.
//
// With a namespace, every object goes there instead of the example's own.
func exampleObjects(t *testing.T, e *testenv.Env, file string, namespace ...string) *v1alpha1.Rollout {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "examples", "istio-router", file))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ro *v1alpha1.Rollout
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch meta.Kind {
		case "Rollout":
			var obj v1alpha1.Rollout
			mustUnmarshal(t, doc, &obj)
			if len(namespace) > 0 {
				obj.Namespace = namespace[0]
			}
			ensureNamespace(t, e, obj.Namespace)
			if ro, err = e.Argo.ArgoprojV1alpha1().Rollouts(obj.Namespace).Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: the API server refused the Rollout: %v", file, err)
			}
		case "Service":
			var obj corev1.Service
			mustUnmarshal(t, doc, &obj)
			if len(namespace) > 0 {
				obj.Namespace = namespace[0]
			}
			ensureNamespace(t, e, obj.Namespace)
			if _, err := e.Kube.CoreV1().Services(obj.Namespace).Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: Service %s: %v", file, obj.Name, err)
			}
		case "VirtualService":
			var obj networkingv1.VirtualService
			mustUnmarshal(t, doc, &obj)
			if len(namespace) > 0 {
				obj.Namespace = namespace[0]
			}
			ensureNamespace(t, e, obj.Namespace)
			if _, err := e.Istio.NetworkingV1().VirtualServices(obj.Namespace).Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: VirtualService %s: %v", file, obj.Name, err)
			}
		case "DestinationRule":
			var obj networkingv1.DestinationRule
			mustUnmarshal(t, doc, &obj)
			if len(namespace) > 0 {
				obj.Namespace = namespace[0]
			}
			ensureNamespace(t, e, obj.Namespace)
			if _, err := e.Istio.NetworkingV1().DestinationRules(obj.Namespace).Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: DestinationRule %s: %v", file, obj.Name, err)
			}
		default:
			t.Fatalf("%s: unexpected kind %q", file, meta.Kind)
		}
	}
	if ro == nil {
		t.Fatalf("%s: no Rollout", file)
	}
	return ro
}

func mustUnmarshal(t *testing.T, doc []byte, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("example does not decode strictly into %T: %v", obj, err)
	}
}

func ensureNamespace(t *testing.T, e *testenv.Env, name string) {
	t.Helper()
	_, err := e.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !bytes.Contains([]byte(err.Error()), []byte("already exists")) {
		t.Fatal(err)
	}
}

// rpcAgainst serves a fresh adapter (as after a controller restart) over
// go-plugin RPC against the real API server.
func rpcAgainst(t *testing.T, e *testenv.Env, clock *trClock, gate ...shift.Gate) rpc.TrafficRouterPlugin {
	t.Helper()
	impl := newTrafficRouter(slog.New(slog.DiscardHandler), policy.Local())
	impl.newClients = func() (routerClients, error) { return routerClients{istio: e.Istio, argo: e.Argo, kube: e.Kube}, nil }
	impl.router.Now = clock.Now
	if len(gate) > 0 {
		impl.router.GateFor = func(json.RawMessage) (shift.Gate, error) { return gate[0], nil }
	}
	c, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{"RpcTrafficRouterPlugin": &rpc.RpcTrafficRouterPlugin{Impl: impl}}, nil)
	t.Cleanup(func() { _ = c.Close() })
	raw, err := c.Dispense("RpcTrafficRouterPlugin")
	if err != nil {
		t.Fatal(err)
	}
	p := raw.(rpc.TrafficRouterPlugin)
	mustOK(t, "InitPlugin", p.InitPlugin())
	return p
}

// driveStep calls SetWeight and VerifyWeight like the controller until the
// step verifies, a fresh plugin each reconcile, the clock advancing a
// minute; it returns the canary weights seen.
func driveStep(t *testing.T, e *testenv.Env, clock *trClock, ro *v1alpha1.Rollout, weight int32, canary func() int32) []int32 {
	t.Helper()
	var seen []int32
	for range 40 {
		p := rpcAgainst(t, e, clock)
		mustOK(t, "SetWeight", p.SetWeight(ro, weight, nil))
		v, err := p.VerifyWeight(ro, weight, nil)
		mustOK(t, "VerifyWeight", err)
		if w := canary(); len(seen) == 0 || seen[len(seen)-1] != w {
			seen = append(seen, w)
		}
		if v == types.Verified {
			return seen
		}
		clock.Add(time.Minute)
	}
	t.Fatalf("setWeight %d never verified; weights seen %v", weight, seen)
	return nil
}

// TestAPIServerExampleRollouts drives the plugin, over go-plugin RPC, on the
// objects of examples/istio-router against a real API server with the real
// CRDs, as the controller would through the example's steps.
func TestAPIServerExampleRollouts(t *testing.T) {
	e := testenv.Start(t) // one API server for both: a start costs seconds
	t.Run("host-level", func(t *testing.T) { exampleHostLevel(t, e) })
	t.Run("subset-level", func(t *testing.T) { exampleSubsetLevel(t, e) })
	t.Run("failed-ramp-aborts", func(t *testing.T) { exampleFailedRampAborts(t, e) })
}

// exampleFailedRampAborts: a gate that keeps failing makes the ramp back off
// and, after maxBreaches, VerifyWeight aborts the Rollout through the status
// subresource of the real API server, with an error naming the breach.
func exampleFailedRampAborts(t *testing.T, e *testenv.Env) {
	ro := exampleObjects(t, e, "rollout.yaml", "shop-failing")
	clock := &trClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	breach := gateFunc(func(context.Context) (bool, string, error) { return false, "p99 canary 412ms > 250ms", nil })
	for i := 0; i < 20; i++ {
		p := rpcAgainst(t, e, clock, breach)
		mustOK(t, "SetWeight", p.SetWeight(ro, 20, nil))
		v, err := p.VerifyWeight(ro, 20, nil)
		mustOK(t, "VerifyWeight", err)
		if v == types.Verified {
			t.Fatal("setWeight 20 verified under a gate that always fails")
		}
		clock.Add(time.Minute)
	}
	got, err := e.Argo.ArgoprojV1alpha1().Rollouts(ro.Namespace).Get(context.Background(), ro.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Status.Abort {
		t.Fatalf("Rollout %s/%s status.abort = false after the ramp failed", ro.Namespace, ro.Name)
	}
	events, err := e.Kube.CoreV1().Events(ro.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + shift.RampFailedReason})
	if err != nil {
		t.Fatal(err)
	}
	// ro is the stale copy (status.abort false), as a controller that has
	// not yet seen the abort would pass it: one event per failed call.
	if len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "p99 canary 412ms > 250ms") || events.Items[0].InvolvedObject.UID != ro.UID {
		t.Fatalf("events %+v: want %s events on the Rollout naming the breach", events.Items, shift.RampFailedReason)
	}
	// The controller then calls SetWeight(0): every user back on stable.
	ro.Status.Abort = true
	p := rpcAgainst(t, e, clock, breach)
	mustOK(t, "SetWeight(0)", p.SetWeight(ro, 0, nil))
	vs, err := e.Istio.NetworkingV1().VirtualServices(ro.Namespace).Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := vs.Spec.Http[1].Route[1].Weight; w != 0 {
		t.Fatalf("canary weight %d after the abort, want 0", w)
	}
}

func exampleHostLevel(t *testing.T, e *testenv.Env) {
	ro := exampleObjects(t, e, "rollout.yaml")
	clock := &trClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	vs := func() *networkingv1.VirtualService {
		v, err := e.Istio.NetworkingV1().VirtualServices("shop").Get(context.Background(), "reviews", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	primary := func() int32 {
		v := vs()
		i := slices.IndexFunc(v.Spec.Http, func(r *networking.HTTPRoute) bool { return r.Name == "primary" })
		return v.Spec.Http[i].Route[1].Weight
	}
	// Step 0: the header route, through the plugin as the controller calls it.
	p := rpcAgainst(t, e, clock)
	mustOK(t, "SetHeaderRoute", p.SetHeaderRoute(ro, ro.Spec.Strategy.Canary.Steps[0].SetHeaderRoute))
	if names := routeNames(vs()); !slices.Equal(names, []string{"health", "canary-by-header", "primary"}) {
		t.Fatalf("routes after setHeaderRoute: %v", names)
	}
	// setWeight 20, then 60: ramped 5 points a minute.
	if seen := driveStep(t, e, clock, ro, 20, primary); !slices.Equal(seen, []int32{5, 10, 15, 20}) {
		t.Fatalf("setWeight 20 ramp: %v", seen)
	}
	if seen := driveStep(t, e, clock, ro, 60, primary); len(seen) != 8 || seen[7] != 60 {
		t.Fatalf("setWeight 60 ramp: %v", seen)
	}
	// Abort: weight 0 at once, managed routes gone.
	p = rpcAgainst(t, e, clock)
	mustOK(t, "RemoveManagedRoutes", p.RemoveManagedRoutes(ro))
	mustOK(t, "SetWeight(0)", p.SetWeight(ro, 0, nil))
	got := vs()
	if names := routeNames(got); !slices.Equal(names, []string{"health", "primary"}) || primary() != 0 {
		t.Fatalf("after abort: routes %v canary %d", names, primary())
	}
	if _, ok := got.Annotations[wellknown.RampAnnotation]; ok {
		t.Fatal("abort left the ramp annotation")
	}
	if got.Spec.Http[1].Timeout.AsDuration() != 10*time.Second || got.Spec.Http[1].Retries.GetAttempts() != 2 {
		t.Fatalf("primary route's own fields changed: %v", got.Spec.Http[1])
	}
}

func exampleSubsetLevel(t *testing.T, e *testenv.Env) {
	ro := exampleObjects(t, e, "rollout-subsets.yaml")
	clock := &trClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	p := rpcAgainst(t, e, clock)
	mustOK(t, "UpdateHash", p.UpdateHash(ro, "c4n4ry", "st4ble", nil))
	dr, err := e.Istio.NetworkingV1().DestinationRules("shop").Get(context.Background(), "ratings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dr.Spec.Subsets[0].Labels[shift.PodTemplateHashLabel] != "st4ble" || dr.Spec.Subsets[1].Labels[shift.PodTemplateHashLabel] != "c4n4ry" || dr.Spec.Subsets[1].Labels["app"] != "ratings" {
		t.Fatalf("subsets %v", dr.Spec.Subsets)
	}
	canary := func() int32 {
		v, err := e.Istio.NetworkingV1().VirtualServices("shop").Get(context.Background(), "ratings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v.Spec.Http[0].Route[1].Weight
	}
	if seen := driveStep(t, e, clock, ro, 20, canary); !slices.Equal(seen, []int32{1, 5, 10, 20}) {
		t.Fatalf("setWeight 20 on the ladder: %v", seen)
	}
}

func routeNames(vs *networkingv1.VirtualService) []string {
	var out []string
	for _, r := range vs.Spec.Http {
		out = append(out, r.Name)
	}
	return out
}
