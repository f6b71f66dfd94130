// Package podcpu changes a running pod's CPU request in place (the
// pods/resize subresource, Kubernetes ≥ 1.33) for the two parts of danki
// that let a warming pod yield the node's CPU to the pods serving users:
// the warm gate (pkg/gate) and the danki/warmup step (pkg/warmupstep).
// It holds what both need — the least request (YieldRequest), the resize
// patch, whether a pod can yield in place, and whether the kubelet applied
// a resize — and nothing of either's records: who may restore what is each
// caller's own rule.
package podcpu
