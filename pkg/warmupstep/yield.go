package warmupstep

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/podcpu"
	"github.com/danki-dev/danki/pkg/warmup"
)

// The step's canary pods yield the node's CPU while they warm
// (StepConfig.YieldCPU, on by default).
//
// A canary pod's cold JVM — the warm-up's requests, the JIT's compiler
// threads, class loading — competes for the node's CPU with the stable pods
// that serve every user meanwhile. So before the load starts the step lowers
// each canary pod's CPU request in place (pods/resize, Kubernetes ≥ 1.33) to
// podcpu.YieldRequest, the kernel's least CPU weight: under contention the
// users' pods run first and the warming pod takes the idle CPU. The request
// is put back before anything that measures the pod at its own weight (the
// capacity check) and before the step reports it warm, whatever the outcome.
//
// What is put back is the Rollout's pod template's request for the
// container — the request the canary revision's pods were created from,
// which the tenant sets in the Rollout anyway — never a value read from the
// pod or its annotations: the controller's pods/resize right can give a pod
// no more than its own template asks. A container is lowered only while its
// request is its template's (a LimitRange or another controller that
// changed it is left alone), only in a Burstable pod, never one that
// restarts to resize; a container found at the yield request already was
// lowered by this step before the plugin restarted, and is put back too.
//
// Lowered, a pod that settles slower than stable may only be losing the CPU
// to the users: before such a rejection stands, the step puts the request
// back and judges the pods again at their full weight (Supervisor).

// restoreTimeout bounds a restore, which runs even after the run was
// stopped.
const restoreTimeout = 30 * time.Second

// CPUYield lowers and restores the CPU requests of one run's canary pods.
type CPUYield struct {
	kube      kubernetes.Interface
	rollouts  Rollouts
	log       *slog.Logger
	namespace string
	name      string
	// hash is the canary revision: only its pods are resized.
	hash string
	// template is the canary revision's pod template's CPU request by
	// container, read by Lower: what a restore puts back.
	template map[string]resource.Quantity

	// lowered are the pods whose requests this run lowered (or found
	// lowered), by name.
	lowered map[string]yieldedPod
}

type yieldedPod struct {
	uid        types.UID
	containers map[string]resource.Quantity // container → request to put back
}

// CPUYield is ro's canary pods' yield (nil when the config turns it off).
// A missing client or template is said when the run starts, in the log and
// the step's message, not here.
func (s *Step) CPUYield(ro Rollout, cfg StepConfig) *CPUYield {
	if cfg.YieldCPU != nil && !*cfg.YieldCPU || len(cfg.URLs) > 0 {
		return nil // turned off, or the canary is given as URLs: no pods to resize
	}
	if cfg.YieldCPU == nil && cfg.Mirror != nil && cfg.Mirror.Mode == mirror.ModeOnly {
		// Warming on mirrored traffic alone has no judgement at full
		// weight (the synthetic load's warmup.Yield): a pod not warm by
		// the deadline fails as it is. It yields only when asked.
		return nil
	}
	kube, _ := s.kube()
	return &CPUYield{kube: kube, rollouts: s.Clients().Rollouts, log: s.Log.With("rollout", ro.owner()), namespace: ro.Namespace,
		name: ro.Name, hash: ro.CanaryHash, lowered: map[string]yieldedPod{}}
}

// readTemplate reads the Rollout's pod template's CPU requests from the
// API server ("" when they are the canary revision's), or says why not.
func (y *CPUYield) readTemplate(ctx context.Context) string {
	if y.rollouts == nil {
		return "no Rollouts client"
	}
	st, err := y.rollouts.Get(ctx, y.namespace, y.name)
	switch {
	case err != nil:
		return fmt.Sprintf("read the Rollout's pod template: %v", err)
	case st.CanaryHash != y.hash:
		return fmt.Sprintf("the Rollout's canary is now revision %s, not %s", st.CanaryHash, y.hash)
	case len(st.TemplateCPURequests) == 0:
		return "the Rollout's pod template requests no CPU"
	}
	y.template = st.TemplateCPURequests
	return ""
}

// Lower lowers the canary pods' CPU requests and returns the targets with
// their CPU request as their template's (what a cpuBudget share is a share
// of; a pod found lowered already would otherwise have the yield request;
// the step budgets none by default) and a note for the step's message.
// Nothing it cannot lower stops the warm-up: that pod warms at its full
// weight, and the note says why.
func (y *CPUYield) Lower(ctx context.Context, canary []warmup.Target) (targets []warmup.Target, note string, lowered bool) {
	if y.kube == nil {
		return canary, "CPU not yielded: no Kubernetes client", false
	}
	if why := y.readTemplate(ctx); why != "" {
		return canary, "CPU not yielded: " + why, false
	}
	out := slices.Clone(canary)
	var why []string
	for i, t := range out {
		pod, back, err := y.lowerPod(ctx, t.Name)
		if err != nil {
			y.log.Warn("canary pod keeps its full CPU weight while warming", "pod", t.Name, "why", err)
			why = append(why, t.Name+": "+err.Error())
			continue
		}
		if q, ok := servingRequest(pod, back, t); ok {
			out[i].CPURequest = q.AsApproximateFloat64()
		}
	}
	if len(why) > 0 {
		note = fmt.Sprintf("CPU not yielded on %d of %d pod(s) (%s)", len(why), len(out), strings.Join(why, "; "))
	}
	return out, note, len(y.lowered) > 0
}

// lowerPod lowers one canary pod's containers to the yield request and
// returns the pod and the requests of the containers it has lowered (this
// call or before), to put back.
func (y *CPUYield) lowerPod(ctx context.Context, name string) (*corev1.Pod, map[string]resource.Quantity, error) {
	pods := y.kube.CoreV1().Pods(y.namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("get pod: %w", err)
	}
	if h := pod.Labels[warmup.PodTemplateHashLabel]; h != y.hash || pod.DeletionTimestamp != nil {
		return nil, nil, fmt.Errorf("not a running pod of canary revision %s (%s=%q)", y.hash, warmup.PodTemplateHashLabel, h)
	}
	low := podcpu.Yield()
	back := map[string]resource.Quantity{} // lowered now or before
	lower := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		want, ok := y.template[c.Name]
		if !ok || want.Cmp(low) <= 0 {
			continue
		}
		switch got, has := c.Resources.Requests[corev1.ResourceCPU]; {
		case has && got.Cmp(low) == 0:
			back[c.Name] = want
		case has && got.Cmp(want) == 0:
			back[c.Name], lower[c.Name] = want, low
		default:
			y.log.Info("container's CPU request is not its template's; left alone", "pod", name, "container", c.Name, "request", got.String(), "template", want.String())
		}
	}
	if len(back) == 0 {
		return nil, nil, fmt.Errorf("no container requests its template's CPU")
	}
	if why := podcpu.CannotYield(pod, back); why != "" {
		return nil, nil, fmt.Errorf("%s", why)
	}
	if len(lower) > 0 {
		body, err := podcpu.ResizePatch(lower, pod.ResourceVersion)
		if err != nil {
			return nil, nil, err
		}
		if _, err := pods.Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "resize"); err != nil {
			return nil, nil, fmt.Errorf("resize to CPU %s (pods/resize): %w", podcpu.Format(lower), err)
		}
		y.log.Info("canary pod's CPU request lowered while it warms", "pod", name, "to", podcpu.YieldRequest, "from", podcpu.Format(back))
	}
	y.lowered[name] = yieldedPod{uid: pod.UID, containers: back}
	return pod, back, nil
}

// servingRequest is the request a cpuBudget share of the target's warm-up
// is a share of: that of the lowered container serving the target's port,
// or of the only one.
func servingRequest(pod *corev1.Pod, lowered map[string]resource.Quantity, t warmup.Target) (resource.Quantity, bool) {
	if len(lowered) == 1 {
		for _, q := range lowered {
			return q, true
		}
	}
	u, err := url.Parse(t.URL)
	if err != nil {
		return resource.Quantity{}, false
	}
	port, _ := strconv.Atoi(u.Port())
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if int(p.ContainerPort) == port {
				q, ok := lowered[c.Name]
				return q, ok
			}
		}
	}
	return resource.Quantity{}, false
}

// Restore puts back every request Lower lowered, waits (at most
// podcpu.ActuateWait per pod) for the kubelet to apply it, and returns a
// note for the step's message ("" when nothing was lowered). It runs after the run's context
// ended too, with its own bound.
func (y *CPUYield) Restore(ctx context.Context) string {
	if len(y.lowered) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	defer cancel()
	var restored, failed []string
	for _, name := range slices.Sorted(maps.Keys(y.lowered)) {
		if err := y.restorePod(ctx, name, y.lowered[name]); err != nil {
			y.log.Error("restore the canary pod's CPU request", "pod", name, "error", err)
			failed = append(failed, name+": "+err.Error())
			continue
		}
		restored = append(restored, name)
		delete(y.lowered, name)
	}
	if len(failed) > 0 {
		return fmt.Sprintf("CPU request NOT restored on %s", strings.Join(failed, "; "))
	}
	return fmt.Sprintf("CPU request %s while warming, restored on %d pod(s)", podcpu.YieldRequest, len(restored))
}

// restorePod puts back the pod's lowered containers still at the yield
// request (another value is someone else's resize, left alone).
func (y *CPUYield) restorePod(ctx context.Context, name string, p yieldedPod) error {
	pods := y.kube.CoreV1().Pods(y.namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && (pod.UID != p.uid || pod.DeletionTimestamp != nil) {
		return nil // gone or going: needs nothing back
	}
	if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	low := podcpu.Yield()
	back := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if q, ok := p.containers[c.Name]; ok {
			if got, has := c.Resources.Requests[corev1.ResourceCPU]; has && got.Cmp(low) == 0 {
				back[c.Name] = q
			}
		}
	}
	if len(back) == 0 {
		return nil
	}
	body, err := podcpu.ResizePatch(back, "")
	if err != nil {
		return err
	}
	if _, err := pods.Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "resize"); err != nil {
		return fmt.Errorf("resize back to CPU %s (pods/resize): %w", podcpu.Format(back), err)
	}
	y.log.Info("canary pod's CPU request restored", "pod", name, "to", podcpu.Format(back))
	return y.awaitApplied(ctx, name, back)
}

// awaitApplied waits until the kubelet reports the requests in the pod's
// container statuses (podcpu.AwaitActuated): one not applied in time is
// an error, the pod would meet users at the least weight.
func (y *CPUYield) awaitApplied(ctx context.Context, name string, want map[string]resource.Quantity) error {
	err := podcpu.AwaitActuated(ctx, func(ctx context.Context) (*corev1.Pod, error) {
		return y.kube.CoreV1().Pods(y.namespace).Get(ctx, name, metav1.GetOptions{})
	}, want)
	if err != nil {
		return fmt.Errorf("restored in the spec, %w", err)
	}
	return nil
}
