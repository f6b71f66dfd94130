package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationCPURequests records each container's CPU request as the pod
// was created ({"app":"500m"}), written by the webhook. The gate lowers a
// warming pod's CPU request in place (YieldCPU) and puts these back: the
// record lives on the pod, so a gate that restarts mid-warm-up still
// knows them.
const AnnotationCPURequests = "danki.dev/cpu-requests"

// AnnotationCPURequestsSignature signs AnnotationCPURequests.
const AnnotationCPURequestsSignature = "danki.dev/cpu-requests-signature"

// ReasonRecordRefused: the pod's record of its CPU requests is not the
// gate's own.
const ReasonRecordRefused = "CPURecordRefused"

// RecordKey is the key the gate signs its records with.
type RecordKey []byte

// stampCPURequests writes the webhook's record into pod.
func stampCPURequests(pod *corev1.Pod, _ RecordKey) {
	if rec := recordCPURequests(pod); rec != "" {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[AnnotationCPURequests] = rec
	}
}

// YieldCPURequest is the CPU request a warming pod's containers have while
// the gate warms it (Config.YieldCPU): 1m maps to cpu.shares 2, the
// kernel's least weight, so under contention the users' pods on the node
// run first and the warming JVM takes only the idle CPU.
const YieldCPURequest = "1m"

// actuateWait bounds how long the gate waits for the kubelet to apply the
// restored CPU request before it sets the condition anyway.
const actuateWait = 15 * time.Second

// recordCPURequests is the webhook's value of AnnotationCPURequests for
// pod, "" when no container requests CPU.
func recordCPURequests(pod *corev1.Pod) string {
	m := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
			m[c.Name] = q.String()
		}
	}
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always marshals
	return string(b)
}

// recordedCPURequests reads AnnotationCPURequests.
func recordedCPURequests(pod *corev1.Pod) (map[string]resource.Quantity, error) {
	v, ok := pod.Annotations[AnnotationCPURequests]
	if !ok {
		return nil, nil
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationCPURequests, err)
	}
	out := map[string]resource.Quantity{}
	for name, s := range raw {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: container %s: %w", AnnotationCPURequests, name, err)
		}
		out[name] = q
	}
	return out, nil
}

// withRecordedRequests is pod with its recorded CPU requests in the spec:
// what the warm-up's CPU budget is a share of, even when the pod's request
// is lowered already (a warm-up retried, or a gate restarted mid-warm-up).
func withRecordedRequests(pod *corev1.Pod) *corev1.Pod {
	rec, err := recordedCPURequests(pod)
	if err != nil || len(rec) == 0 {
		return pod
	}
	p := pod.DeepCopy()
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if q, ok := rec[c.Name]; ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[corev1.ResourceCPU] = q
		}
	}
	return p
}

// yieldPlan says whether the pod's CPU request can be lowered while it
// warms: the requests to restore, or why not.
func yieldPlan(pod *corev1.Pod) (map[string]resource.Quantity, string) {
	rec, err := recordedCPURequests(pod)
	switch {
	case err != nil:
		return nil, err.Error()
	case rec == nil:
		return nil, "no " + AnnotationCPURequests + " annotation (the webhook records it; a pod given the gate by hand keeps its CPU weight)"
	case len(rec) == 0:
		return nil, "no container requests CPU"
	case pod.Status.QOSClass != corev1.PodQOSBurstable:
		// A Guaranteed pod's requests equal its limits: lowering one would
		// change its QoS class, which a resize may not.
		return nil, fmt.Sprintf("QoS class %s: only a Burstable pod's CPU request can be lowered in place", pod.Status.QOSClass)
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := rec[c.Name]; !ok {
			continue
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == corev1.ResourceCPU && p.RestartPolicy == corev1.RestartContainer {
				return nil, fmt.Sprintf("container %s resizes CPU by restarting (resizePolicy RestartContainer): a restart would make it cold", c.Name)
			}
		}
	}
	return rec, ""
}

// lowerCPU lowers the pod's recorded containers' CPU request to
// YieldCPURequest through the pods/resize subresource (nothing to do when
// it is lowered already) and reports whether it is low. When the pod
// cannot yield (see yieldPlan) or the resize is refused (an API server
// before Kubernetes 1.33, RBAC without pods/resize, a LimitRange's
// minimum), it keeps its full weight: said in the log and, for a refusal,
// in an Event.
func (r *Reconciler) lowerCPU(ctx context.Context, log *slog.Logger, pod *corev1.Pod, why string) bool {
	rec, not := yieldPlan(pod)
	if rec == nil {
		log.Info("the pod keeps its full CPU weight", "while", why, "why", not)
		return false
	}
	low := resource.MustParse(YieldCPURequest)
	lowered := map[string]resource.Quantity{}
	for name := range rec {
		lowered[name] = low
	}
	if hasCPURequests(pod, lowered) {
		return true
	}
	if err := r.resizeCPU(ctx, pod, lowered); err != nil {
		log.Warn("lower the CPU request; the pod keeps its full weight", "while", why, "error", err)
		r.Events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonYieldRefused, eventAction,
			"could not lower the CPU request to %s while %s (full weight): %v", YieldCPURequest, why, err)
		return false
	}
	log.Info("CPU request lowered", "while", why, "to", YieldCPURequest, "from", formatRequests(rec))
	return true
}

// restoreCPU puts back the recorded CPU request of each container the gate
// lowered (its request is YieldCPURequest: another value is someone else's
// resize, left alone) and waits for the kubelet to apply it. A pod gone or
// going needs nothing back.
func (r *Reconciler) restoreCPU(ctx context.Context, log *slog.Logger, pod *corev1.Pod) {
	var cur corev1.Pod
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
	if apierrors.IsNotFound(err) || err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil) {
		return
	}
	if err != nil {
		log.Error("read the pod to restore its CPU request", "error", err)
		return
	}
	rec, err := recordedCPURequests(&cur)
	if err != nil || len(rec) == 0 {
		return
	}
	back := map[string]resource.Quantity{}
	low := resource.MustParse(YieldCPURequest)
	for _, c := range cur.Spec.Containers {
		q, ok := rec[c.Name]
		if got, has := c.Resources.Requests[corev1.ResourceCPU]; ok && has && got.Cmp(low) == 0 && q.Cmp(low) != 0 {
			back[c.Name] = q
		}
	}
	if len(back) == 0 {
		return
	}
	if err := r.resizeCPU(ctx, &cur, back); err != nil {
		log.Error("restore the CPU request", "to", formatRequests(back), "error", err)
		r.Events.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonRestoreFailed, eventAction,
			"could not restore the CPU request to %s: %v", formatRequests(back), err)
		return
	}
	if err := r.awaitActuated(ctx, &cur, back); err != nil {
		// Deferred (the node filled meanwhile) or slow: the kubelet
		// applies it when it can; the pod is warm either way.
		log.Warn("CPU request restored in the spec, not yet applied by the kubelet", "error", err)
		r.Events.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonRestorePending, eventAction,
			"CPU request restored to %s; the kubelet has not applied it yet: %v", formatRequests(back), err)
		return
	}
	log.Info("CPU request restored", "to", formatRequests(back))
}

// hasCPURequests reports whether the pod's spec requests exactly these
// CPU quantities for the named containers.
func hasCPURequests(pod *corev1.Pod, want map[string]resource.Quantity) bool {
	for _, c := range pod.Spec.Containers {
		q, ok := want[c.Name]
		if !ok {
			continue
		}
		if got, has := c.Resources.Requests[corev1.ResourceCPU]; !has || got.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// resizeCPU sets the CPU requests of the named containers through the
// pods/resize subresource (a strategic merge patch: other resources and
// containers are left alone).
func (r *Reconciler) resizeCPU(ctx context.Context, pod *corev1.Pod, requests map[string]resource.Quantity) error {
	type ctr struct {
		Name      string `json:"name"`
		Resources struct {
			Requests map[string]string `json:"requests"`
		} `json:"resources"`
	}
	var patch struct {
		Spec struct {
			Containers []ctr `json:"containers"`
		} `json:"spec"`
	}
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		c := ctr{Name: name}
		q := requests[name]
		c.Resources.Requests = map[string]string{string(corev1.ResourceCPU): q.String()}
		patch.Spec.Containers = append(patch.Spec.Containers, c)
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &corev1.Pod{}
	target.Namespace, target.Name, target.UID = pod.Namespace, pod.Name, pod.UID
	if err := r.Client.SubResource("resize").Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, body)); err != nil {
		return fmt.Errorf("resize pod %s/%s to CPU requests %s: %w", pod.Namespace, pod.Name, formatRequests(requests), err)
	}
	return nil
}

// awaitActuated waits until the pod's container statuses report the CPU
// requests (the kubelet applied the resize), at most actuateWait. A status
// without resources (a kubelet that does not report them) ends the wait.
func (r *Reconciler) awaitActuated(ctx context.Context, pod *corev1.Pod, want map[string]resource.Quantity) error {
	ctx, cancel := context.WithTimeout(ctx, actuateWait)
	defer cancel()
	for {
		var cur corev1.Pod
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if applied, known := actuated(&cur, want); applied || !known {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := "not applied within " + actuateWait.String()
			if c := resizeCondition(&cur); c != nil {
				msg += fmt.Sprintf(" (%s: %s %s)", c.Type, c.Reason, c.Message)
			}
			return fmt.Errorf("%s", msg)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// actuated reports whether the pod's container statuses show the CPU
// requests; known is false when the statuses carry no resources at all.
func actuated(pod *corev1.Pod, want map[string]resource.Quantity) (applied, known bool) {
	applied = true
	for _, s := range pod.Status.ContainerStatuses {
		q, ok := want[s.Name]
		if !ok {
			continue
		}
		if s.Resources == nil {
			continue
		}
		known = true
		got, ok := s.Resources.Requests[corev1.ResourceCPU]
		if !ok || got.Cmp(q) != 0 {
			applied = false
		}
	}
	return applied, known
}

// resizeCondition is the pod's PodResizePending or PodResizeInProgress
// condition, nil if neither.
func resizeCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.PodResizePending || t == corev1.PodResizeInProgress {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func formatRequests(m map[string]resource.Quantity) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		q := m[n]
		parts = append(parts, n+"="+q.String())
	}
	return strings.Join(parts, ",")
}
