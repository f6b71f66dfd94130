package analysis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// What a long-lived front end needs around an Analyzer (the danki/latency
// metric plugin): analyzers kept per configuration, and a verdict's
// figures in the form a measurement records them.

// keptAnalyzers bounds the analyzers an Analyzers keeps. Each AnalysisRun
// has its own (templated) configuration; a handful run at once.
const keptAnalyzers = 64

// Analyzers keeps one Analyzer per raw configuration, so that measurements
// of the same configuration (an AnalysisRun's, one interval after another)
// reuse its Prometheus connections. Beyond keptAnalyzers it starts over
// (old runs' configurations, rebuilt if needed). Safe for concurrent use.
type Analyzers struct {
	opts []Option

	mu       sync.Mutex
	byConfig map[string]*Analyzer
}

// NewAnalyzers returns an empty cache of analyzers, each built with opts.
func NewAnalyzers(opts ...Option) *Analyzers {
	return &Analyzers{opts: opts, byConfig: map[string]*Analyzer{}}
}

// Get returns the analyzer for a raw configuration (JSON or YAML), parsing
// it and building the analyzer on first use. Errors are ParseConfig's and
// NewAnalyzer's; they are not kept.
func (c *Analyzers) Get(raw []byte) (*Analyzer, error) {
	key := string(raw)
	c.mu.Lock()
	a, ok := c.byConfig[key]
	c.mu.Unlock()
	if ok {
		return a, nil
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	if a, err = NewAnalyzer(cfg, c.opts...); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if existing, ok := c.byConfig[key]; ok {
		return existing, nil
	}
	if len(c.byConfig) >= keptAnalyzers {
		clear(c.byConfig)
	}
	c.byConfig[key] = a
	return a, nil
}

// Len is how many analyzers are kept.
func (c *Analyzers) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byConfig)
}

// Describe says what the analysis will query: source, window and, when
// there are any, the queries (one a line; a cumulative range shows as
// <window>).
func (a *Analyzer) Describe() map[string]string {
	md := map[string]string{"source": a.Source(), "window": a.Window()}
	if q := a.Queries(); len(q) > 0 {
		md["queries"] = strings.Join(q, "\n")
	}
	return md
}

// MeasuredValue is a verdict's every measured number, without the queries
// (a metric's metadata shows those): what a measurement's value holds.
type MeasuredValue struct {
	Phase  Phase      `json:"phase"`
	Window string     `json:"window"`
	Canary *SideStats `json:"canary,omitempty"`
	Stable *SideStats `json:"stable,omitempty"`
	Checks []Check    `json:"checks,omitempty"`
	Tail   *TailTest  `json:"tailTest,omitempty"`
}

// Figures are a verdict as a measurement records it.
type Figures struct {
	// Value is the MeasuredValue as JSON ({"error": …} if it cannot be
	// written).
	Value string
	// Metadata holds the summary and the few numbers worth seeing next to
	// it: window, {canary,stable}{Count,P99Ms,P999Ms,ErrorRate},
	// tailEValue, tailThresholdMs.
	Metadata map[string]string
}

// Figures returns the verdict's figures.
func (v Verdict) Figures() Figures {
	f := Figures{Metadata: map[string]string{"summary": v.Summary, "window": v.Window}}
	value, err := json.Marshal(MeasuredValue{Phase: v.Phase, Window: v.Window, Canary: v.Canary, Stable: v.Stable, Checks: v.Checks, Tail: v.Tail})
	if err != nil {
		f.Value = fmt.Sprintf(`{"error":%q}`, err.Error())
	} else {
		f.Value = string(value)
	}
	put := func(key string, n *float64) {
		if n != nil {
			f.Metadata[key] = strconv.FormatFloat(*n, 'g', 6, 64)
		}
	}
	for _, s := range []struct {
		name  string
		stats *SideStats
	}{{"canary", v.Canary}, {"stable", v.Stable}} {
		if s.stats == nil {
			continue
		}
		count := s.stats.Count
		put(s.name+"Count", &count)
		put(s.name+"P99Ms", s.stats.P99)
		put(s.name+"P999Ms", s.stats.P999)
		put(s.name+"ErrorRate", s.stats.ErrorRate)
	}
	if v.Tail != nil {
		put("tailEValue", &v.Tail.EValue)
		put("tailThresholdMs", &v.Tail.ThresholdMs)
	}
	return f
}
