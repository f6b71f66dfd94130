package analysis

import (
	"errors"
	"strconv"
)

// Phase is the outcome of one analysis.
type Phase string

// The four outcomes. Only Pass lets a canary proceed; Inconclusive means "not
// enough data yet" and Error "could not measure" — neither is a pass.
const (
	Pass         Phase = "Pass"
	Fail         Phase = "Fail"
	Inconclusive Phase = "Inconclusive"
	Error        Phase = "Error"
)

// ErrInconclusive is returned (wrapped) by a gate's Check (shift.LatencyGate)
// when there is not enough data for a verdict yet: the caller keeps holding.
var ErrInconclusive = errors.New("latency analysis inconclusive")

// Verdict is the outcome with every number it was decided on.
type Verdict struct {
	Phase   Phase      `json:"phase"`
	Summary string     `json:"summary"` // one line for humans
	Window  string     `json:"window"`
	Canary  *SideStats `json:"canary,omitempty"`
	Stable  *SideStats `json:"stable,omitempty"`
	Checks  []Check    `json:"checks,omitempty"`
	Tail    *TailTest  `json:"tailTest,omitempty"`
	Queries []string   `json:"queries,omitempty"`
	Error   string     `json:"error,omitempty"`

	err error
}

// Err is the error behind an Error verdict.
func (v Verdict) Err() error { return v.err }

// SideStats are one version's measured numbers; latencies in milliseconds.
// A nil field was not measured (or had no data).
type SideStats struct {
	Count     float64  `json:"count"` // latency observations
	Requests  *float64 `json:"requests,omitempty"`
	Errors    *float64 `json:"errors,omitempty"`
	ErrorRate *float64 `json:"errorRate,omitempty"`
	P50       *float64 `json:"p50Ms,omitempty"`
	P90       *float64 `json:"p90Ms,omitempty"`
	P95       *float64 `json:"p95Ms,omitempty"`
	P99       *float64 `json:"p99Ms,omitempty"`
	P999      *float64 `json:"p999Ms,omitempty"`
	Min       *float64 `json:"minMs,omitempty"`
	Max       *float64 `json:"maxMs,omitempty"`
	// AboveMs holds, per percentile key, the highest finite bucket bound
	// when that percentile lies in the +Inf bucket: it is above that bound,
	// by an unknown amount (its pNNMs field is then unset).
	AboveMs map[string]float64 `json:"aboveMs,omitempty"`
	Values  map[string]float64 `json:"values,omitempty"`
}

// quantileKey is the key (p99, p999) of quantile q, or its value as text.
func quantileKey(q float64) string {
	for _, qs := range quantiles {
		if qs.q == q {
			return qs.key
		}
	}
	return strconv.FormatFloat(q, 'g', -1, 64)
}

// Percentile returns the percentile by key (p50, p90, p95, p99, p999).
func (s *SideStats) Percentile(key string) *float64 {
	if s == nil {
		return nil
	}
	switch key {
	case "p50":
		return s.P50
	case "p90":
		return s.P90
	case "p95":
		return s.P95
	case "p99":
		return s.P99
	case "p999":
		return s.P999
	}
	return nil
}

func (v Verdict) hasCheck(name string) bool {
	for _, c := range v.Checks {
		if c.Name == name {
			return true
		}
	}
	return false
}

// Check is one SLO's outcome.
type Check struct {
	Name    string   `json:"name"` // p99, ratio:p99, max, error-rate, tail-test, query:<name>, query-ratio:<name>
	Phase   Phase    `json:"result"`
	Value   *float64 `json:"value,omitempty"`
	Limit   float64  `json:"limit"`
	Unit    string   `json:"unit,omitempty"` // ms, ratio, fraction, e-value
	Message string   `json:"message"`
}
