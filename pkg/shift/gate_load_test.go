package shift

import (
	"strings"
	"testing"
)

// The ramp's gate reads traffic at every reconcile: a load source, which
// sends its own load for minutes, is refused with the way out.
func TestGateRefusesTheLoadSource(t *testing.T) {
	_, err := GateFromConfig([]byte(`{"source": "load", "load": {"service": "app-canary"}, "slo": {"p99": "1s"}}`))
	if err == nil || !strings.Contains(err.Error(), "source: load is not for the ramp's gate") {
		t.Fatalf("err %v; want the load source refused, naming where it belongs", err)
	}
}
