// Package integration holds tests that run danki's resources against a real
// Kubernetes API server with the real Istio and Argo Rollouts CRDs (see
// test/testenv). They are skipped under `go test -short`.
package integration
