// Package manifests checks the Kubernetes manifests danki ships against a real
// API server (test/testenv: kube-apiserver 1.34.4 with the real Istio and Argo
// Rollouts CRDs): every YAML file under examples/ and the kustomize install
// (deploy/, deploy/http/) must pass `kubectl apply --server-side
// --dry-run=server --validate=strict`, deliberately broken manifests must be
// rejected, and the install's RBAC must let danki's own client calls through —
// and nothing without it.
// Every file with an Argo Rollouts object is applied once more to an API
// server with the CRDs of the oldest controller the compatibility matrix
// tests (make compat's v1.8.5).
//
// It has only tests; they are skipped under `go test -short`.
package manifests
