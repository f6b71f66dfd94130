// Package labrunner runs the pods bound to the lab's node as local processes,
// in place of a kubelet and a container runtime.
//
// The lab (test/lab) has a real API server, scheduler and controllers but no
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
// on the probe path, as the kubelet does). Pods whose images map to nothing
// are marked Running and Ready without a process, so a plain Deployment still
// behaves as on a fake (kwok) node. When a pod is deleted the Runner stops
// its processes, releases the IP and removes the pod from the API server.
package labrunner
