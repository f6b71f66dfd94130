// Package runner runs the pods bound to the lab's node as local processes,
// in place of a kubelet and a container runtime.
//
// The lab (lab/scripts) has a real API server, scheduler and controllers but no
// kubelet. The Runner watches the pods scheduled to its node and, for each,
// starts the command the container's image maps to (for example
// danki.dev/sample-app:v2 → the sample app's jar at version v2), with the
// pod's environment, bound to an IP it assigns from the node's pod CIDR. The
// address lives on an interface inside a network namespace the lab creates,
// so host processes (Envoy, Prometheus, the Argo Rollouts controller) reach
// pods through a veth pair exactly as they would reach pod IPs in a cluster,
// and EndpointSlices accept the addresses (they reject loopback ones).
//
// The Runner owns the pod status for its node: Running once the processes
// started, Ready once each container's readiness probe answers (an HTTP GET
// on the probe path, as the kubelet does) and every readiness gate's
// condition in the pod's status is True (spec.readinessGates, as the kubelet
// does: danki's warm gate keeps a pod out of its Services this way). Pods whose images map to nothing
// are marked Running and Ready without a process, so a plain Deployment still
// behaves as on a fake (kwok) node. When a pod is deleted the Runner stops
// its processes, releases the IP and removes the pod from the API server.
//
// Pods get the CPU and memory their resources say, as under kubelet (with
// its cgroupfs driver, on cgroup v1). The Runner creates its own group, the
// lab's "kubepods" (Config.CgroupParent, default danki-lab), in the cpu,
// cpuacct and memory hierarchies below its own group there, with QoS groups
// burstable/ and besteffort/ and one group per pod (pod<uid>) and per
// container, and maps the resources with kubelet's formulas: cpu.shares =
// CPU request in millicores × 1024 / 1000 (at least 2; BestEffort 2),
// cpu.cfs_quota_us = CPU limit × the 100 ms period (-1 without a limit),
// memory.limit_in_bytes = the memory limit; a limit without a request is
// also the request, as the API server defaults it. A pod's process joins
// its container's groups before it execs (a shell wrapper writes its PID to
// cgroup.procs, then execs the command), so every thread and child the
// program starts is limited from its first instruction. Groups are removed
// when the pod stops (killing what is still in them) and when the Runner
// stops. An in-place resize (pods/resize changes a running pod's resources)
// is applied to the pod's groups and the burstable sum without restarting
// its processes, and reported in the container statuses' resources, as
// kubelet does. Without cgroup v1 cpu and memory controllers, or without root,
// the Runner warns once and runs pods without limits.
package runner
