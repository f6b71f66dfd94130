package warmup

import (
	"context"
	"errors"
)

// Outcomes of a warm-up, in a word (OutcomeOf): the outcome label of
// danki's own metrics (docs/metrics.md).
const (
	OutcomeWarm         = "warm"
	OutcomeNotConverged = "not_converged"
	OutcomeRejected     = "rejected"
	OutcomeFailed       = "failed"
	OutcomeStopped      = "stopped"
)

// OutcomeOf names how a warm-up that returned err ended: warm (nil),
// stopped (its context ended), not_converged, rejected (slower than
// stable) or failed (anything else).
func OutcomeOf(err error) string {
	switch {
	case err == nil:
		return OutcomeWarm
	case errors.Is(err, context.Canceled):
		return OutcomeStopped
	case errors.Is(err, ErrNotConverged):
		return OutcomeNotConverged
	case errors.Is(err, ErrSlowerVersion):
		return OutcomeRejected
	}
	return OutcomeFailed
}
