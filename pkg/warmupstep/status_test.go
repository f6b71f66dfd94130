package warmupstep

import (
	"encoding/json"
	"testing"
)

// The status Argo stores (rollout.status.canary.stepPluginStatuses[].status)
// keeps its wire shape: one stored by an earlier danki reads back and
// writes out byte for byte.
func TestStatusWireShape(t *testing.T) {
	const stored = `{"runID":"shop/cart/h1/2","canaryHash":"h1","step":2,"startedAt":"2026-11-01T10:00:00Z","restarts":1,"phase":"load",` +
		`"pods":[{"name":"cart-h1-a","windows":4,"lastP99":"12ms","converged":true}],"converged":1,"requests":1200,"windows":4,` +
		`"firstP99":"80ms","lastP99":"12ms","stableP99":"10ms","p99Trend":["20ms","12ms"],"paceQPS":50,"backoffs":1,` +
		`"neighbours":"stable p90 12ms","message":"warming 1 pod(s)"}`
	st := ParseStatus([]byte(stored))
	if st == nil || st.Phase != PhaseLoad || st.Phase.Final() {
		t.Fatalf("ParseStatus = %+v", st)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != stored {
		t.Errorf("status written as\n%s\nwant\n%s", raw, stored)
	}
}
