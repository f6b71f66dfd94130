// Package rollouts holds danki's Argo Rollouts plugins: thin adapters from
// Argo's plugin RPC types to the plain-Go packages under pkg/.
//
// One binary serves all three plugin kinds. The Argo Rollouts controller
// starts it through hashicorp/go-plugin with ARGO_ROLLOUTS_RPC_PLUGIN set to
// "step", "trafficrouter" or "metricprovider"; Serve reads that value and
// serves the matching plugin:
//
//	step           -> danki/warmup   (warm canary pods until latency converges)
//	trafficrouter  -> danki/istio    (gradual, latency-gated VirtualService weights)
//	metricprovider -> danki/latency  (tail-latency SLOs in AnalysisTemplates)
//
// Each adapter file registers itself with register in its init function.
// The controller keeps one plugin process per plugin name and calls it from up
// to ten reconcile workers at once, so every adapter is safe for concurrent use.
// Plugins never write to stdout: go-plugin owns it.
package rollouts
