package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
)

// Gate judges the canary's tail latency at the current weight.
type Gate interface {
	// Check judges the window that starts at since: the ramp keeps since in
	// its state (State.GateSince), so a cumulative window survives a
	// restarted process instead of silently starting over. It reports
	// pass=true when latency holds; pass=false with a reason naming the
	// breach when it does not; err != nil when there is no verdict (too few
	// samples, source unreachable): the ramp holds, at most Plan.MaxHold.
	// An err wrapping analysis.ErrInconclusive says the source answered
	// with too few samples: after a no-verdict back-off that counts as the
	// gate answering again.
	Check(ctx context.Context, since time.Time) (pass bool, reason string, err error)
}

// LatencyGate is the Gate of a danki/latency configuration (pkg/analysis):
// the danki/istio plugin's "gate" and `danki shift ramp --gate-config`. It
// keeps no window of its own: each Check judges the window from the start
// the ramp passes in. Safe for concurrent use.
type LatencyGate struct {
	analyzer *analysis.Analyzer
}

// GateFromConfig builds a LatencyGate from a raw danki/latency
// configuration, JSON or YAML (see docs/latency.md): the danki/istio
// plugin's "gate". None (empty or null) means no gate: the ramp moves on
// time alone.
func GateFromConfig(raw json.RawMessage) (Gate, error) {
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return nil, nil
	}
	cfg, err := analysis.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return NewLatencyGate(cfg)
}

// NewLatencyGate builds a LatencyGate from a parsed danki/latency config.
func NewLatencyGate(cfg analysis.Config, opts ...analysis.Option) (*LatencyGate, error) {
	if cfg.Source == analysis.SourceLoad {
		// The gate is checked inside a reconcile; a load test runs for
		// minutes and loads the pods itself.
		return nil, errors.New("source: load is not for the ramp's gate (checked at every reconcile, it must read, not send, traffic): use istio, envoy or promql here, and source: load in an analysis step or a BlueGreen prePromotionAnalysis")
	}
	a, err := analysis.NewAnalyzer(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &LatencyGate{analyzer: a}, nil
}

// Check runs one analysis over the window from since. Fail is a breach;
// Inconclusive (errors.Is(err, analysis.ErrInconclusive)) and Error (the
// source could not be read) are "no verdict".
func (g *LatencyGate) Check(ctx context.Context, since time.Time) (bool, string, error) {
	v := g.analyzer.Analyze(ctx, since)
	switch v.Phase {
	case analysis.Pass:
		return true, v.Summary, nil
	case analysis.Fail:
		return false, v.Summary, nil
	case analysis.Inconclusive:
		return false, v.Summary, fmt.Errorf("%w: %s", analysis.ErrInconclusive, v.Summary)
	}
	err := v.Err()
	if err == nil {
		err = errors.New(v.Error)
	}
	return false, v.Summary, fmt.Errorf("latency analysis failed to measure: %w", err)
}
