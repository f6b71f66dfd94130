// Package e2e holds end-to-end tests against the full lab (lab/scripts): a real
// API server, the lab runner's JVM pods in a network namespace, istiod +
// Envoy, Prometheus and the Argo Rollouts controller. They bring the lab up
// and down themselves, need root (for the network namespace) and are skipped
// under `go test -short`.
package e2e
