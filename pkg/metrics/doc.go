// Package metrics holds danki's own Prometheus metrics: the warm gate's
// (Gate, on controller-runtime's registry, so they appear on the manager's
// metrics endpoint) and the Argo Rollouts plugins' (Plugin, on a registry
// the plugin process serves on --metrics-address). docs/metrics.md lists
// every metric.
//
// The design keeps the engines free of Prometheus and of globals:
//
//   - Each process builds one set (NewGate, NewPlugin) on the registry it
//     serves and hands it down; there is no package-level collector, and a
//     test builds its own on a fresh prometheus.Registry.
//   - The engines under pkg/ that count something declare the one or two
//     methods they need as a narrow interface of their own
//     (warmupstep.Observer, shift.Observer, analysis.QueryObserver);
//     *Plugin implements them, and rollouts/ wires it in. pkg/gate, which
//     owns its controller-runtime manager, uses *Gate directly.
//   - Every method is safe on a nil receiver and records nothing: a plugin
//     run without --metrics-address pays for no metric.
//   - Label values are plain words from closed sets (outcomes, actions,
//     phases). A value outside its set is recorded as "other", so no caller
//     can grow a label's cardinality by mistake. No metric carries a pod,
//     a namespace or a rollout as a label.
package metrics
