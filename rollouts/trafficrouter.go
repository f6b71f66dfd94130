package rollouts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/danki-dev/danki/internal/config"
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
	register(KindTrafficRouter, "RpcTrafficRouterPlugin", func(l *slog.Logger) goplugin.Plugin {
		return &rpc.RpcTrafficRouterPlugin{Impl: newTrafficRouter(l)}
	})
}

// callTimeout bounds one RPC call: the controller's calls have none and block
// a reconcile worker.
const callTimeout = 30 * time.Second

// trafficRouter is the danki/istio traffic-router plugin: an adapter from
// Argo's RPC calls to pkg/shift. It keeps no ramp state in memory (that
// lives on the VirtualService, the gate's window start included), only
// clients, gates and when it last recorded an event.
type trafficRouter struct {
	log *slog.Logger
	// newClients builds the clients in InitPlugin; tests replace it.
	newClients func() (routerClients, error)
	// now is the ramp's clock and gateFor builds gates; tests replace them.
	now     func() time.Time
	gateFor func(raw json.RawMessage) (shift.Gate, error)

	mu      sync.Mutex
	shifter *shift.Shifter
	clients routerClients
	vsLocks map[string]*sync.Mutex
	gates   map[string]shift.Gate
	// lastEvent rate-limits the events recorded while a ramp holds:
	// rollout and reason → when the last one was recorded.
	lastEvent map[string]time.Time
}

var _ rpc.TrafficRouterPlugin = (*trafficRouter)(nil)

func newTrafficRouter(l *slog.Logger) *trafficRouter {
	return &trafficRouter{
		log:        l,
		newClients: clientsFromEnvironment,
		now:        time.Now,
		gateFor:    gateFromConfig,
		vsLocks:    map[string]*sync.Mutex{},
		gates:      map[string]shift.Gate{},
		lastEvent:  map[string]time.Time{},
	}
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
	r.mu.Lock()
	r.shifter = shift.New(clients.istio, r.log)
	r.clients = clients
	r.mu.Unlock()
	r.log.Info("traffic router ready", "plugin", TrafficRouterName)
	return types.RpcError{}
}

func (r *trafficRouter) Type() string { return TrafficRouterName }

// routerConfig is the JSON under trafficRouting.plugins["danki/istio"],
// decoded strictly by config.Decode.
type routerConfig struct {
	VirtualService struct {
		Name      string                   `json:"name"`
		Namespace string                   `json:"namespace,omitempty"`
		Routes    []string                 `json:"routes,omitempty"`
		TLSRoutes []shift.TLSRouteSelector `json:"tlsRoutes,omitempty"`
		TCPRoutes []shift.TCPRouteSelector `json:"tcpRoutes,omitempty"`
	} `json:"virtualService"`
	DestinationRule *struct {
		Name             string `json:"name"`
		CanarySubsetName string `json:"canarySubsetName"`
		StableSubsetName string `json:"stableSubsetName"`
	} `json:"destinationRule,omitempty"`
	Ramp struct {
		Step        int              `json:"step,omitempty"`
		Weights     []int            `json:"weights,omitempty"`
		Interval    *config.Duration `json:"interval,omitempty"` // unset: shift.DefaultInterval; "0s" is valid
		MaxBreaches int              `json:"maxBreaches,omitempty"`
		MaxHold     config.Duration  `json:"maxHold,omitempty"`
	} `json:"ramp"`
	Gate json.RawMessage `json:"gate,omitempty"`
}

// plan is the ramp's shift.Plan as configured (zero fields: defaults).
func (c *routerConfig) plan() shift.Plan {
	p := shift.Plan{Step: c.Ramp.Step, Weights: c.Ramp.Weights, Interval: shift.DefaultInterval,
		MaxBreaches: c.Ramp.MaxBreaches, MaxHold: c.Ramp.MaxHold.D()}
	if c.Ramp.Interval != nil {
		p.Interval = c.Ramp.Interval.D()
	}
	return p
}

// binding is one rollout's resolved configuration.
type binding struct {
	key string // rollout namespace/name
	// canaryHash is the canary's pod-template hash: the gate's window start
	// kept in the ramp state belongs to one canary.
	canaryHash string
	target     shift.Target
	plan       shift.Plan
	gate       json.RawMessage
	subset     bool
}

const configField = `spec.strategy.canary.trafficRouting.plugins["` + TrafficRouterName + `"]`

// resolve reads the plugin configuration and the service names from a
// Rollout. Every error names the Rollout field to fix.
func resolve(ro *v1alpha1.Rollout) (*binding, error) {
	canary := ro.Spec.Strategy.Canary
	if canary == nil || canary.TrafficRouting == nil {
		return nil, errors.New("spec.strategy.canary.trafficRouting: required: danki/istio routes traffic for canary rollouts")
	}
	tr := canary.TrafficRouting
	if tr.MaxTrafficWeight != nil && *tr.MaxTrafficWeight != 100 {
		return nil, fmt.Errorf("spec.strategy.canary.trafficRouting.maxTrafficWeight: %d: danki/istio needs 100 (Istio weights are percent): remove the field", *tr.MaxTrafficWeight)
	}
	raw, ok := tr.Plugins[TrafficRouterName]
	if !ok || len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%s: missing: configure at least virtualService.name", configField)
	}
	var (
		cfg  routerConfig
		errs config.Errors
	)
	if err := config.Decode(raw, &cfg); err != nil {
		errs.Add(configField, err)
		return nil, errs.Err()
	}
	if cfg.VirtualService.Name == "" {
		errs.Addf(configField+".virtualService.name", "required")
	}
	t := shift.Target{
		Namespace:      cfg.VirtualService.Namespace,
		VirtualService: cfg.VirtualService.Name,
		HTTPRoutes:     cfg.VirtualService.Routes,
		TLSRoutes:      cfg.VirtualService.TLSRoutes,
		TCPRoutes:      cfg.VirtualService.TCPRoutes,
	}
	if t.Namespace == "" {
		t.Namespace = ro.Namespace
	}
	for _, m := range tr.ManagedRoutes {
		t.ManagedRoutes = append(t.ManagedRoutes, m.Name)
	}
	if dr := cfg.DestinationRule; dr != nil {
		if dr.Name == "" || dr.CanarySubsetName == "" || dr.StableSubsetName == "" {
			errs.Addf(configField+".destinationRule", "name, canarySubsetName and stableSubsetName are all required for subset-level routing (or drop destinationRule for host-level routing)")
		}
		t.Subsets = &shift.Subsets{DestinationRule: dr.Name, Namespace: ro.Namespace, StableSubset: dr.StableSubsetName, CanarySubset: dr.CanarySubsetName}
	} else {
		if canary.StableService == "" || canary.CanaryService == "" {
			errs.Addf("spec.strategy.canary.stableService and canaryService", "both required for host-level routing (or configure destinationRule for subset-level routing)")
		}
		t.StableHost, t.CanaryHost = canary.StableService, canary.CanaryService
	}
	plan := cfg.plan()
	errs.Add(configField+".ramp", plan.Validate())
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", configField, err)
	}
	return &binding{key: ro.Namespace + "/" + ro.Name, canaryHash: ro.Status.CurrentPodHash, target: t, plan: plan.WithDefaults(), gate: cfg.Gate, subset: t.Subsets != nil}, nil
}

// call resolves the rollout's binding and runs fn under the VirtualService's
// lock, with a bounded context. Calls for one VirtualService are serialised
// (the controller may call from several workers); different ones run in
// parallel.
func (r *trafficRouter) call(op string, ro *v1alpha1.Rollout, fn func(ctx context.Context, b *binding, s *shift.Shifter, log *slog.Logger) error) types.RpcError {
	log := r.log.With("rollout", ro.Namespace+"/"+ro.Name, "op", op)
	b, err := resolve(ro)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return rpcErr(fmt.Errorf("%s %s: rollout %s/%s: %w", TrafficRouterName, op, ro.Namespace, ro.Name, err))
	}
	r.mu.Lock()
	s := r.shifter
	lock, ok := r.vsLocks[b.target.String()]
	if !ok {
		lock = &sync.Mutex{}
		r.vsLocks[b.target.String()] = lock
	}
	r.mu.Unlock()
	if s == nil {
		return rpcErr(fmt.Errorf("%s %s: plugin not initialised (InitPlugin was not called or failed)", TrafficRouterName, op))
	}
	lock.Lock()
	defer lock.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := fn(ctx, b, s, log.With("virtualService", b.target.String())); err != nil {
		log.Error(op+" failed", "err", err)
		return rpcErr(fmt.Errorf("%s %s: rollout %s/%s: %w", TrafficRouterName, op, ro.Namespace, ro.Name, err))
	}
	return types.RpcError{}
}

// gate returns the rollout's latency gate, built once per configuration.
// It keeps no window: the ramp passes the window start kept in its state.
func (r *trafficRouter) gate(b *binding) (shift.Gate, error) {
	key := b.key + "\x00" + string(b.gate)
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.gates[key]; ok {
		return g, nil
	}
	g, err := r.gateFor(b.gate)
	if err != nil {
		return nil, fmt.Errorf("%s.gate: %w", configField, err)
	}
	for k := range r.gates { // one gate per rollout: drop the old configuration's
		if strings.HasPrefix(k, b.key+"\x00") {
			delete(r.gates, k)
		}
	}
	r.gates[key] = g
	return g, nil
}

// ramp returns the rollout's ramp toward target. Target 0 (before the first
// setWeight, e.g. while danki/warmup runs, or an abort) needs no gate. The
// gate's cumulative window starts at the first move of this canary toward a
// real target (kept in the ramp state as gateSince, with the canary's hash),
// so it never counts the previous canary's last requests, which share the
// canary Service's metrics, and it survives a plugin restart.
func (r *trafficRouter) ramp(b *binding, s *shift.Shifter, target int32) (*shift.Ramp, error) {
	var g shift.Gate
	if target > 0 {
		var err error
		if g, err = r.gate(b); err != nil {
			return nil, err
		}
	}
	return &shift.Ramp{Shifter: s, Target: b.target, Plan: b.plan, Gate: g, Canary: b.canaryHash, Now: r.now}, nil
}

func extras(b *binding, dests []v1alpha1.WeightDestination) []shift.Extra {
	var out []shift.Extra
	for _, d := range dests {
		e := shift.Extra{Host: d.ServiceName, Weight: int(d.Weight)}
		if b.subset {
			// Subset-level: an experiment's destination is a subset (named
			// after its service) of the DestinationRule's host, as UpdateHash
			// creates it.
			e = shift.Extra{Subset: d.ServiceName, Weight: int(d.Weight)}
		}
		out = append(out, e)
	}
	return out
}

// SetWeight starts or continues the ramp toward desiredWeight: at most one
// move per call, never blocking on the ramp's interval. Weight 0 (abort,
// or a finished rollout) is set at once.
func (r *trafficRouter) SetWeight(ro *v1alpha1.Rollout, desiredWeight int32, additional []v1alpha1.WeightDestination) types.RpcError {
	return r.call("SetWeight", ro, func(ctx context.Context, b *binding, s *shift.Shifter, log *slog.Logger) error {
		rmp, err := r.ramp(b, s, desiredWeight)
		if err != nil {
			return err
		}
		d, err := rmp.Tick(ctx, int(desiredWeight), extras(b, additional)...)
		if err != nil {
			return err
		}
		log.Debug("ramp step", "action", string(d.Action), "from", d.From, "weight", d.Weight, "target", desiredWeight, "reason", d.Reason)
		r.reportRamp(ctx, ro, d, log)
		return nil
	})
}

// Reasons of the Warning events danki/istio records on a Rollout.
const (
	// RampFailedReason: the gated ramp failed and danki aborted the rollout.
	RampFailedReason = "DankiRampFailed"
	// GateNoVerdictReason: the ramp holds (or went back to the last good
	// weight) because the gate has no verdict; the message names the cause.
	GateNoVerdictReason = "DankiGateNoVerdict"
	// RampStateResetReason: the ramp state on the VirtualService broke its
	// invariants; the ramp restarted from the current weight.
	RampStateResetReason = "DankiRampStateReset"
)

// holdEventInterval is the least time between two GateNoVerdict events of
// one rollout while it holds: Argo calls SetWeight every few seconds.
const holdEventInterval = time.Minute

// reportRamp records what users of `kubectl describe rollout` must see: a
// reset ramp state, and a hold for want of a gate verdict (rate-limited;
// the back-off after maxHold always).
func (r *trafficRouter) reportRamp(ctx context.Context, ro *v1alpha1.Rollout, d shift.Decision, log *slog.Logger) {
	if d.StateReset != nil {
		r.event(ctx, ro, RampStateResetReason, fmt.Sprintf("%s: %v", TrafficRouterName, d.StateReset), log)
	}
	if d.NoVerdict == nil {
		return
	}
	if d.Action == shift.ActionHold {
		key := ro.Namespace + "/" + ro.Name + "\x00" + GateNoVerdictReason
		now := r.now()
		r.mu.Lock()
		last, seen := r.lastEvent[key]
		due := !seen || now.Sub(last) >= holdEventInterval || now.Before(last)
		if due {
			r.lastEvent[key] = now
		}
		r.mu.Unlock()
		if !due {
			return
		}
	}
	r.event(ctx, ro, GateNoVerdictReason, fmt.Sprintf("%s: %s", TrafficRouterName, d.Reason), log)
}

// VerifyWeight holds Argo's setWeight step (NotVerified) until the ramp has
// reached desiredWeight with the gate passing there. A failed ramp (the gate
// breached maxBreaches times) aborts the rollout, with an event naming the
// breach.
func (r *trafficRouter) VerifyWeight(ro *v1alpha1.Rollout, desiredWeight int32, additional []v1alpha1.WeightDestination) (types.RpcVerified, types.RpcError) {
	verified := types.NotVerified
	rerr := r.call("VerifyWeight", ro, func(ctx context.Context, b *binding, s *shift.Shifter, log *slog.Logger) error {
		rmp, err := r.ramp(b, s, desiredWeight)
		if err != nil {
			return err
		}
		v, err := rmp.Verify(ctx, int(desiredWeight), extras(b, additional)...)
		if errors.Is(err, shift.ErrRampFailed) {
			// The step must stay unverified: Argo treats a VerifyWeight
			// error as "no verdict", and at the end of the steps that lets
			// the rollout promote. Abort it instead, so the controller
			// puts every user back on stable (SetWeight 0, at once) and
			// scales the canary down; an event names the breach.
			// If the abort itself fails (RBAC), the step stays unverified
			// and the event and log say why: still never a promotion.
			if !ro.Status.Abort {
				r.abort(ctx, ro, err, log)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if v.Verified {
			verified = types.Verified
		}
		log.Debug("verify weight", "desired", desiredWeight, "verified", v.Verified, "weight", v.Weight, "reason", v.Reason)
		return nil
	})
	return verified, rerr
}

// abort aborts a rollout the way `kubectl argo rollouts abort` does
// (status.abort through the status subresource) and records a Warning event
// on it naming the breach: the controller's own abort message cannot say why.
// Failures are logged and put into the event, never returned: the caller
// holds the step either way.
func (r *trafficRouter) abort(ctx context.Context, ro *v1alpha1.Rollout, breach error, log *slog.Logger) {
	r.mu.Lock()
	c := r.clients
	r.mu.Unlock()
	msg := fmt.Sprintf("%s aborted the rollout: %v", TrafficRouterName, breach)
	_, err := c.argo.ArgoprojV1alpha1().Rollouts(ro.Namespace).Patch(ctx, ro.Name, k8stypes.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		msg = fmt.Sprintf("%s could not abort the rollout (patch status.abort; it needs patch on rollouts/status: %v); the step stays unverified: %v", TrafficRouterName, err, breach)
		log.Error("ramp failed; aborting the rollout failed", "err", err, "breach", breach)
	} else {
		log.Warn("ramp failed: rollout aborted", "breach", breach)
	}
	r.event(ctx, ro, RampFailedReason, msg, log)
}

// event records a Warning event on the Rollout. A failure is logged, never
// returned: events explain, they must not fail the call.
func (r *trafficRouter) event(ctx context.Context, ro *v1alpha1.Rollout, reason, msg string, log *slog.Logger) {
	r.mu.Lock()
	c := r.clients
	r.mu.Unlock()
	if c.kube == nil {
		log.Warn("no Kubernetes client to record the event", "reason", reason, "message", msg)
		return
	}
	now := metav1.NewTime(r.now())
	ev := &corev1.Event{
		// Named like client-go's event recorder names them (unique per call).
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ro.Name, time.Now().UnixNano()), Namespace: ro.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Rollout", APIVersion: v1alpha1.SchemeGroupVersion.String(),
			Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, ResourceVersion: ro.ResourceVersion},
		Reason:         reason,
		Message:        msg,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: TrafficRouterName},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := c.kube.CoreV1().Events(ro.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Error("record the event (needs create on events)", "err", err, "reason", reason, "message", msg)
	}
}

// UpdateHash keeps the DestinationRule subsets' rollouts-pod-template-hash
// labels in step with the ReplicaSets (subset-level routing only).
func (r *trafficRouter) UpdateHash(ro *v1alpha1.Rollout, canaryHash, stableHash string, additional []v1alpha1.WeightDestination) types.RpcError {
	return r.call("UpdateHash", ro, func(ctx context.Context, b *binding, s *shift.Shifter, _ *slog.Logger) error {
		var subsets []shift.ExtraSubset
		for _, d := range additional {
			subsets = append(subsets, shift.ExtraSubset{Name: d.ServiceName, Hash: d.PodTemplateHash})
		}
		return s.UpdateHashes(ctx, b.target, canaryHash, stableHash, subsets...)
	})
}

// SetHeaderRoute adds, replaces or (with no match) removes a header route.
func (r *trafficRouter) SetHeaderRoute(ro *v1alpha1.Rollout, hr *v1alpha1.SetHeaderRoute) types.RpcError {
	return r.call("SetHeaderRoute", ro, func(ctx context.Context, b *binding, s *shift.Shifter, _ *slog.Logger) error {
		route := shift.HeaderRoute{Name: hr.Name}
		for i, m := range hr.Match {
			if m.HeaderValue == nil {
				return fmt.Errorf("setHeaderRoute %q match[%d].headerValue: required", hr.Name, i)
			}
			route.Match = append(route.Match, shift.HeaderMatch{Header: m.HeaderName, Value: stringMatch(*m.HeaderValue)})
		}
		return s.SetHeaderRoute(ctx, b.target, route)
	})
}

// SetMirrorRoute adds, replaces or (with no match) removes a mirror route.
func (r *trafficRouter) SetMirrorRoute(ro *v1alpha1.Rollout, mr *v1alpha1.SetMirrorRoute) types.RpcError {
	return r.call("SetMirrorRoute", ro, func(ctx context.Context, b *binding, s *shift.Shifter, _ *slog.Logger) error {
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
		return s.SetMirrorRoute(ctx, b.target, route)
	})
}

// RemoveManagedRoutes removes the header and mirror routes: every route in
// managedRoutes and every route a step of the rollout names.
func (r *trafficRouter) RemoveManagedRoutes(ro *v1alpha1.Rollout) types.RpcError {
	return r.call("RemoveManagedRoutes", ro, func(ctx context.Context, b *binding, s *shift.Shifter, _ *slog.Logger) error {
		var also []string
		for _, step := range ro.Spec.Strategy.Canary.Steps {
			if step.SetHeaderRoute != nil && step.SetHeaderRoute.Name != "" {
				also = append(also, step.SetHeaderRoute.Name)
			}
			if step.SetMirrorRoute != nil && step.SetMirrorRoute.Name != "" {
				also = append(also, step.SetMirrorRoute.Name)
			}
		}
		return s.RemoveManagedRoutes(ctx, b.target, also...)
	})
}

func stringMatch(m v1alpha1.StringMatch) shift.StringMatch {
	return shift.StringMatch{Exact: m.Exact, Prefix: m.Prefix, Regex: m.Regex}
}

func rpcErr(err error) types.RpcError { return types.RpcError{ErrorString: err.Error()} }
