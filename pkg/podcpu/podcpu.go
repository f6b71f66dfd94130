package podcpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
)

// YieldRequest is the CPU request a warming pod's containers have while
// danki warms it: 1m maps to cpu.shares 2 (cpu.weight 1), the kernel's
// least weight, so under contention the users' pods on the node run first
// and the warming JVM takes only the idle CPU.
const YieldRequest = "1m"

// Yield is YieldRequest as a quantity.
func Yield() resource.Quantity { return resource.MustParse(YieldRequest) }

// ResizePatch is the strategic merge patch for the pods/resize subresource
// that sets the CPU requests of the named containers (other resources and
// containers are left alone), applied only while the pod is at
// resourceVersion when one is given (a Conflict otherwise).
func ResizePatch(requests map[string]resource.Quantity, resourceVersion string) ([]byte, error) {
	type ctr struct {
		Name      string `json:"name"`
		Resources struct {
			Requests map[string]string `json:"requests"`
		} `json:"resources"`
	}
	var patch struct {
		Metadata *struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata,omitempty"`
		Spec struct {
			Containers []ctr `json:"containers"`
		} `json:"spec"`
	}
	if resourceVersion != "" {
		patch.Metadata = &struct {
			ResourceVersion string `json:"resourceVersion"`
		}{resourceVersion}
	}
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		c := ctr{Name: name}
		q := requests[name]
		c.Resources.Requests = map[string]string{string(corev1.ResourceCPU): q.String()}
		patch.Spec.Containers = append(patch.Spec.Containers, c)
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("resize patch: %w", err)
	}
	return body, nil
}

// CannotYield says why the pod's CPU request cannot be lowered in place
// for the named containers ("" when it can): only a Burstable pod's can (a
// Guaranteed pod's requests equal its limits, and a resize may not change
// the QoS class), and not a container that restarts to resize (a restart
// would make it cold).
func CannotYield(pod *corev1.Pod, containers map[string]resource.Quantity) string {
	if pod.Status.QOSClass != corev1.PodQOSBurstable {
		return fmt.Sprintf("QoS class %s: only a Burstable pod's CPU request can be lowered in place", pod.Status.QOSClass)
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := containers[c.Name]; !ok {
			continue
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == corev1.ResourceCPU && p.RestartPolicy == corev1.RestartContainer {
				return fmt.Sprintf("container %s resizes CPU by restarting (resizePolicy RestartContainer): a restart would make it cold", c.Name)
			}
		}
	}
	return ""
}

// HasRequests reports whether the pod's spec requests exactly these CPU
// quantities for the named containers.
func HasRequests(pod *corev1.Pod, want map[string]resource.Quantity) bool {
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

// Actuated reports whether the pod's container statuses show the CPU
// requests (the kubelet applied the resize); known is false when the
// statuses carry no resources at all (a kubelet that does not report them).
func Actuated(pod *corev1.Pod, want map[string]resource.Quantity) (applied, known bool) {
	applied = true
	for _, s := range pod.Status.ContainerStatuses {
		q, ok := want[s.Name]
		if !ok || s.Resources == nil {
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

// ResizeCondition is the pod's PodResizePending or PodResizeInProgress
// condition, nil if neither: why a resize is not applied yet.
func ResizeCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.PodResizePending || t == corev1.PodResizeInProgress {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Format prints requests by container, sorted: "app=250m,worker=1".
func Format(m map[string]resource.Quantity) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		q := m[n]
		parts = append(parts, n+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// ActuateWait bounds how long a restore waits for the kubelet to apply the
// restored request before the pod is reported warm anyway.
const ActuateWait = 15 * time.Second

// AwaitActuated polls get (every 250 ms, at most ActuateWait) until the
// pod's container statuses report the CPU requests want: the kubelet
// applied the resize. A pod gone, or a kubelet that reports no resources,
// ends the wait with no error; an error from get is retried. Not applied
// in time is an error naming the pod's resize condition, when it has one
// (the node filled meanwhile: Deferred).
func AwaitActuated(ctx context.Context, get func(context.Context) (*corev1.Pod, error), want map[string]resource.Quantity) error {
	var last *corev1.Pod
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, ActuateWait, true, func(ctx context.Context) (bool, error) {
		pod, err := get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			lastErr = err
			return false, nil
		}
		last = pod
		applied, known := Actuated(pod, want)
		return applied || !known, nil
	})
	if err == nil {
		return nil
	}
	// The caller's context may end first (the warm-up's deadline): say so,
	// not ActuateWait.
	msg := "not applied by the kubelet within " + ActuateWait.String()
	if ctx.Err() != nil {
		msg = "not applied by the kubelet before the wait ended"
	}
	switch {
	case last != nil:
		if c := ResizeCondition(last); c != nil {
			msg += fmt.Sprintf(" (%s: %s %s)", c.Type, c.Reason, c.Message)
		}
	case lastErr != nil:
		msg += fmt.Sprintf(" (read the pod: %v)", lastErr)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}
