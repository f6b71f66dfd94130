package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	goplugin "github.com/hashicorp/go-plugin"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TrafficRouterName is the plugin name Rollouts refer to under
// spec.strategy.canary.trafficRouting.plugins.
const TrafficRouterName = "danki/istio"

func init() {
	register(KindTrafficRouter, "RpcTrafficRouterPlugin", func(l *slog.Logger, pol policy.Policy, m *metrics.Plugin) goplugin.Plugin {
		return &rpc.RpcTrafficRouterPlugin{Impl: newTrafficRouter(l, pol).observe(m)}
	})
}

// trafficRouter is the danki/istio traffic-router plugin: an adapter from
// Argo's RPC calls to shift.Router, which holds the logic (and no ramp
// state in memory: that lives on the VirtualService).
type trafficRouter struct {
	log *slog.Logger
	// policy is the operator's (the plugin's args): what a tenant's gate
	// config may ask for.
	policy policy.Policy
	// newClients builds the clients in InitPlugin; tests replace it.
	newClients func() (routerClients, error)
	router     *shift.Router
	clients    atomic.Pointer[routerClients] // set by InitPlugin
	// metrics records the ramps' decisions and the gates' queries (nil:
	// none; observe).
	metrics *metrics.Plugin
}

// observe records the ramps and their gates' Prometheus queries in m (nil:
// not recorded). Call it before the first call.
func (r *trafficRouter) observe(m *metrics.Plugin) *trafficRouter {
	if m != nil {
		r.metrics, r.router.Observer = m, m
	}
	return r
}

var _ rpc.TrafficRouterPlugin = (*trafficRouter)(nil)

func newTrafficRouter(l *slog.Logger, pol policy.Policy) *trafficRouter {
	r := &trafficRouter{log: l, policy: pol, newClients: clientsFromEnvironment, router: shift.NewRouter(TrafficRouterName, l)}
	r.router.GateFor = r.gateFor
	return r
}

// gateFor builds a rollout's gate (its config's "gate", a danki/latency
// config) held to the operator's policy: shift.GateFromConfig builds it
// under the strictest one, which allows no Prometheus. Its
// prometheus.bearerTokenSecret is read from the Rollout's namespace, which
// every call's context carries (call).
func (r *trafficRouter) gateFor(raw json.RawMessage) (shift.Gate, error) {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil, nil // no gate: the ramp moves on time alone
	}
	cfg, err := analysis.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	opts := []analysis.Option{analysis.WithLogger(r.log), analysis.WithPolicy(r.policy), analysis.WithKube(r.kube)}
	if r.metrics != nil {
		opts = append(opts, analysis.WithQueryObserver(r.metrics))
	}
	g, err := shift.NewLatencyGate(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// kube is the core Kubernetes client of InitPlugin.
func (r *trafficRouter) kube() (kubernetes.Interface, error) {
	c := r.clients.Load()
	if c == nil || c.kube == nil {
		return nil, fmt.Errorf("%s: plugin not initialised (InitPlugin was not called or failed)", TrafficRouterName)
	}
	return c.kube, nil
}

// routerClients are what danki/istio talks to: Istio for the
// VirtualService (and DestinationRule), Argo and core Kubernetes to abort a
// rollout whose ramp failed and say why in an event.
type routerClients struct {
	istio istioclient.Interface
	argo  argoclient.Interface
	kube  kubernetes.Interface
}

// clientsFromEnvironment loads the client configuration the way kubectl does:
// $KUBECONFIG or ~/.kube/config, else the in-cluster service account.
func clientsFromEnvironment() (routerClients, error) {
	var c routerClients
	cfg, err := restConfigFromEnvironment()
	if err != nil {
		return c, fmt.Errorf("load Kubernetes client configuration (in-cluster, $KUBECONFIG or ~/.kube/config): %w", err)
	}
	if c.istio, err = istioclient.NewForConfig(cfg); err != nil {
		return c, err
	}
	if c.argo, err = argoclient.NewForConfig(cfg); err != nil {
		return c, err
	}
	c.kube, err = kubernetes.NewForConfig(cfg)
	return c, err
}

// InitPlugin builds the clients. The controller calls it once, at start.
func (r *trafficRouter) InitPlugin() types.RpcError {
	clients, err := r.newClients()
	if err != nil {
		return rpcErr(fmt.Errorf("%s: init: %w", TrafficRouterName, err))
	}
	r.router.Use(shift.New(clients.istio, r.log))
	r.clients.Store(&clients)
	r.log.Info("traffic router ready", "plugin", TrafficRouterName)
	return types.RpcError{}
}

func (r *trafficRouter) Type() string { return TrafficRouterName }

const configField = `spec.strategy.canary.trafficRouting.plugins["` + TrafficRouterName + `"]`

// bind reads the plugin configuration and the service names from a
// Rollout, within the operator's policy (which namespaces besides the
// Rollout's may hold its VirtualService). Every error names the Rollout
// field to fix.
func bind(ro *v1alpha1.Rollout, pol policy.Policy) (shift.Binding, error) {
	canary := ro.Spec.Strategy.Canary
	if canary == nil || canary.TrafficRouting == nil {
		return shift.Binding{}, fmt.Errorf("spec.strategy.canary.trafficRouting: required: %s routes traffic for canary rollouts", TrafficRouterName)
	}
	tr := canary.TrafficRouting
	if tr.MaxTrafficWeight != nil && *tr.MaxTrafficWeight != 100 {
		return shift.Binding{}, fmt.Errorf("spec.strategy.canary.trafficRouting.maxTrafficWeight: %d: %s needs 100 (Istio weights are percent): remove the field", *tr.MaxTrafficWeight, TrafficRouterName)
	}
	scope := shift.Scope{Namespace: ro.Namespace, StableHost: canary.StableService, CanaryHost: canary.CanaryService,
		ConfigField: configField, HostsField: "spec.strategy.canary.stableService and canaryService",
		OtherNamespaces: pol.VirtualServiceNamespaces}
	for _, m := range tr.ManagedRoutes {
		scope.ManagedRoutes = append(scope.ManagedRoutes, m.Name)
	}
	return shift.Bind(tr.Plugins[TrafficRouterName], scope)
}

// call binds the Rollout and runs fn on the router for it.
func (r *trafficRouter) call(op string, ro *v1alpha1.Rollout, fn func(ctx context.Context, rt shift.Rollout) error) types.RpcError {
	log := r.log.With("rollout", ro.Namespace+"/"+ro.Name, "op", op)
	c := r.clients.Load()
	if c == nil {
		return rpcErr(fmt.Errorf("%s %s: plugin not initialised (InitPlugin was not called or failed)", TrafficRouterName, op))
	}
	b, err := bind(ro, r.policy)
	if err == nil {
		on := &rolloutActions{ro: ro, clients: c}
		// The gate reads its prometheus.bearerTokenSecret from the
		// Rollout's own namespace, never another.
		ctx := analysis.ForNamespace(context.Background(), ro.Namespace)
		err = fn(ctx, shift.Rollout{Key: ro.Namespace + "/" + ro.Name, Canary: ro.Status.CurrentPodHash,
			Aborted: ro.Status.Abort, Binding: b, Events: on, Aborter: on})
	}
	if err != nil {
		log.Error(op+" failed", "err", err)
		return rpcErr(fmt.Errorf("%s %s: rollout %s/%s: %w", TrafficRouterName, op, ro.Namespace, ro.Name, err))
	}
	return types.RpcError{}
}

func extras(b shift.Binding, dests []v1alpha1.WeightDestination) []shift.Extra {
	var out []shift.Extra
	for _, d := range dests {
		out = append(out, b.Extra(d.ServiceName, int(d.Weight)))
	}
	return out
}

// SetWeight starts or continues the ramp toward desiredWeight (one move per
// call at most); weight 0 is set at once.
func (r *trafficRouter) SetWeight(ro *v1alpha1.Rollout, desiredWeight int32, additional []v1alpha1.WeightDestination) types.RpcError {
	return r.call("SetWeight", ro, func(ctx context.Context, rt shift.Rollout) error {
		return r.router.SetWeight(ctx, rt, int(desiredWeight), extras(rt.Binding, additional)...)
	})
}

// VerifyWeight holds Argo's setWeight step (NotVerified) until the ramp has
// reached desiredWeight with the gate passing there. A failed ramp aborts
// the rollout and stays NotVerified, never an error (see
// shift.Router.VerifyWeight).
func (r *trafficRouter) VerifyWeight(ro *v1alpha1.Rollout, desiredWeight int32, additional []v1alpha1.WeightDestination) (types.RpcVerified, types.RpcError) {
	verified := types.NotVerified
	rerr := r.call("VerifyWeight", ro, func(ctx context.Context, rt shift.Rollout) error {
		ok, err := r.router.VerifyWeight(ctx, rt, int(desiredWeight), extras(rt.Binding, additional)...)
		if ok {
			verified = types.Verified
		}
		return err
	})
	return verified, rerr
}

// rolloutActions aborts a Rollout and records events on it for
// shift.Router.
type rolloutActions struct {
	ro      *v1alpha1.Rollout
	clients *routerClients
}

// Abort aborts the rollout the way `kubectl argo rollouts abort` does:
// status.abort through the status subresource.
func (a *rolloutActions) Abort(ctx context.Context) error {
	_, err := a.clients.argo.ArgoprojV1alpha1().Rollouts(a.ro.Namespace).Patch(ctx, a.ro.Name, k8stypes.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch status.abort; it needs patch on rollouts/status: %w", err)
	}
	return nil
}

// Warn records a Warning event on the Rollout, written at once: client-go's
// record.EventRecorder sends from a background queue that a plugin process
// stopped by the controller loses, and its spam filter (25 per object, then
// one per 5 minutes) would drop the abort's event after a few hold events.
func (a *rolloutActions) Warn(ctx context.Context, reason, msg string) error {
	ro, now := a.ro, metav1.Now()
	ev := &corev1.Event{
		// Named like client-go's event recorder names them (unique per call).
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ro.Name, now.UnixNano()), Namespace: ro.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Rollout", APIVersion: v1alpha1.SchemeGroupVersion.String(),
			Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, ResourceVersion: ro.ResourceVersion},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: TrafficRouterName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := a.clients.kube.CoreV1().Events(ro.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the event (needs create on events): %w", err)
	}
	return nil
}

// UpdateHash keeps the DestinationRule subsets' rollouts-pod-template-hash
// labels in step with the ReplicaSets (subset-level routing only).
func (r *trafficRouter) UpdateHash(ro *v1alpha1.Rollout, canaryHash, stableHash string, additional []v1alpha1.WeightDestination) types.RpcError {
	return r.call("UpdateHash", ro, func(ctx context.Context, rt shift.Rollout) error {
		var subsets []shift.ExtraSubset
		for _, d := range additional {
			subsets = append(subsets, shift.ExtraSubset{Name: d.ServiceName, Hash: d.PodTemplateHash})
		}
		return r.router.UpdateHashes(ctx, rt, canaryHash, stableHash, subsets...)
	})
}

// SetHeaderRoute adds, replaces or (with no match) removes a header route.
func (r *trafficRouter) SetHeaderRoute(ro *v1alpha1.Rollout, hr *v1alpha1.SetHeaderRoute) types.RpcError {
	return r.call("SetHeaderRoute", ro, func(ctx context.Context, rt shift.Rollout) error {
		route := shift.HeaderRoute{Name: hr.Name}
		for i, m := range hr.Match {
			if m.HeaderValue == nil {
				return fmt.Errorf("setHeaderRoute %q match[%d].headerValue: required", hr.Name, i)
			}
			route.Match = append(route.Match, shift.HeaderMatch{Header: m.HeaderName, Value: stringMatch(*m.HeaderValue)})
		}
		return r.router.SetHeaderRoute(ctx, rt, route)
	})
}

// SetMirrorRoute adds, replaces or (with no match) removes a mirror route.
func (r *trafficRouter) SetMirrorRoute(ro *v1alpha1.Rollout, mr *v1alpha1.SetMirrorRoute) types.RpcError {
	return r.call("SetMirrorRoute", ro, func(ctx context.Context, rt shift.Rollout) error {
		route := shift.MirrorRoute{Name: mr.Name}
		if mr.Percentage != nil {
			p := int(*mr.Percentage)
			route.Percentage = &p
		}
		for _, m := range mr.Match {
			rm := shift.RequestMatch{}
			if m.Method != nil {
				v := stringMatch(*m.Method)
				rm.Method = &v
			}
			if m.Path != nil {
				v := stringMatch(*m.Path)
				rm.Path = &v
			}
			for h, v := range m.Headers {
				if rm.Headers == nil {
					rm.Headers = map[string]shift.StringMatch{}
				}
				rm.Headers[h] = stringMatch(v)
			}
			route.Match = append(route.Match, rm)
		}
		return r.router.SetMirrorRoute(ctx, rt, route)
	})
}

// RemoveManagedRoutes removes the header and mirror routes: every route in
// managedRoutes and every route a step of the rollout names.
func (r *trafficRouter) RemoveManagedRoutes(ro *v1alpha1.Rollout) types.RpcError {
	return r.call("RemoveManagedRoutes", ro, func(ctx context.Context, rt shift.Rollout) error {
		var also []string
		for _, step := range ro.Spec.Strategy.Canary.Steps {
			if step.SetHeaderRoute != nil && step.SetHeaderRoute.Name != "" {
				also = append(also, step.SetHeaderRoute.Name)
			}
			if step.SetMirrorRoute != nil && step.SetMirrorRoute.Name != "" {
				also = append(also, step.SetMirrorRoute.Name)
			}
		}
		return r.router.RemoveManagedRoutes(ctx, rt, also...)
	})
}

func stringMatch(m v1alpha1.StringMatch) shift.StringMatch {
	return shift.StringMatch{Exact: m.Exact, Prefix: m.Prefix, Regex: m.Regex}
}

func rpcErr(err error) types.RpcError { return types.RpcError{ErrorString: err.Error()} }
