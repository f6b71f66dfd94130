package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/warmup"
)

func init() {
	register(KindStep, "RpcStepPlugin", func(l *slog.Logger) goplugin.Plugin {
		return &rpc.RpcStepPlugin{Impl: newWarmupStep(l)}
	})
}

// WarmupPluginName is the name the step plugin is registered under in the
// argo-rollouts-config ConfigMap and referenced by in Rollout steps.
const WarmupPluginName = "danki/warmup"

const (
	// warmupDefaultPoll is how often the controller calls Run while the
	// warm-up runs: it must exceed 10 s, Argo's floor for RequeueAfter.
	warmupDefaultPoll = 15 * time.Second
	warmupMinPoll     = 10 * time.Second
	// warmupMaxRestarts bounds how often a warm-up is restarted because the plugin
	// process restarted under it.
	warmupMaxRestarts = 3
	// warmupFinishedTTL is how long a finished run stays in memory.
	warmupFinishedTTL = time.Hour
	// warmupStopWait bounds how long Terminate/Abort wait for the load to stop.
	warmupStopWait = 5 * time.Second
	// warmupDeadlineGrace lets warmup.Run's own deadline fire first.
	warmupDeadlineGrace = 10 * time.Second
)

// warmupStepConfig is the danki/warmup config in a Rollout step
// (`plugin: {name: danki/warmup, config: {...}}`): every warmup.Config field,
// plus where to find the pods. docs/warmup.md documents every field.
type warmupStepConfig struct {
	warmup.Config

	// URLs are explicit canary base URLs (http://host:port); when set, no
	// pods are looked up.
	URLs []string `json:"urls,omitempty"`
	// StableURLs are explicit stable base URLs for compareToStable.
	StableURLs []string `json:"stableURLs,omitempty"`
	// Service overrides spec.strategy.canary.canaryService for finding the
	// canary pods; StableService likewise for the stable pods.
	Service       string `json:"service,omitempty"`
	StableService string `json:"stableService,omitempty"`
	// UseSelector finds pods by the Rollout's spec.selector plus the pod
	// template hash even when the Rollout has a canaryService.
	UseSelector bool `json:"useSelector,omitempty"`
	// Port is the pods' port, by name or number. Default: their only port.
	Port intstr.IntOrString `json:"port,omitempty"`
	// MinPods is how many ready canary pods to wait for (within
	// healthTimeout) before warming. Default 1.
	MinPods int `json:"minPods,omitempty"`
	// PollInterval is the RequeueAfter returned while running. Default 15s;
	// must be more than 10s (Argo Rollouts ignores shorter ones).
	PollInterval warmup.Duration `json:"pollInterval,omitempty"`
}

func parseWarmupStepConfig(raw json.RawMessage) (warmupStepConfig, error) {
	var c warmupStepConfig
	if len(raw) > 0 && string(raw) != "null" {
		if err := warmup.DecodeConfig(raw, &c); err != nil {
			return c, err
		}
	}
	c.Config = c.Config.WithDefaults()
	if c.MinPods == 0 {
		c.MinPods = 1
	}
	if c.PollInterval == 0 {
		c.PollInterval = warmup.Duration(warmupDefaultPoll)
	}
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.PollInterval.D() <= warmupMinPoll {
		errs = append(errs, fmt.Errorf("pollInterval: %s is too short: Argo Rollouts ignores requeue intervals of 10s or less (and waits 30s); use e.g. \"15s\"", c.PollInterval))
	}
	if c.MinPods < 1 {
		errs = append(errs, fmt.Errorf("minPods: must be at least 1 (got %d)", c.MinPods))
	}
	if _, err := warmup.URLTargets("urls", c.URLs); err != nil {
		errs = append(errs, err)
	}
	if _, err := warmup.URLTargets("stableURLs", c.StableURLs); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// warmupStatus is the warm-up's progress, persisted by the controller in
// rollout.status.canary.stepPluginStatuses[].status and handed back on the
// next call (and to a restarted plugin process).
type warmupStatus struct {
	// RunID identifies the warm-up: namespace/rollout/canary-hash/step.
	RunID      string    `json:"runID"`
	CanaryHash string    `json:"canaryHash,omitempty"`
	Step       int32     `json:"step"`
	StartedAt  time.Time `json:"startedAt"`
	// Restarts counts warm-ups restarted after the plugin process restarted.
	Restarts int `json:"restarts,omitempty"`
	// Phase: resolving, health, load, converged, failed or stopped.
	Phase     string              `json:"phase"`
	Pods      []warmupPodProgress `json:"pods,omitempty"`
	Converged int                 `json:"converged"`
	Requests  int64               `json:"requests"`
	Windows   int                 `json:"windows"`
	FirstP99  string              `json:"firstP99,omitempty"`
	LastP99   string              `json:"lastP99,omitempty"`
	StableP99 string              `json:"stableP99,omitempty"`
	// Trend is the p99 of the last six windows (of any pod), oldest first.
	Trend   []string `json:"p99Trend,omitempty"`
	Message string   `json:"message,omitempty"`
}

// warmupPodProgress is one pod's latest window.
type warmupPodProgress struct {
	Name      string `json:"name"`
	Windows   int    `json:"windows"`
	LastP99   string `json:"lastP99,omitempty"`
	Converged bool   `json:"converged,omitempty"`
}

const (
	warmupPhaseResolving = "resolving"
	warmupPhaseConverged = "converged"
	warmupPhaseFailed    = "failed"
	warmupPhaseStopped   = "stopped"
)

func warmupTerminal(phase string) bool {
	return phase == warmupPhaseConverged || phase == warmupPhaseFailed || phase == warmupPhaseStopped
}

// warmupStep implements Argo Rollouts' rpc.StepPlugin for danki/warmup. The
// controller calls it from up to ten workers at once; all state is behind mu
// (the map) and each warmupRun's own lock.
type warmupStep struct {
	log *slog.Logger

	mu      sync.Mutex
	kube    kubernetes.Interface
	kubeErr error
	runs    map[string]*warmupRun
}

func newWarmupStep(l *slog.Logger) *warmupStep {
	return &warmupStep{log: l.With("step", WarmupPluginName), runs: map[string]*warmupRun{}}
}

var _ rpc.StepPlugin = (*warmupStep)(nil)

// InitPlugin builds the Kubernetes client with clientcmd's default loading
// rules: $KUBECONFIG or ~/.kube/config, else the in-cluster service account.
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
	if err != nil {
		s.kubeErr = err
		s.log.Warn("no Kubernetes client: danki/warmup can only warm explicit urls", "err", err)
	}
	return types.RpcError{}
}

// Type names the plugin.
func (s *warmupStep) Type() string { return WarmupPluginName }

// Run starts the warm-up in the background on the first call and reports its
// progress on later ones. It never blocks on the load.
func (s *warmupStep) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	cfg, err := parseWarmupStepConfig(sc.Config)
	if err != nil {
		return types.RpcStepResult{Phase: types.PhaseFailed, Message: "invalid danki/warmup config: " + err.Error()}, types.RpcError{}
	}
	id, hash, step := warmupRunID(ro)
	prev := parseWarmupStatus(sc.Status)
	log := s.log.With("rollout", ro.Namespace+"/"+ro.Name, "canaryHash", hash, "step", step)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcLocked()
	if r, ok := s.runs[id]; ok {
		if !r.finished() || (prev != nil && prev.RunID == id) {
			return r.result(cfg.PollInterval.D()), types.RpcError{}
		}
		delete(s.runs, id) // a finished run the controller no longer knows: a retry
	}
	status := warmupStatus{RunID: id, CanaryHash: hash, Step: step, StartedAt: time.Now().UTC(), Phase: warmupPhaseResolving}
	if prev != nil && prev.RunID == id {
		if warmupTerminal(prev.Phase) {
			return warmupResultOf(*prev, cfg.PollInterval.D()), types.RpcError{}
		}
		// The status says a warm-up is running, but this process has none:
		// the plugin restarted. Start again (the pods keep what they
		// learned, so it converges sooner), within the original deadline.
		status.StartedAt, status.Restarts = prev.StartedAt, prev.Restarts+1
		log.Info("restarting warm-up after plugin restart", "restarts", status.Restarts, "startedAt", prev.StartedAt)
	}
	remaining := cfg.Deadline.D() - time.Since(status.StartedAt)
	switch {
	case status.Restarts > warmupMaxRestarts:
		status.Phase, status.Message = warmupPhaseFailed, fmt.Sprintf("warm-up restarted %d times because the plugin process restarted; giving up", status.Restarts-1)
		return warmupResultOf(status, 0), types.RpcError{}
	case remaining <= 0:
		status.Phase, status.Message = warmupPhaseFailed, fmt.Sprintf("deadline %s passed (warm-up started %s, restarted after a plugin restart)", cfg.Deadline, status.StartedAt.Format(time.RFC3339))
		return warmupResultOf(status, 0), types.RpcError{}
	}
	// A new canary hash or step replaces any warm-up still running for this
	// Rollout.
	// (cancel does not wait: the old load stops within hardStopGrace.)
	for oid, r := range s.runs {
		if r.rollout == ro.Namespace+"/"+ro.Name {
			r.cancel()
			delete(s.runs, oid)
		}
	}
	// warmup.Run enforces the deadline itself (and reports the latency
	// trend); the grace only bounds finding the pods.
	ctx, cancel := context.WithDeadline(context.Background(), status.StartedAt.Add(cfg.Deadline.D()+warmupDeadlineGrace))
	r := &warmupRun{rollout: ro.Namespace + "/" + ro.Name, cancel: cancel, done: make(chan struct{}), status: status, pods: map[string]*warmupPodProgress{}}
	s.runs[id] = r
	go r.execute(ctx, log, cfg, ro.DeepCopy(), s.kube, s.kubeErr)
	log.Info("warm-up started", "remaining", remaining.Round(time.Second))
	return r.result(cfg.PollInterval.D()), types.RpcError{}
}

// Terminate stops the load at once: the rollout moved on (e.g. promoted).
func (s *warmupStep) Terminate(ro *v1alpha1.Rollout, _ *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	n := s.stopRollout(ro)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("warm-up terminated (%d running warm-up(s) stopped)", n)}, types.RpcError{}
}

// Abort stops the load at once: the rollout was aborted. Warm-up changes
// nothing that needs reverting.
func (s *warmupStep) Abort(ro *v1alpha1.Rollout, _ *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	n := s.stopRollout(ro)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: fmt.Sprintf("warm-up aborted (%d running warm-up(s) stopped)", n)}, types.RpcError{}
}

// stopRollout stops and forgets every warm-up of the Rollout, waiting (up to
// warmupStopWait) until no more requests go out.
func (s *warmupStep) stopRollout(ro *v1alpha1.Rollout) int {
	key := ro.Namespace + "/" + ro.Name
	s.mu.Lock()
	var stopping []*warmupRun
	for id, r := range s.runs {
		if r.rollout == key {
			if !r.finished() {
				stopping = append(stopping, r)
			}
			r.cancel()
			delete(s.runs, id)
		}
	}
	s.mu.Unlock()
	for _, r := range stopping {
		r.stop()
	}
	if len(stopping) > 0 {
		s.log.Info("warm-up stopped", "rollout", key, "runs", len(stopping))
	}
	return len(stopping)
}

func (s *warmupStep) gcLocked() {
	for id, r := range s.runs {
		if r.finished() && time.Since(r.finishedAt()) > warmupFinishedTTL {
			delete(s.runs, id)
		}
	}
}

func warmupRunID(ro *v1alpha1.Rollout) (id, hash string, step int32) {
	// A nil index arrives for step 0: net/rpc's gob drops a pointer to a
	// zero value.
	if ro.Status.CurrentStepIndex != nil {
		step = *ro.Status.CurrentStepIndex
	}
	hash = ro.Status.CurrentPodHash
	return fmt.Sprintf("%s/%s/%s/%d", ro.Namespace, ro.Name, hash, step), hash, step
}

func parseWarmupStatus(raw json.RawMessage) *warmupStatus {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var st warmupStatus
	if err := json.Unmarshal(raw, &st); err != nil || st.RunID == "" {
		return nil
	}
	return &st
}

// warmupResultOf turns a status into the controller's result.
func warmupResultOf(st warmupStatus, poll time.Duration) types.RpcStepResult {
	raw, _ := json.Marshal(st)
	res := types.RpcStepResult{Status: raw, Message: st.Message}
	switch st.Phase {
	case warmupPhaseConverged:
		res.Phase = types.PhaseSuccessful
	case warmupPhaseFailed, warmupPhaseStopped:
		res.Phase = types.PhaseFailed
	default:
		res.Phase, res.RequeueAfter = types.PhaseRunning, poll
	}
	return res
}

// warmupRun is one warm-up running (or finished) in the background.
type warmupRun struct {
	rollout string
	cancel  context.CancelFunc
	done    chan struct{}

	mu     sync.Mutex
	status warmupStatus
	pods   map[string]*warmupPodProgress
	ended  time.Time
}

func (r *warmupRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *warmupRun) finishedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// stop cancels the warm-up and waits until its load has stopped.
func (r *warmupRun) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(warmupStopWait):
	}
}

func (r *warmupRun) result(poll time.Duration) types.RpcStepResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return warmupResultOf(r.status, poll)
}

func (r *warmupRun) update(f func(*warmupStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.status)
}

func (r *warmupRun) execute(ctx context.Context, log *slog.Logger, cfg warmupStepConfig, ro *v1alpha1.Rollout, kube kubernetes.Interface, kubeErr error) {
	defer close(r.done)
	defer r.cancel()
	finish := func(phase, msg string) {
		r.update(func(st *warmupStatus) { st.Phase, st.Message = phase, msg })
		r.mu.Lock()
		r.ended = time.Now()
		r.mu.Unlock()
	}
	canary, stable, err := resolveWarmupTargets(ctx, cfg, ro, kube, kubeErr)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
			finish(warmupPhaseStopped, "warm-up stopped while finding pods")
			return
		}
		log.Warn("warm-up failed to find pods", "err", err)
		finish(warmupPhaseFailed, err.Error())
		return
	}
	wcfg := cfg.Config
	deadline, _ := ctx.Deadline()
	wcfg.Deadline = warmup.Duration(time.Until(deadline) - warmupDeadlineGrace)
	if wcfg.Deadline <= 0 {
		finish(warmupPhaseFailed, fmt.Sprintf("deadline %s passed while finding pods", cfg.Deadline))
		return
	}
	names := make([]string, 0, len(canary))
	for _, t := range canary {
		names = append(names, t.String())
		r.pods[t.String()] = &warmupPodProgress{Name: t.String()}
	}
	r.update(func(st *warmupStatus) {
		st.Phase = string(warmup.PhaseHealth)
		st.Message = fmt.Sprintf("waiting for %d pod(s) to answer %s with 200", len(canary), cfg.HealthPath)
	})
	log.Info("warming pods", "pods", names, "stable", len(stable))
	res, err := warmup.Run(ctx, wcfg, canary, warmup.Options{Stable: stable, Logger: log, OnProgress: r.onProgress})
	switch {
	case err == nil:
		log.Info("warm-up converged", "summary", res.Summary())
		finish(warmupPhaseConverged, "warm-up "+res.Summary())
	case errors.Is(err, context.Canceled):
		finish(warmupPhaseStopped, "warm-up stopped: "+err.Error())
	default:
		msg := err.Error()
		if res != nil {
			msg = fmt.Sprintf("warm-up failed: %s (%d requests)", res.Reason, res.Requests())
		}
		log.Warn("warm-up failed", "err", err)
		finish(warmupPhaseFailed, msg)
	}
}

// onProgress folds a warm-up snapshot into the persisted status.
func (r *warmupRun) onProgress(p warmup.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.status
	st.Phase = string(p.Phase)
	if p.Target == "" {
		if p.Phase == warmup.PhaseLoad {
			st.Message = fmt.Sprintf("warming %d pod(s)", p.Targets)
		}
		return
	}
	if p.StableP99 > 0 {
		st.StableP99 = p.StableP99.String()
	}
	if p.Stable {
		return
	}
	st.Requests, st.Converged = p.Requests, p.ConvergedTargets
	pod := r.pods[p.Target]
	if pod == nil {
		pod = &warmupPodProgress{Name: p.Target}
		r.pods[p.Target] = pod
	}
	pod.Windows, pod.LastP99, pod.Converged = p.Window.Index, p.Window.P99.String(), p.TargetConverged
	st.Windows = max(st.Windows, p.Window.Index)
	if p.Window.Index == 1 {
		if d, _ := time.ParseDuration(st.FirstP99); p.Window.P99 > d {
			st.FirstP99 = p.Window.P99.String()
		}
	}
	st.LastP99 = p.Window.P99.String()
	st.Trend = append(st.Trend, p.Window.P99.Round(10*time.Microsecond).String())
	if len(st.Trend) > 6 {
		st.Trend = st.Trend[len(st.Trend)-6:]
	}
	st.Pods = st.Pods[:0]
	for _, pp := range r.pods {
		st.Pods = append(st.Pods, *pp)
	}
	slices.SortFunc(st.Pods, func(a, b warmupPodProgress) int { return strings.Compare(a.Name, b.Name) })
	st.Message = fmt.Sprintf("warming %d pod(s): %d requests, %d/%d converged; p99 %s (window 1) → %s (window %d, %s)",
		p.Targets, p.Requests, p.ConvergedTargets, p.Targets, st.FirstP99, st.LastP99, p.Window.Index, p.Target)
	if !p.TargetConverged && p.Waiting != "" {
		st.Message += ", waiting for: " + p.Waiting
	}
}

// resolveWarmupTargets finds the canary (and, for compareToStable, stable) pods:
// explicit URLs, else the Rollout's canaryService / stableService or its
// selector, restricted to status.currentPodHash / status.stableRS.
func resolveWarmupTargets(ctx context.Context, cfg warmupStepConfig, ro *v1alpha1.Rollout, kube kubernetes.Interface, kubeErr error) (canary, stable []warmup.Target, err error) {
	if len(cfg.URLs) > 0 {
		canary, err = warmup.URLTargets("urls", cfg.URLs)
	} else {
		canary, err = findWarmupPods(ctx, cfg, ro, kube, kubeErr, false)
	}
	if err != nil || !cfg.CompareToStable {
		return canary, nil, err
	}
	if len(cfg.StableURLs) > 0 {
		stable, err = warmup.URLTargets("stableURLs", cfg.StableURLs)
	} else {
		stable, err = findWarmupPods(ctx, cfg, ro, kube, kubeErr, true)
	}
	return canary, stable, err
}

func findWarmupPods(ctx context.Context, cfg warmupStepConfig, ro *v1alpha1.Rollout, kube kubernetes.Interface, kubeErr error, stable bool) ([]warmup.Target, error) {
	if kube == nil {
		return nil, fmt.Errorf("no Kubernetes client to find the pods (%v): give urls in the step config or run the plugin with a kubeconfig or in-cluster service account", kubeErr)
	}
	k, err := warmupPodsOf(cfg, ro, stable)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.HealthTimeout.D())
	defer cancel()
	return k.Wait(wctx, kube, cfg.MinPods, time.Second)
}

// warmupPodsOf describes where the Rollout's canary (or stable) pods are.
func warmupPodsOf(cfg warmupStepConfig, ro *v1alpha1.Rollout, stable bool) (warmup.KubeTargets, error) {
	k := warmup.KubeTargets{Namespace: ro.Namespace, Port: cfg.Port}
	service := cfg.Service
	k.PodTemplateHash = ro.Status.CurrentPodHash
	if stable {
		service = cfg.StableService
		k.PodTemplateHash = ro.Status.StableRS
		if k.PodTemplateHash == "" || k.PodTemplateHash == ro.Status.CurrentPodHash {
			return k, fmt.Errorf("compareToStable: Rollout %s/%s has no stable ReplicaSet apart from the canary (status.stableRS %q); turn compareToStable off for the first rollout or give stableURLs", ro.Namespace, ro.Name, ro.Status.StableRS)
		}
	}
	if k.PodTemplateHash == "" {
		return k, fmt.Errorf("rollout %s/%s has no status.currentPodHash yet", ro.Namespace, ro.Name)
	}
	if service == "" && !cfg.UseSelector && ro.Spec.Strategy.Canary != nil {
		service = ro.Spec.Strategy.Canary.CanaryService
		if stable {
			service = ro.Spec.Strategy.Canary.StableService
		}
	}
	if service != "" {
		k.Service = service
		return k, nil
	}
	if ro.Spec.Selector == nil {
		return k, fmt.Errorf("rollout %s/%s has neither a canaryService nor spec.selector to find its pods", ro.Namespace, ro.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(ro.Spec.Selector)
	if err != nil {
		return k, fmt.Errorf("rollout %s/%s spec.selector: %w", ro.Namespace, ro.Name, err)
	}
	k.Selector = sel.String()
	return k, nil
}
