package warmupstep

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// routerName is the traffic router whose Rollout config the step reads for
// the gate and the VirtualService (rollouts.TrafficRouterName).
const routerName = "danki/istio"

// Rollout is what the step knows of the Rollout it runs for; the rollouts
// package translates Argo's Rollout into it on every call.
type Rollout struct {
	// Rollout is what finding its pods needs: names, selector, hashes,
	// services.
	warmup.Rollout
	// UID tells the Rollout from one deleted and created again under its
	// name.
	UID string
	// Step is the index of the step in the Rollout's steps.
	Step int32
	// CapacityHistory is the Rollout's wellknown.CapacityKneesAnnotation.
	CapacityHistory string
	// Router is the Rollout's danki/istio binding (its VirtualService
	// target and gate); RouterErr says why there is none.
	Router    shift.Binding
	RouterErr error
}

// owner is the Rollout as a Supervisor owner: "namespace/name".
func (r Rollout) owner() string { return r.Namespace + "/" + r.Name }

// RunKey is the Rollout's run at its canary revision and step.
func (r Rollout) RunKey() RunKey {
	return RunKey{Owner: r.owner(), Revision: r.CanaryHash, Step: r.Step}
}

// RolloutState is a Rollout as read again while the step runs.
type RolloutState struct {
	UID         string
	CanaryHash  string
	Deleting    bool
	Annotations map[string]string
	// TemplateCPURequests is the CPU request of each container of the
	// Rollout's pod template by container name — at CanaryHash, the
	// canary revision's pods were created from it —: what a yielded canary
	// pod gets back (CPUYield).
	TemplateCPURequests map[string]resource.Quantity
}

// Rollouts reads Rollouts again and patches them; the rollouts package
// implements it on Argo's client.
type Rollouts interface {
	// Get reads the Rollout; a missing one is an error apierrors.IsNotFound
	// recognises.
	Get(ctx context.Context, namespace, name string) (RolloutState, error)
	// MergePatch applies a JSON merge patch to the Rollout.
	MergePatch(ctx context.Context, namespace, name string, patch []byte) error
}

// Clients are what the step talks to. A nil client is missing; Err says
// why (no kubeconfig, no service account).
type Clients struct {
	Kube     kubernetes.Interface
	Istio    istioclient.Interface
	Rollouts Rollouts
	Err      error
}

// Step is the danki/warmup step: it assembles each Rollout's warm-up job
// (targets, pod guard, owner check, users' latency for the neighbour guard,
// the capacity check and its record, the mirror) and runs it on its
// Supervisor.
type Step struct {
	Log *slog.Logger
	// Policy is the operator's: what tenant step configs may ask for.
	Policy     policy.Policy
	Supervisor *Supervisor
	// Clients returns the clients at the moment of use (they may come
	// after the step was built).
	Clients func() Clients
	// OwnerEvery and GuardEvery are how often a running warm-up checks its
	// Rollout and re-reads its pods (warmup.OwnerCheckInterval and
	// warmup.GuardRefresh; tests shorten them).
	OwnerEvery, GuardEvery time.Duration
}

// New returns the step, logging to log, under the operator's policy pol.
func New(log *slog.Logger, pol policy.Policy, clients func() Clients) *Step {
	if log == nil {
		log = slog.Default()
	}
	return &Step{Log: log, Policy: pol, Supervisor: NewSupervisor(log), Clients: clients,
		OwnerEvery: warmup.OwnerCheckInterval, GuardEvery: warmup.GuardRefresh}
}

// Run starts ro's warm-up on the first call and reports its progress on
// later ones (the supervisor keeps Run idempotent and resumes after a
// restart from previous, the status the caller kept). An error is a step
// that cannot run; its text is the step's failure message.
func (s *Step) Run(ro Rollout, cfg StepConfig, previous *Status) (Status, error) {
	// A warm-up this process runs already: its progress, without building
	// its job again (Prometheus clients for the neighbour guard and the
	// mirror, the Rollout's capacity history) on every poll.
	if st, ok := s.Supervisor.Status(ro.RunKey()); ok && !st.Phase.Final() {
		return st, nil
	}
	job := Job{
		Config: cfg.Config,
		FindTargets: func(ctx context.Context) ([]warmup.Target, []warmup.Target, error) {
			want, required := cfg.WantsStable()
			q, err := cfg.Query(ro.Rollout, want, required)
			if err != nil {
				return nil, nil, err
			}
			q.Timeout, q.Kube = cfg.HealthTimeout.D(), s.kube
			return warmup.FindTargets(ctx, q)
		},
	}
	if cfg.Capacity != nil {
		after, err := s.capacityCheck(ro, cfg)
		if err != nil {
			return Status{}, err
		}
		job.After = after
	}
	job.Neighbours = s.UsersOnStable(ro, cfg.Config)
	job.Owner, job.OwnerEvery = s.rolloutOwner(ro), s.OwnerEvery
	job.Guard = s.PodGuard(ro, cfg)
	if y := s.CPUYield(ro, cfg); y != nil {
		job.Yield = y
	}
	if err := s.WithMirror(ro, cfg, &job); err != nil {
		return Status{}, fmt.Errorf("invalid danki/warmup config: %w", err)
	}
	st := s.Supervisor.Start(ro.RunKey(), previous, job)
	if st.Phase.Final() {
		s.removeMirror(ro, cfg) // a run that ended in another process
	}
	return st, nil
}

// Stop stops ro's warm-up load at once and removes any warm-up mirror
// (cfg nil: the step's config is unknown or invalid, no mirror to look
// for). It returns how many warm-ups were still running, once their load
// stopped (bounded by StopWait).
func (s *Step) Stop(ro Rollout, cfg *StepConfig) int {
	n := s.Supervisor.Stop(ro.owner())
	if cfg != nil {
		s.removeMirror(ro, *cfg)
	}
	return n
}

// capacityCheck is Job.After for the capacity block: the check on one warm
// canary pod, compared with the knee the stable revision had as a canary,
// and the canary's knee recorded on the Rollout for the next rollout.
func (s *Step) capacityCheck(ro Rollout, cfg StepConfig) (func(context.Context, []warmup.Target, func(string)) (string, error), error) {
	check := cfg.Capacity.Inherit(cfg.Config)
	history, err := capacity.ParseHistory(ro.CapacityHistory)
	if err != nil {
		return nil, fmt.Errorf("Rollout %s/%s: %v", ro.Namespace, ro.Name, err)
	}
	var previous *capacity.Knee
	if k, ok := history.Of(ro.StableHash); ok && ro.StableHash != ro.CanaryHash {
		previous = &k
	}
	return func(ctx context.Context, canary []warmup.Target, report func(string)) (string, error) {
		check := check
		// The warm-up's pod guard: the capacity load dials through it.
		check.Guard = warmup.GuardChain(check.Guard, RunGuard(ctx))
		summary, knee, err := check.Run(ctx, canary[0], previous, report)
		if err != nil {
			return "", err
		}
		knee.Revision = ro.CanaryHash
		if rerr := s.recordKnee(ctx, ro, knee); rerr != nil {
			s.Log.Warn("capacity knee not recorded", "rollout", ro.owner(), "err", rerr)
			return summary + fmt.Sprintf("; knee NOT recorded for the next rollout: %v", rerr), nil
		}
		return summary + fmt.Sprintf("; recorded for revision %s in annotation %s", knee.Revision, wellknown.CapacityKneesAnnotation), nil
	}, nil
}

// UsersOnStable is the users' own latency on stable for the neighbour
// guard: the Rollout's danki/istio gate, when it reads a stable latency
// series from Prometheus. Nil (the stable probe alone) otherwise.
func (s *Step) UsersOnStable(ro Rollout, cfg warmup.Config) warmup.NeighbourSignal {
	if g := cfg.NeighbourGuard; g != nil && !*g {
		return nil
	}
	if ro.RouterErr != nil || len(ro.Router.Gate) == 0 {
		return nil
	}
	gate, err := analysis.ParseConfig(ro.Router.Gate)
	if err != nil {
		return nil // the router reports a bad gate
	}
	// cfg has its defaults (ParseStepConfig): neighbourWindow is set.
	tail, err := analysis.NewStableTail(gate, cfg.NeighbourWindow.D(), s.Log, analysis.WithPolicy(s.Policy), analysis.WithKube(s.kube))
	if err != nil {
		s.Log.Debug("neighbour guard: the gate's metrics are not watched", "rollout", ro.owner(), "reason", err)
		return nil
	}
	tail.Namespace = ro.Namespace // its bearerTokenSecret is the Rollout's
	return tail
}

// rolloutOwner checks, while the warm-up runs, that ro still exists as the
// same object (UID) at the same canary revision: Argo Rollouts calls
// neither Abort nor Terminate for a deleted Rollout, and the load must not
// outlive it. Nil without a Rollouts client (no owner to check).
func (s *Step) rolloutOwner(ro Rollout) func(context.Context) error {
	rollouts := s.Clients().Rollouts
	if rollouts == nil {
		return nil
	}
	ns, name, uid, hash := ro.Namespace, ro.Name, ro.UID, ro.CanaryHash
	return func(ctx context.Context) error {
		cur, err := rollouts.Get(ctx, ns, name)
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: Rollout %s/%s was deleted", warmup.ErrOwnerGone, ns, name)
		case err != nil:
			return fmt.Errorf("get Rollout %s/%s: %w", ns, name, err)
		case uid != "" && cur.UID != uid:
			return fmt.Errorf("%w: Rollout %s/%s was deleted and created again (UID %s, the warm-up's was %s)", warmup.ErrOwnerGone, ns, name, cur.UID, uid)
		case cur.Deleting:
			return fmt.Errorf("%w: Rollout %s/%s is being deleted", warmup.ErrOwnerGone, ns, name)
		case cur.CanaryHash != hash:
			return fmt.Errorf("%w: Rollout %s/%s's canary is now revision %s, not %s", warmup.ErrOwnerGone, ns, name, cur.CanaryHash, hash)
		}
		return nil
	}
}

// PodGuard is the warm-up's pod guard (warmup.NewPodGuard): connections
// only to the run's target pods while each is still the Rollout's pod it
// was (same name and UID, same address), re-read every GuardEvery with the
// pod lookup's query; explicit URL targets as they are. Nil when no target
// is a pod.
func (s *Step) PodGuard(ro Rollout, cfg StepConfig) func(context.Context, []warmup.Target, []warmup.Target) (func(netip.Addr) error, error) {
	canaryPods := len(cfg.URLs) == 0
	stablePods := len(cfg.StableURLs) == 0
	if !canaryPods && !stablePods {
		return nil
	}
	r := ro.Rollout
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
		kube, err := s.kube()
		if err != nil {
			return nil, err
		}
		g, err := warmup.NewPodGuard(ctx, kube, q, pods, urls, s.GuardEvery, s.Log.With("rollout", r.Namespace+"/"+r.Name))
		if err != nil {
			return nil, err
		}
		return g.Check, nil
	}
}

// recordKnee adds the canary's knee to the Rollout's capacity history (a
// merge patch of one annotation: the controller's own status updates are
// untouched), for the next rollout to compare with.
func (s *Step) recordKnee(ctx context.Context, ro Rollout, knee capacity.Knee) error {
	c := s.Clients()
	if c.Rollouts == nil {
		return fmt.Errorf("no Kubernetes client (%v)", c.Err)
	}
	cur, err := c.Rollouts.Get(ctx, ro.Namespace, ro.Name)
	if err != nil {
		return fmt.Errorf("get Rollout %s/%s: %w", ro.Namespace, ro.Name, err)
	}
	history, err := capacity.ParseHistory(cur.Annotations[wellknown.CapacityKneesAnnotation])
	if err != nil {
		history = nil // a broken history is replaced, not kept broken
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		wellknown.CapacityKneesAnnotation: history.With(knee).String()}}})
	if err != nil {
		return fmt.Errorf("capacity history patch: %w", err)
	}
	if err := c.Rollouts.MergePatch(ctx, ro.Namespace, ro.Name, patch); err != nil {
		return fmt.Errorf("annotate Rollout %s/%s with %s: %w", ro.Namespace, ro.Name, wellknown.CapacityKneesAnnotation, err)
	}
	return nil
}

// kube is the Kubernetes client for pod lookups, or why there is none.
func (s *Step) kube() (kubernetes.Interface, error) {
	c := s.Clients()
	if c.Kube == nil {
		return nil, fmt.Errorf("no Kubernetes client to find the pods (%v): give urls in the step config or run the plugin with a kubeconfig or in-cluster service account", c.Err)
	}
	return c.Kube, nil
}
