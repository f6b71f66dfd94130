// Package capacity finds a pod's knee: the highest request rate it serves
// within its latency and error bounds. Against one warm pod that serves no
// users (a canary at weight 0), it offers load in rising steps — each held
// for a while at a steady pace, with the warm-up's request mix, marker
// header and exact per-request latencies (pkg/warmup's engine) — until a
// step breaks a bound: p99 above a limit (absolute, or a multiple of the
// first step's), too many errors, or the pod no longer keeping up with the
// offered rate. Then it refines between the last good step and the broken
// one by bisection, so the knee is found to within a few per cent rather
// than one coarse step. The result is the curve (one row per step, as a
// load-test report would show it) and the knee, the last good rate. The
// pod is dialled as the warm-up dials it, with Istio mTLS behind a sidecar
// (Config.MTLS, in a step inherited from the warm-up's).
package capacity
