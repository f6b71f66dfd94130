package rollouts

import (
	"encoding/json"
	"strings"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/shift"
)

// gateFromConfig builds the danki/istio ramp's latency gate from the plugin
// configuration's "gate" field, which takes the same configuration as a
// danki/latency metric (see docs/latency.md). No gate (empty or null) means
// the ramp moves on time alone. The gate keeps no window of its own: the
// ramp passes it the window start kept in its state.
func gateFromConfig(raw json.RawMessage) (shift.Gate, error) {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil, nil
	}
	cfg, err := analysis.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return shift.NewLatencyGate(cfg)
}
