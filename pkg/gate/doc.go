// Package gate is danki's warm gate: a small Kubernetes controller that keeps
// a new pod out of every load balancer until it is warm.
//
// A pod opts in with the annotation danki.dev/warm-up (wellknown.WarmUpAnnotation):
// "true" for the defaults, or a warm-up configuration, the danki/warmup
// step's schema (docs/warmup.md, mtls included: a pod behind a STRICT
// sidecar is warmed over danki's own Istio mTLS) plus onFailure, retries,
// port and yieldCPU. The
// mutating webhook (Injector) adds the readiness gate danki.dev/warm
// (wellknown.WarmCondition) to such pods as they are created, and the label
// wellknown.GatedLabel: the gate's cache holds only pods with it. The API server sends
// the webhook only opted-in pods (deploy/gate's matchConditions). Kubernetes
// counts a pod with a readiness gate Ready only when the gate's condition is
// True, so until then its
// Services' EndpointSlices list it as not ready and no load balancer —
// kube-proxy, Istio, an ingress — sends it a user request.
//
// The Reconciler watches pods with the gate. When a pod's containers are
// ready and its condition is not True, it warms the pod at its pod IP with
// pkg/warmup (the same engine, stopping rule and configuration as the
// danki/warmup step), showing the progress in the condition's message, and
// sets the condition True once the latency converged. While a Burstable pod
// warms, its CPU request is lowered in place to YieldCPURequest (pods/resize)
// and put back before the condition is set (Config.YieldCPU): the cold JVM
// gets the kernel's least CPU weight, so the users' pods on its node run
// first. What it puts back is never more than the pod's own request, from
// records on the pod that its author cannot write (see
// wellknown.CPURequestsAnnotation). A warm-up that fails
// is retried with back-off; after the last attempt the pod stays un-ready
// (onFailure: stayUnready, the default: fail closed) or becomes Ready anyway
// (becomeReady: fail open), with an Event either way. A pod deleted, or
// whose containers stop being ready, stops its load at once. Warm-ups of
// many pods run concurrently, at most MaxConcurrent at a time, shared
// fairly between namespaces; a slot waits for a pod's health at most
// MaxHealthWait. What one tenant's pod makes the gate do is bounded
// (bounds.go): a reconcile's time, the annotation's parse, the API calls;
// host-network pods are never warmed. The webhook can require the API
// server's client certificate (Options.WebhookClientCA); without it, the
// record it signs is bound to the pod's admission.
//
// Run starts both in a controller-runtime manager (leader election, health
// and metrics endpoints — the latter with the gate's own metrics,
// pkg/metrics.Gate on controller-runtime's registry, docs/metrics.md — a pod
// cache holding the gated pods only), renews a
// self-managed webhook certificate and keeps the webhook configuration's
// caBundle trusting it (certs.go), and bounds all warm-ups' load together
// (MaxTotalQPS); `danki gate` is its command line, deploy/gate its
// manifests, docs/gate.md its guide ("Blast radius").
package gate
