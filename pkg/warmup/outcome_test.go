package warmup

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestOutcomeOf(t *testing.T) {
	for err, want := range map[error]string{
		nil: OutcomeWarm,
		fmt.Errorf("warm-up stopped: %w", context.Canceled):   OutcomeStopped,
		fmt.Errorf("%w: deadline 2m passed", ErrNotConverged): OutcomeNotConverged,
		fmt.Errorf("%w: p99 40ms vs 10ms", ErrSlowerVersion):  OutcomeRejected,
		fmt.Errorf("%w: 200 × HTTP 500", ErrTargetFailing):    OutcomeFailed,
		fmt.Errorf("health: %w", ErrUnhealthy):                OutcomeFailed,
		errors.New("no targets to warm: give URLs or pods"):   OutcomeFailed,
	} {
		if got := OutcomeOf(err); got != want {
			t.Errorf("OutcomeOf(%v) = %q, want %q", err, got, want)
		}
	}
}
