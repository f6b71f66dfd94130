package podcpu

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
