package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/pkg/wellknown"
)

func init() {
	register(KindStep, "RpcStepPlugin", func(l *slog.Logger, pol policy.Policy, m *metrics.Plugin) goplugin.Plugin {
		return &rpc.RpcStepPlugin{Impl: newWarmupStep(l, pol).observe(m)}
	})
}

// WarmupPluginName is the name the step plugin is registered under in the
// argo-rollouts-config ConfigMap and referenced by in Rollout steps.
const WarmupPluginName = "danki/warmup"

// warmupStep is the danki/warmup step plugin: an adapter from Argo's step
// RPC calls to warmupstep.Step, which assembles and supervises the
// warm-ups (one run per Rollout, canary hash and step index).
type warmupStep struct {
	log *slog.Logger
	// step holds the operator's policy (the plugin's args: what tenant
	// step configs may ask for) as step.Policy.
	step *warmupstep.Step

	mu      sync.Mutex // guards kube, argo, istio and kubeErr, set by InitPlugin
	kube    kubernetes.Interface
	argo    argoclient.Interface  // the owner check, capacity knees on the Rollout
	istio   istioclient.Interface // the mirror source's VirtualService
	kubeErr error
}

func newWarmupStep(l *slog.Logger, pol policy.Policy) *warmupStep {
	l = l.With("step", WarmupPluginName)
	s := &warmupStep{log: l}
	s.step = warmupstep.New(l, pol, s.clients)
	return s
}

// observe records the step's warm-ups in m (nil: not recorded).
func (s *warmupStep) observe(m *metrics.Plugin) *warmupStep {
	if m != nil {
		s.step.Supervisor.Observer = m
	}
	return s
}

var _ rpc.StepPlugin = (*warmupStep)(nil)

// InitPlugin builds the Kubernetes client (see restConfigFromEnvironment).
// Without one, URL targets still work; pod lookups fail with the reason.
func (s *warmupStep) InitPlugin() types.RpcError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kube != nil {
		return types.RpcError{}
	}
	cfg, err := restConfigFromEnvironment()
	if err == nil {
		s.kube, err = kubernetes.NewForConfig(cfg)
	}
	if err == nil {
		s.argo, err = argoclient.NewForConfig(cfg)
	}
	if err == nil {
		s.istio, err = istioclient.NewForConfig(cfg)
	}
	if err != nil {
		s.kubeErr = err
		s.log.Warn("no Kubernetes client: danki/warmup can only warm explicit urls", "err", err)
	}
	return types.RpcError{}
}

// clients are the step's clients as InitPlugin (or a test) left them.
func (s *warmupStep) clients() warmupstep.Clients {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := warmupstep.Clients{Kube: s.kube, Istio: s.istio, Err: s.kubeErr}
	if s.argo != nil {
		c.Rollouts = argoRollouts{s.argo}
	}
	return c
}

// Type names the plugin.
func (s *warmupStep) Type() string { return WarmupPluginName }

// Run starts the warm-up on the first call and reports its progress on later
// ones (the supervisor keeps Run idempotent and resumes after a restart).
func (s *warmupStep) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	cfg, err := warmupstep.ParseStepConfig(sc.Config, s.step.Policy)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: "invalid danki/warmup config: " + err.Error()}, types.RpcError{}
	}
	st, err := s.step.Run(s.rollout(ro), cfg, warmupstep.ParseStatus(sc.Status))
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: err.Error()}, types.RpcError{}
	}
	return warmupResult(st, cfg.PollInterval.D()), types.RpcError{}
}

// Terminate stops the load at once: the rollout moved on (e.g. promoted).
func (s *warmupStep) Terminate(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	return s.stop(ro, sc, "terminated"), types.RpcError{}
}

// Abort stops the load at once: the rollout was aborted. Warm-up changes
// nothing that needs reverting but a warm-up mirror, which is removed.
func (s *warmupStep) Abort(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	return s.stop(ro, sc, "aborted"), types.RpcError{}
}

// stop returns once the Rollout's warm-up load has stopped (bounded by
// warmupstep.StopWait) and any warm-up mirror is gone.
func (s *warmupStep) stop(ro *v1alpha1.Rollout, sc *types.RpcStepContext, how string) types.RpcStepResult {
	var cfg *warmupstep.StepConfig
	if sc != nil {
		if c, err := warmupstep.ParseStepConfig(sc.Config, s.step.Policy); err == nil {
			cfg = &c
		}
	}
	n := s.step.Stop(s.rollout(ro), cfg)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("warm-up %s (%d running warm-up(s) stopped)", how, n)}
}

// rollout is what the step needs to know about the Rollout: its pods, its
// identity and step, its capacity history and its danki/istio binding.
func (s *warmupStep) rollout(ro *v1alpha1.Rollout) warmupstep.Rollout {
	r := warmupstep.Rollout{Rollout: warmupRollout(ro), UID: string(ro.UID), Step: stepIndex(ro),
		CapacityHistory: ro.Annotations[wellknown.CapacityKneesAnnotation]}
	r.Router, r.RouterErr = bind(ro, s.step.Policy)
	return r
}

// templateCPURequests is the CPU request of each container of the
// Rollout's pod template (nil when none requests CPU). Only from a Rollout
// read from the API server: the one the controller hands over its plugin
// RPC (gob) has lost every resource.Quantity's value.
func templateCPURequests(ro *v1alpha1.Rollout) map[string]resource.Quantity {
	var out map[string]resource.Quantity
	for _, c := range ro.Spec.Template.Spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
			if out == nil {
				out = map[string]resource.Quantity{}
			}
			out[c.Name] = q
		}
	}
	return out
}

// stepIndex is the Rollout's current step. A nil index arrives for step 0:
// net/rpc's gob drops a pointer to a zero value.
func stepIndex(ro *v1alpha1.Rollout) int32 {
	if ro.Status.CurrentStepIndex != nil {
		return *ro.Status.CurrentStepIndex
	}
	return 0
}

// warmupResult turns a warm-up status into the controller's result.
func warmupResult(st warmupstep.Status, poll time.Duration) types.RpcStepResult {
	raw, _ := json.Marshal(st)
	res := types.RpcStepResult{Status: raw, Message: st.Message}
	switch {
	case st.Phase == warmupstep.PhaseConverged:
		res.Phase = types.PhaseSuccessful
	case st.Phase.Final():
		res.Phase = types.PhaseFailed
	default:
		res.Phase, res.RequeueAfter = types.PhaseRunning, poll
	}
	return res
}

// warmupRollout is what the warm-up needs to know about the Rollout to find
// its pods.
func warmupRollout(ro *v1alpha1.Rollout) warmup.Rollout {
	r := warmup.Rollout{Namespace: ro.Namespace, Name: ro.Name, Selector: ro.Spec.Selector.DeepCopy(),
		CanaryHash: ro.Status.CurrentPodHash, StableHash: ro.Status.StableRS}
	if c := ro.Spec.Strategy.Canary; c != nil {
		r.CanaryService, r.StableService = c.CanaryService, c.StableService
	}
	return r
}

// argoRollouts is warmupstep.Rollouts on Argo's client.
type argoRollouts struct{ argo argoclient.Interface }

func (a argoRollouts) Get(ctx context.Context, namespace, name string) (warmupstep.RolloutState, error) {
	ro, err := a.argo.ArgoprojV1alpha1().Rollouts(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return warmupstep.RolloutState{}, err
	}
	return warmupstep.RolloutState{UID: string(ro.UID), CanaryHash: ro.Status.CurrentPodHash,
		Deleting: ro.DeletionTimestamp != nil, Annotations: ro.Annotations, TemplateCPURequests: templateCPURequests(ro)}, nil
}

func (a argoRollouts) MergePatch(ctx context.Context, namespace, name string, patch []byte) error {
	_, err := a.argo.ArgoprojV1alpha1().Rollouts(namespace).Patch(ctx, name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
