// Package labdemo drives `make demo` in the lab: the sample app rolled out
// twice under the same steady user traffic — first the way teams do today
// (examples/lab/baseline: Argo's native Istio routing, fixed setWeight
// jumps, no warm-up), then with danki (examples/lab/danki: warm-up, gated
// ramp, latency analysis) — and then a bad version rolled out with danki,
// which must be aborted before many users see it.
//
// It talks to the lab's API server (client-go, Argo's clientset, kubectl for
// applying the example manifests) and the gateway; the measuring, tables and
// chart are package demo's. The lab itself (test/lab/up.sh) must be running.
package labdemo
