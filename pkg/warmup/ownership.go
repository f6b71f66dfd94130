package warmup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// OwnerCheckInterval is how often a running warm-up (and a danki/latency
// load measurement) checks that what started it still exists: Argo Rollouts
// calls neither Abort nor Terminate for a Rollout (or AnalysisRun) that is
// deleted, so without the check the load would run on to its deadline at
// addresses that may belong to other pods by then.
const OwnerCheckInterval = 5 * time.Second

// OwnerUnknownLimit is how long the owner check may fail (the API server
// unreachable, no permission) before the load stops anyway: load that
// nobody can vouch for does not run on to its deadline.
const OwnerUnknownLimit = time.Minute

// ErrOwnerGone is wrapped by an owner check's error when the owner is gone
// or is not the one that started the load any more (deleted, created again
// with another UID, or moved to another revision).
var ErrOwnerGone = errors.New("owner gone")

// WatchOwner calls check every `every` (≤ 0: OwnerCheckInterval) until ctx
// ends, and calls stop once with the reason when check reports the owner
// gone (an error wrapping ErrOwnerGone) or has failed otherwise for longer
// than OwnerUnknownLimit. It blocks: run it in its own goroutine.
func WatchOwner(ctx context.Context, every time.Duration, check func(context.Context) error, log *slog.Logger, stop func(reason error)) {
	if every <= 0 {
		every = OwnerCheckInterval
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var failingSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
		err := check(cctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			failingSince = time.Time{}
		case errors.Is(err, ErrOwnerGone):
			log.Info("stopping: the owner is gone", "reason", err)
			stop(err)
			return
		default:
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			log.Warn("cannot check that the owner still exists", "since", failingSince, "err", err)
			if time.Since(failingSince) >= OwnerUnknownLimit {
				stop(fmt.Errorf("%w: could not be checked for %s: %w", ErrOwnerGone, OwnerUnknownLimit, err))
				return
			}
		}
	}
}
