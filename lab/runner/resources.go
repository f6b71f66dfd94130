package runner

import (
	corev1 "k8s.io/api/core/v1"
)

// kubelet's constants for mapping CPU to the cgroup v1 cpu controller
// (pkg/kubelet/cm/helpers_linux.go): 1 CPU = 1024 shares, shares never
// below 2 (the kernel's minimum; also what BestEffort gets), CFS period
// 100 ms, and a quota never below 1 ms (the kernel refuses less).
const (
	sharesPerCPU  = 1024
	minShares     = 2
	maxShares     = 262144
	cfsPeriodUs   = 100000
	minCFSQuotaUs = 1000
)

// cgroupValues are the cgroup v1 settings of one group: cpu.shares,
// cpu.cfs_quota_us (-1: no limit; cpu.cfs_period_us is cfsPeriodUs) and
// memory.limit_in_bytes (-1: no limit).
type cgroupValues struct {
	Shares      int64
	QuotaUs     int64
	MemoryBytes int64
}

// podCgroupValues is what the runner applies to one pod: its QoS class
// (which decides where its group lives), the pod group's values and one set
// per container (the group its process runs in), as kubelet does.
type podCgroupValues struct {
	QoS        corev1.PodQOSClass
	Pod        cgroupValues
	Containers map[string]cgroupValues // by container name
	// CPURequestMilli is the pod's summed CPU request: kubelet sets the
	// burstable QoS group's shares to the sum over its pods.
	CPURequestMilli int64
}

// milliCPUToShares is kubelet's MilliCPUToShares: requests → cpu.shares,
// so CPU time under contention is split in proportion to requests.
func milliCPUToShares(milli int64) int64 {
	if milli <= 0 {
		return minShares
	}
	shares := milli * sharesPerCPU / 1000
	return min(max(shares, minShares), maxShares)
}

// milliCPUToQuota is kubelet's MilliCPUToQuota: limits → cpu.cfs_quota_us
// per cfsPeriodUs period; -1 (unlimited) without a limit.
func milliCPUToQuota(milli int64) int64 {
	if milli <= 0 {
		return -1
	}
	return max(milli*cfsPeriodUs/1000, minCFSQuotaUs)
}

// effectiveResources applies the API server's defaulting a pod created
// from a manifest already has: a resource with a limit but no request
// requests its limit. Done here too so pods built in tests (or by a client
// that skipped defaulting) map the same way.
func effectiveResources(c corev1.Container) (requests, limits corev1.ResourceList) {
	requests = corev1.ResourceList{}
	for name, q := range c.Resources.Requests {
		requests[name] = q
	}
	limits = c.Resources.Limits
	for name, q := range limits {
		if _, ok := requests[name]; !ok {
			requests[name] = q
		}
	}
	return requests, limits
}

// podQOS is the pod's QoS class as Kubernetes computes it (GetPodQOS), from
// CPU and memory only: BestEffort when no container requests or limits
// either, Guaranteed when every container has CPU and memory limits equal
// to its requests, Burstable otherwise. Init containers count, as they do
// there, although the runner runs none.
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	declared, guaranteed := false, true
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		requests, limits := effectiveResources(c)
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := requests[name]
			lim, hasLim := limits[name]
			hasReq, hasLim = hasReq && !req.IsZero(), hasLim && !lim.IsZero()
			if hasReq || hasLim {
				declared = true
			}
			if !hasLim || !hasReq || req.Cmp(lim) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !declared:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}

// milliCPU is a CPU quantity in millicores, rounded up as kubelet does
// ("1.5" → 1500, "250m" → 250, "0.0001" → 1).
func milliCPU(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	return q.MilliValue()
}

// memoryBytes is a memory quantity in bytes, rounded up ("1Gi" → 1073741824,
// "1G" → 1000000000, "100m" → 1).
func memoryBytes(l corev1.ResourceList, name corev1.ResourceName) (int64, bool) {
	q, ok := l[name]
	if !ok || q.IsZero() {
		return 0, false
	}
	return q.Value(), true
}

// cgroupValuesFor maps a pod's resources to cgroup values the way kubelet
// does (ResourceConfigForPod for the pod group, the container runtime's
// config for each container):
//   - container: shares from its CPU request (the limit when it has no
//     request), CFS quota from its CPU limit, memory limit from its memory
//     limit; no limit → -1.
//   - pod: shares from the summed requests; the quota and memory limit
//     summed from the containers' limits, but only when every container has
//     one (a container without a limit makes the pod unlimited in it).
//     BestEffort pods get the minimum shares and no limits.
func cgroupValuesFor(pod *corev1.Pod) podCgroupValues {
	v := podCgroupValues{QoS: podQOS(pod), Containers: map[string]cgroupValues{}}
	var cpuReq, cpuLim, memLim int64
	cpuLimAll, memLimAll := true, true
	for _, c := range pod.Spec.Containers {
		requests, limits := effectiveResources(c)
		cv := cgroupValues{
			Shares:      milliCPUToShares(milliCPU(requests, corev1.ResourceCPU)),
			QuotaUs:     milliCPUToQuota(milliCPU(limits, corev1.ResourceCPU)),
			MemoryBytes: -1,
		}
		if b, ok := memoryBytes(limits, corev1.ResourceMemory); ok {
			cv.MemoryBytes = b
			memLim += b
		} else {
			memLimAll = false
		}
		if m := milliCPU(limits, corev1.ResourceCPU); m > 0 {
			cpuLim += m
		} else {
			cpuLimAll = false
		}
		cpuReq += milliCPU(requests, corev1.ResourceCPU)
		v.Containers[c.Name] = cv
	}
	v.Pod = cgroupValues{Shares: minShares, QuotaUs: -1, MemoryBytes: -1}
	if v.QoS == corev1.PodQOSBestEffort {
		return v
	}
	v.CPURequestMilli = cpuReq
	v.Pod.Shares = milliCPUToShares(cpuReq)
	if cpuLimAll && len(pod.Spec.Containers) > 0 {
		v.Pod.QuotaUs = milliCPUToQuota(cpuLim)
	}
	if memLimAll && len(pod.Spec.Containers) > 0 {
		v.Pod.MemoryBytes = memLim
	}
	return v
}
