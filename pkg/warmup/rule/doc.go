// Package rule is the warm-up's stopping rule: when a pod under synthetic
// load is warm, when it is a slower version, and what a bound that ends its
// warm-up early makes of it. It is one pure decision: built once from a
// validated config (New), fed a pod's windows of latencies, the stable
// pods' windows and the pod's JIT readings, in the order they were
// measured, it answers each window with a Decision — keep loading, warm,
// or rejected as slower — and, at a bound (deadline, maxRequests),
// accepted near stable or failed. It does no I/O, reads no clock and starts
// no goroutine; the warm-up (package warmup) runs the load and acts on the
// decisions.
//
// The rule, in short (docs/stopping-rule.md explains it once; docs/warmup.md
// is the user's account):
//
//   - A pod's windows are compared in two blocks: its latest quarter of
//     windows against the quarter before for the p50, the latest fifth
//     against the fifth before for the tail (p99, the share of slow
//     requests); each block at least minBlockRequests. A pod is still
//     improving while a figure got better by more than the tolerance
//     (progress.go, blockpool.go).
//   - Next to stable (stable pods loaded side by side), a pod is warm once
//     its latest requests are as fast as stable's: p50 within Tolerance,
//     p99 within StableRatio (judge.go, stable.go). Settled short of that
//     with its p50 within StableRatio, it is warm once that plateau has
//     lasted half its warm-up; settled above the reject line for half its
//     warm-up, it is a slower version (plateau.go).
//   - Without stable, it is warm once it has not improved for flatShare of
//     its windows, and, if it got faster on the way, over
//     minPlateauRequests (twice that while its tail is heavy).
//   - Where the pod exposes its JIT's compile time, a stop is held back
//     while the JIT still compiles (jit.go).
//   - At a bound, a pod not warm is accepted when its p99 is within the
//     reject line (or stableRatio with compareToStable) of stable's and its
//     p50 is no longer improving (nearstable.go); otherwise it failed.
package rule
