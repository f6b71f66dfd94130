package gate

import "github.com/danki-dev/danki/pkg/warmup"

// DefaultMaxTotalQPS is the gate's process-wide load budget: the warm-up
// requests a second all warm-ups together send at most (--max-total-qps).
// The same process, at most one CPU in deploy/gate, answers the API
// server's admission requests; each warm-up gets an equal share,
// DefaultMaxTotalQPS / MaxConcurrent (100 a second at the default 10, five
// times a pod's default qps), so
// however many pods warm at once the load stays within it. Measured in
// BenchmarkAdmissionUnderWarmUp (docs/gate.md, "The load budget").
const DefaultMaxTotalQPS = 1000.0

// withinBudget is a warm-up's configuration with its rate (and the rate
// its pace ramp starts at) within its share of the load budget.
func (r *Reconciler) withinBudget(c warmup.Config) warmup.Config {
	c.QPS = r.qpsShare(c.QPS)
	c.StartQPS = min(c.StartQPS, c.QPS)
	return c
}

// qpsShare is the rate one warm-up may send: the pod's own (qps), capped at
// an equal share of the process-wide budget among the warm-ups that may run
// at once. A negative MaxTotalQPS lifts the budget.
func (r *Reconciler) qpsShare(qps float64) float64 {
	total := r.MaxTotalQPS
	if total == 0 {
		total = DefaultMaxTotalQPS
	}
	if total < 0 {
		return qps
	}
	return min(qps, total/float64(r.slots.size))
}
