package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

func init() {
	register(KindStep, "RpcStepPlugin", func(l *slog.Logger, pol policy.Policy) goplugin.Plugin {
		return &rpc.RpcStepPlugin{Impl: newWarmupStep(l, pol)}
	})
}

// WarmupPluginName is the name the step plugin is registered under in the
// argo-rollouts-config ConfigMap and referenced by in Rollout steps.
const WarmupPluginName = "danki/warmup"

// warmupStep implements Argo Rollouts' rpc.StepPlugin for danki/warmup on a
// warmup.Supervisor: one run per Rollout, canary hash and step index.
type warmupStep struct {
	log        *slog.Logger
	supervisor *warmup.Supervisor
	// policy is the operator's (the plugin's args): what tenant step
	// configs may ask for.
	policy policy.Policy

	mu      sync.Mutex // guards kube, argo and kubeErr, set by InitPlugin
	kube    kubernetes.Interface
	argo    argoclient.Interface  // records capacity knees on the Rollout
	istio   istioclient.Interface // the mirror source's VirtualService (step_mirror.go)
	kubeErr error

	// ownerEvery and guardEvery are how often a running warm-up checks its
	// Rollout and re-reads its pods (warmup.OwnerCheckInterval and
	// warmup.GuardRefresh; tests shorten them).
	ownerEvery, guardEvery time.Duration
}

func newWarmupStep(l *slog.Logger, pol policy.Policy) *warmupStep {
	l = l.With("step", WarmupPluginName)
	return &warmupStep{log: l, supervisor: warmup.NewSupervisor(l), policy: pol,
		ownerEvery: warmup.OwnerCheckInterval, guardEvery: warmup.GuardRefresh}
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

// Type names the plugin.
func (s *warmupStep) Type() string { return WarmupPluginName }

// Run starts the warm-up on the first call and reports its progress on later
// ones (the supervisor keeps Run idempotent and resumes after a restart).
func (s *warmupStep) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	cfg, err := warmup.ParseStepConfig(sc.Config, s.policy)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: "invalid danki/warmup config: " + err.Error()}, types.RpcError{}
	}
	// A warm-up this process runs already: its progress, without building
	// its job again (Prometheus clients for the neighbour guard and the
	// mirror, the Rollout's capacity history) on every poll.
	if st, ok := s.supervisor.Status(warmupRunKey(ro)); ok && !st.Phase.Final() {
		return warmupResult(st, cfg.PollInterval.D()), types.RpcError{}
	}
	ro = ro.DeepCopy()
	var after func(context.Context, []warmup.Target, func(string)) (string, error)
	if len(cfg.Capacity) > 0 {
		check, err := capacity.ParseCheck(cfg.Capacity, s.policy)
		if err != nil {
			return types.RpcStepResult{Phase: types.PhaseFailed, Message: "invalid danki/warmup config: " + err.Error()}, types.RpcError{}
		}
		check = check.Inherit(cfg.Config)
		history, err := capacity.ParseHistory(ro.Annotations[capacity.HistoryAnnotation])
		if err != nil {
			return types.RpcStepResult{Phase: types.PhaseFailed, Message: fmt.Sprintf("Rollout %s/%s: %v", ro.Namespace, ro.Name, err)}, types.RpcError{}
		}
		var previous *capacity.Knee
		if k, ok := history.Of(ro.Status.StableRS); ok && ro.Status.StableRS != ro.Status.CurrentPodHash {
			previous = &k
		}
		after = func(ctx context.Context, canary []warmup.Target, report func(string)) (string, error) {
			check := check
			// The warm-up's pod guard: the capacity load dials through it.
			check.Guard = warmup.GuardChain(check.Guard, warmup.RunGuard(ctx))
			summary, knee, err := check.Run(ctx, canary[0], previous, report)
			if err != nil {
				return "", err
			}
			knee.Revision = ro.Status.CurrentPodHash
			if rerr := s.recordKnee(ctx, ro, knee); rerr != nil {
				s.log.Warn("capacity knee not recorded", "rollout", ro.Namespace+"/"+ro.Name, "err", rerr)
				return summary + fmt.Sprintf("; knee NOT recorded for the next rollout: %v", rerr), nil
			}
			return summary + fmt.Sprintf("; recorded for revision %s in annotation %s", knee.Revision, capacity.HistoryAnnotation), nil
		}
	}
	job := warmup.Job{
		Config: cfg.Config,
		After:  after,
		FindTargets: func(ctx context.Context) ([]warmup.Target, []warmup.Target, error) {
			want, required := cfg.WantsStable()
			q, err := cfg.Query(warmupRollout(ro), want, required)
			if err != nil {
				return nil, nil, err
			}
			q.Timeout, q.Kube = cfg.HealthTimeout.D(), s.kubeClient
			return warmup.FindTargets(ctx, q)
		},
	}
	job.Neighbours = s.usersOnStable(ro, cfg.Config)
	job.Owner, job.OwnerEvery = s.rolloutOwner(ro), s.ownerEvery
	job.Guard = s.podGuard(ro, cfg)
	if len(cfg.Mirror) > 0 {
		if err := s.withMirror(ro, cfg, &job); err != nil {
			return types.RpcStepResult{Phase: types.PhaseFailed, Message: "invalid danki/warmup config: " + err.Error()}, types.RpcError{}
		}
	}
	st := s.supervisor.Start(warmupRunKey(ro), warmup.ParseStatus(sc.Status), job)
	if st.Phase.Final() {
		s.removeMirror(ro, cfg) // a run that ended in another process
	}
	return warmupResult(st, cfg.PollInterval.D()), types.RpcError{}
}

// usersOnStable is the users' own latency on stable for the neighbour
// guard: the Rollout's danki/istio gate, when it reads a stable latency
// series from Prometheus. Nil (the stable probe alone) otherwise.
func (s *warmupStep) usersOnStable(ro *v1alpha1.Rollout, cfg warmup.Config) warmup.NeighbourSignal {
	if g := cfg.NeighbourGuard; g != nil && !*g {
		return nil
	}
	b, err := bind(ro, s.policy)
	if err != nil || len(b.Gate) == 0 {
		return nil
	}
	gate, err := analysis.ParseConfig(b.Gate)
	if err != nil {
		return nil // the router reports a bad gate
	}
	// cfg has its defaults (ParseStepConfig): neighbourWindow is set.
	tail, err := analysis.NewStableTail(gate, cfg.NeighbourWindow.D(), s.log, analysis.WithPolicy(s.policy), analysis.WithKube(s.kubeClient))
	if err != nil {
		s.log.Debug("neighbour guard: the gate's metrics are not watched", "rollout", ro.Namespace+"/"+ro.Name, "reason", err)
		return nil
	}
	tail.Namespace = ro.Namespace // its bearerTokenSecret is the Rollout's
	return tail
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
// warmup.StopWait) and any warm-up mirror is gone.
func (s *warmupStep) stop(ro *v1alpha1.Rollout, sc *types.RpcStepContext, how string) types.RpcStepResult {
	n := s.supervisor.Stop(ro.Namespace + "/" + ro.Name)
	if sc != nil {
		if cfg, err := warmup.ParseStepConfig(sc.Config, s.policy); err == nil {
			s.removeMirror(ro, cfg)
		}
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("warm-up %s (%d running warm-up(s) stopped)", how, n)}
}

// rolloutOwner checks, while the warm-up runs, that ro still exists as the
// same object (UID) at the same canary revision: Argo Rollouts calls
// neither Abort nor Terminate for a deleted Rollout, and the load must not
// outlive it. Nil without an Argo client (no owner to check).
func (s *warmupStep) rolloutOwner(ro *v1alpha1.Rollout) func(context.Context) error {
	s.mu.Lock()
	argo := s.argo
	s.mu.Unlock()
	if argo == nil {
		return nil
	}
	ns, name, uid, hash := ro.Namespace, ro.Name, ro.UID, ro.Status.CurrentPodHash
	return func(ctx context.Context) error {
		cur, err := argo.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: Rollout %s/%s was deleted", warmup.ErrOwnerGone, ns, name)
		case err != nil:
			return fmt.Errorf("get Rollout %s/%s: %w", ns, name, err)
		case uid != "" && cur.UID != uid:
			return fmt.Errorf("%w: Rollout %s/%s was deleted and created again (UID %s, the warm-up's was %s)", warmup.ErrOwnerGone, ns, name, cur.UID, uid)
		case cur.DeletionTimestamp != nil:
			return fmt.Errorf("%w: Rollout %s/%s is being deleted", warmup.ErrOwnerGone, ns, name)
		case cur.Status.CurrentPodHash != hash:
			return fmt.Errorf("%w: Rollout %s/%s's canary is now revision %s, not %s", warmup.ErrOwnerGone, ns, name, cur.Status.CurrentPodHash, hash)
		}
		return nil
	}
}

// podGuard is the warm-up's pod guard (warmup.NewPodGuard): connections
// only to the run's target pods while each is still the Rollout's pod it
// was (same name and UID, same address), re-read every guardEvery with the
// pod lookup's query; explicit URL targets as they are. Nil when no target
// is a pod.
func (s *warmupStep) podGuard(ro *v1alpha1.Rollout, cfg warmup.StepConfig) func(context.Context, []warmup.Target, []warmup.Target) (func(netip.Addr) error, error) {
	canaryPods := len(cfg.URLs) == 0
	stablePods := len(cfg.StableURLs) == 0
	if !canaryPods && !stablePods {
		return nil
	}
	r := warmupRollout(ro)
	return func(ctx context.Context, canary, stable []warmup.Target) (func(netip.Addr) error, error) {
		q := warmup.PodGuardQuery{Namespace: r.Namespace}
		var pods, urls []warmup.Target
		if canaryPods {
			pods, q.Hashes = append(pods, canary...), append(q.Hashes, r.CanaryHash)
		} else {
			urls = append(urls, canary...)
		}
		if stablePods && len(stable) > 0 {
			pods, q.Hashes = append(pods, stable...), append(q.Hashes, r.StableHash)
		} else {
			urls = append(urls, stable...)
		}
		if len(pods) == 0 {
			return nil, nil
		}
		if r.Selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(r.Selector)
			if err != nil {
				return nil, fmt.Errorf("rollout %s/%s spec.selector: %w", r.Namespace, r.Name, err)
			}
			q.Selector = sel.String()
		}
		kube, err := s.kubeClient()
		if err != nil {
			return nil, err
		}
		g, err := warmup.NewPodGuard(ctx, kube, q, pods, urls, s.guardEvery, s.log.With("rollout", r.Namespace+"/"+r.Name))
		if err != nil {
			return nil, err
		}
		return g.Check, nil
	}
}

func warmupRunKey(ro *v1alpha1.Rollout) warmup.RunKey {
	// A nil index arrives for step 0: net/rpc's gob drops a pointer to a
	// zero value.
	var step int32
	if ro.Status.CurrentStepIndex != nil {
		step = *ro.Status.CurrentStepIndex
	}
	return warmup.RunKey{Owner: ro.Namespace + "/" + ro.Name, Revision: ro.Status.CurrentPodHash, Step: step}
}

// warmupResult turns a warm-up status into the controller's result.
func warmupResult(st warmup.Status, poll time.Duration) types.RpcStepResult {
	raw, _ := json.Marshal(st)
	res := types.RpcStepResult{Status: raw, Message: st.Message}
	switch {
	case st.Phase == warmup.PhaseConverged:
		res.Phase = types.PhaseSuccessful
	case st.Phase.Final():
		res.Phase = types.PhaseFailed
	default:
		res.Phase, res.RequeueAfter = types.PhaseRunning, poll
	}
	return res
}

// recordKnee adds the canary's knee to the Rollout's capacity history (a
// merge patch of one annotation: the controller's own status updates are
// untouched), for the next rollout to compare with.
func (s *warmupStep) recordKnee(ctx context.Context, ro *v1alpha1.Rollout, knee capacity.Knee) error {
	s.mu.Lock()
	argo := s.argo
	s.mu.Unlock()
	if argo == nil {
		return fmt.Errorf("no Kubernetes client (%v)", s.kubeErr)
	}
	rollouts := argo.ArgoprojV1alpha1().Rollouts(ro.Namespace)
	cur, err := rollouts.Get(ctx, ro.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	history, err := capacity.ParseHistory(cur.Annotations[capacity.HistoryAnnotation])
	if err != nil {
		history = nil // a broken history is replaced, not kept broken
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		capacity.HistoryAnnotation: history.With(knee).String()}}})
	if err != nil {
		return err
	}
	if _, err := rollouts.Patch(ctx, ro.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate Rollout %s/%s with %s: %w", ro.Namespace, ro.Name, capacity.HistoryAnnotation, err)
	}
	return nil
}

func (s *warmupStep) kubeClient() (kubernetes.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kube == nil {
		return nil, fmt.Errorf("no Kubernetes client to find the pods (%v): give urls in the step config or run the plugin with a kubeconfig or in-cluster service account", s.kubeErr)
	}
	return s.kube, nil
}

// warmupRollout is what the warm-up needs to know about the Rollout to find
// its pods.
func warmupRollout(ro *v1alpha1.Rollout) warmup.Rollout {
	r := warmup.Rollout{Namespace: ro.Namespace, Name: ro.Name, Selector: ro.Spec.Selector,
		CanaryHash: ro.Status.CurrentPodHash, StableHash: ro.Status.StableRS}
	if c := ro.Spec.Strategy.Canary; c != nil {
		r.CanaryService, r.StableService = c.CanaryService, c.StableService
	}
	return r
}
