package analysis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrInconclusive is returned (wrapped) by Gate.Check when there is not
// enough data for a verdict yet: the caller keeps holding.
var ErrInconclusive = errors.New("latency analysis inconclusive")

// Gate answers "do the tail-latency SLOs hold?" for pkg/shift's traffic ramp.
// It satisfies shift's gate interface structurally:
//
//	Check(ctx context.Context) (pass bool, reason string, err error)
//
// With window: cumulative (the default) the window runs from the Gate's
// creation, so the sample grows from check to check as the tail test's
// anytime guarantee assumes. Safe for concurrent use.
type Gate struct {
	analyzer *Analyzer
	since    time.Time

	mu   sync.Mutex
	last Verdict
}

// NewGate builds a Gate from the same Config the danki/latency metric plugin
// uses.
func NewGate(cfg Config, opts ...Option) (*Gate, error) {
	a, err := NewAnalyzer(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &Gate{analyzer: a, since: a.now()}, nil
}

// Check runs one analysis. pass=true when every SLO holds; pass=false with a
// reason naming the breach on Fail; err != nil when there is no verdict yet
// (Inconclusive: errors.Is(err, ErrInconclusive); Error: the fetch error).
func (g *Gate) Check(ctx context.Context) (bool, string, error) {
	v := g.analyzer.Analyze(ctx, g.since)
	g.mu.Lock()
	g.last = v
	g.mu.Unlock()
	switch v.Phase {
	case Pass:
		return true, v.Summary, nil
	case Fail:
		return false, v.Summary, nil
	case Inconclusive:
		return false, v.Summary, fmt.Errorf("%w: %s", ErrInconclusive, v.Summary)
	}
	err := v.Err()
	if err == nil {
		err = errors.New(v.Error)
	}
	return false, v.Summary, fmt.Errorf("latency analysis failed to measure: %w", err)
}

// Last returns the verdict of the latest Check, with all its numbers.
func (g *Gate) Last() Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// Since is the start of the cumulative window.
func (g *Gate) Since() time.Time { return g.since }
