// Package testenv starts a real Kubernetes API server (controller-runtime
// envtest, with the kube-apiserver and etcd that lab/scripts/build.sh builds) and
// installs the real Istio and Argo Rollouts CRDs, read from the modules pinned
// in go.mod. Tests get typed Kubernetes, Istio and Argo Rollouts clients.
//
// Tests that use it are integration tests: they are skipped under `go test
// -short` and fail with a hint when the binaries have not been built.
package testenv
