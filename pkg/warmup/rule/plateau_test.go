package rule

import (
	"slices"
	"testing"
)

// The stopping rule after a yield (stopState.restart): a pod slower only
// while it yielded its CPU is warm once its windows at full weight are as
// fast as stable's, never rejected; a pod slower at full weight too is
// rejected, but only on a block measured at full weight.
func TestPlateauAfterYieldCountsFromRestore(t *testing.T) {
	cfg := defaultsWithMax(10000)
	cfg.Reject = true
	stable := ref(3, 20)
	const yielded = 40
	slow50, slow99 := steady(yielded, 9, 400)
	run := func(t *testing.T, p50, p99 float64) (rejectedAt, convergedAt int) {
		t.Helper()
		a50, a99 := steady(30, p50, p99)
		all := windows(append(slices.Clone(slow50), a50...), append(slices.Clone(slow99), a99...), 100)
		st := stopState{pool: newBlockPool()}
		for i := 1; i <= len(all); i++ {
			if i == yielded+1 {
				st.restart(yielded)
			}
			v := cfg.next(&st, all[:i], stable)
			if i <= yielded {
				continue // the coordinator defers verdicts against a yielding pod
			}
			if v.rejected != "" {
				return i, 0
			}
			if v.converged {
				return 0, i
			}
		}
		return 0, 0
	}
	t.Run("slower only while yielding", func(t *testing.T) {
		rejectedAt, convergedAt := run(t, 3, 20)
		if rejectedAt != 0 || convergedAt == 0 || convergedAt > yielded+cfg.compareWindows()+1 {
			t.Fatalf("rejected at window %d, converged at %d; want warm within %d windows at full weight", rejectedAt, convergedAt, cfg.compareWindows()+1)
		}
	})
	t.Run("slower at full weight too", func(t *testing.T) {
		rejectedAt, convergedAt := run(t, 9, 400)
		if convergedAt != 0 || rejectedAt == 0 {
			t.Fatalf("rejected at window %d, converged at %d; want rejected", rejectedAt, convergedAt)
		}
		if full := rejectedAt - yielded; full < cfg.blockWindows(rejectedAt) {
			t.Fatalf("rejected after %d windows at full weight; want a whole block (%d) measured at full weight first", full, cfg.blockWindows(rejectedAt))
		}
	})
}
