package analysis

import (
	"context"
	"time"
)

// Source fetches what the canary and the stable version did over the same
// window. Implementations: Prometheus (prometheus.go: Istio, Envoy and custom
// PromQL query sets) and Fortio (fortio.go: fortio result JSON).
//
// Fetch returns an error only when the data could not be fetched at all
// (Prometheus unreachable, a query rejected): the verdict is then Error. A
// query that ran but found nothing is not an error: the Side records which
// query came back empty and the verdict is Inconclusive, naming it.
type Source interface {
	Fetch(ctx context.Context, window time.Duration) (*Sample, error)
}

// Sample is one window of data for both versions.
type Sample struct {
	Canary Side
	// Stable is nil when no stable version is configured.
	Stable *Side
	// Queries lists every query (or file) the sample came from.
	Queries []string
}

// Side is one version's data.
type Side struct {
	Name string // canary or stable
	// Latency is the latency histogram; LatencyFrom the query or file it came
	// from ("" when latency is not measured). No buckets means the query
	// returned no series.
	Latency     Histogram
	LatencyFrom string
	// Requests and Errors count requests and failed requests (5xx, and for
	// fortio also connection errors) in the window.
	Requests Measured
	Errors   Measured
	// Values are the results of Config.Queries, in order.
	Values []Measured
}

// Measured is one number a query or file produced.
type Measured struct {
	Name  string  `json:"name,omitempty"`
	From  string  `json:"from"`  // the query or file
	Value float64 `json:"value"` // valid only when Found
	Found bool    `json:"found"` // false: the query returned no series, or NaN
	// NaN: the query returned NaN (e.g. 0/0), which is not the same as no
	// series; Found is false.
	NaN bool `json:"nan,omitempty"`
}

// missing says why a Measured that is not Found has no value.
func (m Measured) missing() string {
	if m.NaN {
		return "query returned NaN: " + m.From
	}
	return "no data, query returned no series: " + m.From
}

func (m Measured) configured() bool { return m.From != "" }
