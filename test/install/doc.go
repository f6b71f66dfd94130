// Package install checks what an operator installs against the code and the
// docs, without an API server:
//
//   - the plugins' RBAC: the API calls the plugins' code makes (derived from
//     its typed client calls), the rules of deploy/rbac (the ClusterRole
//     danki-plugins and the Role danki-mesh-identity), the chart's rendered
//     copies of them, and docs/install.md's RBAC table are one list;
//   - the chart's alerts: every metric a PrometheusRule expression names is
//     one pkg/metrics registers, and docs/metrics.md lists every alert.
//
// test/manifests runs the same calls against a real API server. The chart is
// rendered with the helm hack/helm.sh builds (cached in .cache/tools).
//
// It has only tests.
package install
