package analysis

import (
	"fmt"
	"strings"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/tmpl"
)

// DefaultPromQLUnit is promql.unit's default: seconds, the Prometheus
// convention for the le label.
const DefaultPromQLUnit = "s"

// PromQLConfig is a custom query set. Queries are templates (pkg/tmpl:
// fields only, no functions) with << and >> as delimiters (Argo resolves
// every {{…}} in a metric itself and fails on the ones it does not know):
// <<.Selector>> is this side's label matchers, <<.Window>> the range
// ("5m"), <<.Side>> "canary" or "stable", <<.Canary>> and <<.Stable>> both
// sides' matchers.
type PromQLConfig struct {
	Canary string `json:"canary"`           // label matchers, e.g. app="checkout",version="v2"
	Stable string `json:"stable,omitempty"` // label matchers of the stable version
	// Histogram must return one series per "le" (sum by (le) (increase(…[<<.Window>>]))).
	Histogram string `json:"histogram,omitempty"`
	// Requests and Errors return one number each: requests and failed
	// requests in the window. An empty Errors result counts as zero errors.
	Requests string `json:"requests,omitempty"`
	Errors   string `json:"errors,omitempty"`
	// Unit of the histogram's le label: "s" (Prometheus convention, default) or "ms".
	Unit string `json:"unit,omitempty"`
}

// withDefaults returns the block with its default unit.
func (pc PromQLConfig) withDefaults() PromQLConfig {
	if pc.Unit == "" {
		pc.Unit = DefaultPromQLUnit
	}
	return pc
}

// compile checks a defaulted promql block used as the source; problems are
// added under "promql.".
func (pc PromQLConfig) compile(p *config.Errors) {
	if pc.Canary == "" {
		p.Addf("promql.canary", "missing; set the label matchers that select the canary's series, e.g. app=\"checkout\",version=\"v2\"")
	}
	if pc.Unit != "s" && pc.Unit != "ms" {
		p.Addf("promql.unit", "%q is not a unit; use s (seconds, the Prometheus convention) or ms", pc.Unit)
	}
	for _, f := range []struct{ name, text string }{{"histogram", pc.Histogram}, {"requests", pc.Requests}, {"errors", pc.Errors}} {
		if f.text != "" {
			compileTemplate(p, "promql."+f.name, f.text)
		}
	}
	if pc.Errors != "" && pc.Requests == "" {
		p.Addf("promql.requests", "missing; promql.errors needs it as the error rate's denominator")
	}
}

// queries is the Prometheus query set of a defaulted promql block.
func (pc PromQLConfig) queries() promQueries {
	q := promQueries{canary: pc.Canary, stable: pc.Stable, hasStable: pc.Stable != "", leScale: 1,
		histogram: pc.Histogram, requests: pc.Requests, errors: pc.Errors}
	if pc.Unit == "s" {
		q.leScale = 1000
	}
	return q
}

// QueryCheck is a PromQL value check, e.g. the fraction of time the canary
// spends in GC pauses. The query is a template like PromQLConfig's and must
// return a single number.
type QueryCheck struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	// Canary and Stable are label matchers for <<.Selector>>; they default to
	// promql.canary and promql.stable.
	Canary string `json:"canary,omitempty"`
	Stable string `json:"stable,omitempty"`
	// Max is the limit for the canary's value; MaxRatio the limit for
	// canary ÷ stable (at least 1). At least one is required.
	Max      *config.Number `json:"max,omitempty"`
	MaxRatio *config.Number `json:"maxRatio,omitempty"`
}

func (c Config) compileQueries(p *config.Errors, r *Rules) {
	if len(c.Queries) > 0 && !c.readsPrometheus() {
		p.Addf("queries", "need Prometheus, but source is %s; use source istio, envoy or promql", c.Source)
		return
	}
	seen := map[string]bool{}
	for i, q := range c.Queries {
		field := fmt.Sprintf("queries[%d]", i)
		if q.Name == "" {
			p.Addf(field+".name", "missing; name the check, e.g. gc-pause-fraction")
		} else if seen[q.Name] {
			p.Addf(field+".name", "%q is used twice; names must be unique", q.Name)
		}
		seen[q.Name] = true
		if q.Query == "" {
			p.Addf(field+".query", "missing; write the PromQL, e.g. sum(rate(jvm_gc_pause_seconds_sum{<<.Selector>>}[<<.Window>>]))")
		} else {
			compileTemplate(p, field+".query", q.Query)
		}
		if q.Canary == "" && strings.Contains(q.Query, ".Selector") {
			p.Addf(field+".canary", "missing; set the label matchers of the canary's series (or promql.canary)")
		}
		rule := queryRule{name: q.Name}
		if q.Max != nil {
			rule.max = compilePositive(p, field+".max", float64(*q.Max))
		}
		if q.MaxRatio != nil {
			rule.maxRatio, _ = compileRatio(p, field+".maxRatio", float64(*q.MaxRatio))
			if q.Stable == "" && strings.Contains(q.Query, ".Selector") {
				p.Addf(field+".stable", "missing; maxRatio compares with stable, set the stable's label matchers (or promql.stable)")
			}
		}
		if q.Max == nil && q.MaxRatio == nil {
			p.Addf(field, "set max and/or maxRatio")
		}
		r.queries = append(r.queries, rule)
	}
}

// compileTemplate parses a query template and renders it once with sample
// fields, so that a query over its budget (tmpl.DefaultMaxOutput) is
// refused with the config, naming its field.
func compileTemplate(p *config.Errors, field, text string) {
	t, err := parseQueryTemplate(field, text)
	if err != nil {
		p.Addf(field, "%v", err)
		return
	}
	if _, err := t.render(QueryData{Selector: `a="b"`, Window: "5m", Side: "canary", Canary: `a="b"`, Stable: `a="c"`}); err != nil {
		p.Addf(field, "%v (fields: <<.Selector>> <<.Window>> <<.Side>> <<.Canary>> <<.Stable>>)", err)
	}
}

// QueryData is what a PromQL template sees.
type QueryData struct {
	Selector string // this side's label matchers
	Window   string // PromQL range, e.g. 5m
	Side     string // canary or stable
	Canary   string // the canary's label matchers
	Stable   string // the stable's label matchers
}

// queryFields are QueryData's fields as templates name them, in the order
// of QueryData.values.
var queryFields = []string{"Selector", "Window", "Side", "Canary", "Stable"}

func (d QueryData) values() []string {
	return []string{d.Selector, d.Window, d.Side, d.Canary, d.Stable}
}

// queryTemplate is a parsed PromQL template and its name for messages.
type queryTemplate struct {
	name string
	t    *tmpl.Template[struct{}]
}

func (q *queryTemplate) render(d QueryData) (string, error) {
	return q.t.Render(struct{}{}, d.values())
}

func parseQueryTemplate(name, text string) (*queryTemplate, error) {
	t, err := tmpl.Parse(text, tmpl.Options[struct{}]{Delims: tmpl.Delims{Left: "<<", Right: ">>"}, Fields: queryFields})
	if err != nil {
		return nil, err
	}
	return &queryTemplate{name: name, t: t}, nil
}
