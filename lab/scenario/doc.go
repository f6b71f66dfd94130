// Package scenario drives `make demo` in the lab: the sample app rolled out
// twice under the same steady user traffic — first the way teams do today
// (lab/manifests/baseline: Argo's native Istio routing, fixed setWeight
// jumps, no warm-up), then with danki (lab/manifests/danki: warm-up, gated
// ramp, latency analysis) — and then a bad version rolled out with danki,
// which must be aborted before many users see it.
//
// make bench adds, between the baseline and danki and under the same users,
// what users would pick instead of danki: the baseline plus Istio's slow
// start (lab/manifests/slowstart: a DestinationRule with warmupDurationSecs;
// the demo reads Envoy's cluster config to show istiod emitted it) and the
// baseline plus a fixed warm-up of 100 requests per pod (lab/manifests/fixed100:
// danki/warmup with untilConverged: false), each compared with danki in
// ratios (contender ÷ danki).
//
// It talks to the lab's API server (client-go, Argo's clientset, kubectl for
// applying the example manifests) and the gateway; the measuring, tables and
// chart are package demo's. The lab itself (lab/scripts/up.sh) must be running.
package scenario
