package shift

import "context"

// Gate judges the canary's tail latency at the current weight.
type Gate interface {
	// Check reports pass=true when latency holds; pass=false with a reason
	// naming the breach when it does not; err != nil when there is no
	// verdict yet (too few samples, source unreachable) — the ramp keeps holding.
	Check(ctx context.Context) (pass bool, reason string, err error)
}
