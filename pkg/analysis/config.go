package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/prometheus/common/model"
)

// Source names accepted in Config.Source.
const (
	SourceIstio  = "istio"
	SourceEnvoy  = "envoy"
	SourcePromQL = "promql"
	SourceFortio = "fortio"
	// SourceLoad sends the measurement's own synthetic load (load.go).
	SourceLoad = "load"
)

// Defaults applied by WithDefaults. They are documented in docs/latency.md.
const (
	// WindowCumulative makes every check look at everything since the
	// analysis started (the AnalysisRun's start, or the ramp's gate start), so
	// the sample grows from check to check — the setting under which the tail
	// test's anytime guarantee holds exactly.
	WindowCumulative = "cumulative"

	DefaultWindow       = WindowCumulative
	DefaultTimeout      = 30 * time.Second
	DefaultMinSamples   = 100
	DefaultMinTailCount = 5
	DefaultTailQuantile = 0.99
	DefaultConfidence   = 0.95
	// DefaultMaxErrorRate applies when latency SLOs are set without
	// slo.maxErrorRate: fast failures (an instant 503) make a failing
	// canary look fast, so latency is never judged without errors.
	DefaultMaxErrorRate = 0.01
)

// Config is the danki/latency configuration: the object under
// metric.provider.plugin["danki/latency"] in an AnalysisTemplate, also built
// by `danki analyze` and by pkg/shift's gate. It follows pkg/config's
// convention: ParseConfig decodes it strictly (JSON or YAML; errors name the
// field path), WithDefaults returns a copy with the defaults filled in,
// Validate reports every problem without changing anything, and Compile
// turns it into the Rules an Analyzer judges by. Durations are strings with
// a unit ("250ms", "5m", "1d"); numbers may be JSON numbers or strings,
// because Argo's {{args.…}} substitution produces strings. Optional numbers
// and limits are pointers: unset is not 0.
type Config struct {
	// Source of latency data: istio, envoy, promql, fortio or load.
	Source     string            `json:"source"`
	Prometheus *PrometheusConfig `json:"prometheus,omitempty"`
	Istio      *IstioConfig      `json:"istio,omitempty"`
	Envoy      *EnvoyConfig      `json:"envoy,omitempty"`
	PromQL     *PromQLConfig     `json:"promql,omitempty"`
	Fortio     *FortioConfig     `json:"fortio,omitempty"`
	Load       *LoadConfig       `json:"load,omitempty"`
	// Queries are extra value checks in PromQL (GC pause time, CPU …).
	Queries []QueryCheck `json:"queries,omitempty"`
	// Window every query looks back over: a duration ("5m") or cumulative
	// (since the analysis started). Default cumulative.
	Window Window `json:"window,omitzero"`
	SLO    SLO    `json:"slo"`
	// TailTest, when present (even as {}), enables the statistical tail test.
	TailTest *TailTestConfig `json:"tailTest,omitempty"`
	// MinSamples each side needs before any check can pass. Default 100.
	MinSamples *config.Number `json:"minSamples,omitempty"`
	// MinTailCount: a check on quantile q needs at least MinTailCount/(1-q)
	// observations (5 → p99 needs 500, p99.9 needs 5,000). Default 5.
	MinTailCount *config.Number `json:"minTailCount,omitempty"`
	// Timeout for one whole analysis (all queries). Default 30s.
	Timeout config.Duration `json:"timeout,omitzero"`
}

// Window is a query window: a duration, or cumulative (from the start of
// the analysis to now). The zero value is unset (WithDefaults: cumulative).
type Window struct {
	Cumulative bool
	Duration   config.Duration
}

// FixedWindow is a sliding window of d.
func FixedWindow(d time.Duration) Window { return Window{Duration: config.Duration(d)} }

// CumulativeWindow is the window from the start of the analysis to now.
func CumulativeWindow() Window { return Window{Cumulative: true} }

// IsZero reports an unset window.
func (w Window) IsZero() bool { return !w.Cumulative && w.Duration == 0 }

// String is "cumulative" or the duration.
func (w Window) String() string {
	if w.Cumulative {
		return WindowCumulative
	}
	return w.Duration.String()
}

// MarshalJSON writes "cumulative" or the duration.
func (w Window) MarshalJSON() ([]byte, error) { return json.Marshal(w.String()) }

// UnmarshalJSON reads "cumulative" or a duration. Other values are
// *json.UnmarshalTypeError, so that the decoder names the field.
func (w *Window) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil && strings.TrimSpace(s) == WindowCumulative {
		*w = CumulativeWindow()
		return nil
	}
	var d config.Duration
	if err := d.UnmarshalJSON(b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			te.Value += `, or "cumulative"`
		}
		return err
	}
	*w = Window{Duration: d}
	return nil
}

// SLO holds the latency limits. Percentile limits are durations; ratio
// limits compare the canary's percentile with stable's over the same window.
type SLO struct {
	P50  *config.Duration `json:"p50,omitempty"`
	P90  *config.Duration `json:"p90,omitempty"`
	P95  *config.Duration `json:"p95,omitempty"`
	P99  *config.Duration `json:"p99,omitempty"`
	P999 *config.Duration `json:"p999,omitempty"`
	// Max latency: only for sources that keep raw latencies (fortio).
	Max *config.Duration `json:"max,omitempty"`
	// MaxErrorRate is a fraction (0.01) or a percentage string ("1%").
	// Latency SLOs without it get DefaultMaxErrorRate.
	MaxErrorRate *config.Number `json:"maxErrorRate,omitempty"`
	Ratio        RatioSLO       `json:"ratio,omitzero"`
}

// RatioSLO limits canary percentile ÷ stable percentile (1.2 = at most 20 %
// slower than stable; at least 1).
type RatioSLO struct {
	P50  *config.Number `json:"p50,omitempty"`
	P90  *config.Number `json:"p90,omitempty"`
	P95  *config.Number `json:"p95,omitempty"`
	P99  *config.Number `json:"p99,omitempty"`
	P999 *config.Number `json:"p999,omitempty"`
}

// TailTestConfig configures the sequential tail test (see tailtest.go).
type TailTestConfig struct {
	// Quantile whose stable bucket bound is the threshold. Default 0.99.
	Quantile *config.Number `json:"quantile,omitempty"`
	// Confidence of a Fail verdict, 1 - false-alarm probability. Default 0.95.
	Confidence *config.Number `json:"confidence,omitempty"`
	// Margin (a fraction) the canary's exceedance rate may be above
	// stable's before it counts. Default 0.
	Margin *config.Number `json:"margin,omitempty"`
}

// quantileSpec names a percentile the SLOs can set.
type quantileSpec struct {
	key   string // JSON key and CLI flag stem: p999
	label string // how it is printed: p99.9
	q     float64
}

var quantiles = []quantileSpec{
	{"p50", "p50", 0.50},
	{"p90", "p90", 0.90},
	{"p95", "p95", 0.95},
	{"p99", "p99", 0.99},
	{"p999", "p99.9", 0.999},
}

// Bounds on the counts and durations: beyond them a config is a typo, and
// would hold a rollout forever (a tail test needing millions of requests)
// or keep a measurement running for too long.
const (
	maxMinSamples   = 1_000_000
	maxMinTailCount = 1_000
	maxTimeout      = 5 * time.Minute
	maxWindow       = 90 * 24 * time.Hour
)

// Rules is a compiled Config: every limit parsed, the defaults applied.
// Compile builds it; an Analyzer judges by it. It never changes after
// Compile, so one Rules can serve concurrent analyses.
type Rules struct {
	window       time.Duration
	cumulative   bool
	timeout      time.Duration
	limits       []quantileLimit // absolute, ms
	ratios       []quantileLimit // canary ÷ stable
	maxMs        float64         // 0: unset
	errorRate    float64
	hasErrorRate bool
	// errorRateDefault: errorRate is DefaultMaxErrorRate, added because
	// latency SLOs are set and slo.maxErrorRate is not.
	errorRateDefault bool
	tail             *tailRule
	queries          []queryRule
	minSamples       float64
	minTailCount     float64
	hasLatency       bool
	hasStable        bool
	hasRequests      bool
}

type quantileLimit struct {
	quantileSpec
	limit float64
}

type tailRule struct {
	q, confidence, margin float64
}

type queryRule struct {
	name          string
	max, maxRatio float64 // 0: unset
}

// ParseConfig decodes the danki/latency configuration (JSON or YAML,
// strictly: unknown, duplicate or mistyped fields and trailing text are
// errors naming the field path), validates it, and returns it with its
// defaults applied.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := config.Decode(data, &c); err != nil {
		return c, fmt.Errorf("danki/latency config: %w (see docs/latency.md)", err)
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c.WithDefaults(), nil
}

func numberPtr(f float64) *config.Number {
	n := config.Number(f)
	return &n
}

// hasLatencySLO reports whether any latency limit or the tail test is set.
func (c Config) hasLatencySLO() bool {
	s := c.SLO
	for _, d := range []*config.Duration{s.P50, s.P90, s.P95, s.P99, s.P999, s.Max} {
		if d != nil {
			return true
		}
	}
	for _, n := range []*config.Number{s.Ratio.P50, s.Ratio.P90, s.Ratio.P95, s.Ratio.P99, s.Ratio.P999} {
		if n != nil {
			return true
		}
	}
	return c.TailTest != nil
}

// WithDefaults returns a copy of c with every default filled in (c is not
// changed): window cumulative, timeout, minSamples, minTailCount, the
// source blocks' labels and units, the tail test's parameters, queries'
// matchers from promql. (Latency SLOs without slo.maxErrorRate are judged
// with DefaultMaxErrorRate: Compile adds that check, and the verdict says
// the limit is the default.)
func (c Config) WithDefaults() Config {
	d := c
	if d.Window.IsZero() {
		d.Window = CumulativeWindow()
	}
	if d.Timeout == 0 {
		d.Timeout = config.Duration(DefaultTimeout)
	}
	if d.MinSamples == nil {
		d.MinSamples = numberPtr(DefaultMinSamples)
	}
	if d.MinTailCount == nil {
		d.MinTailCount = numberPtr(DefaultMinTailCount)
	}
	if c.Istio != nil {
		ic := c.Istio.withDefaults()
		d.Istio = &ic
	}
	if c.Envoy != nil {
		ec := c.Envoy.withDefaults()
		d.Envoy = &ec
	}
	if c.PromQL != nil {
		pc := c.PromQL.withDefaults()
		d.PromQL = &pc
	}
	if c.Load != nil {
		lc := c.Load.withDefaults()
		d.Load = &lc
	}
	if c.TailTest != nil {
		tt := *c.TailTest
		if tt.Quantile == nil {
			tt.Quantile = numberPtr(DefaultTailQuantile)
		}
		if tt.Confidence == nil {
			tt.Confidence = numberPtr(DefaultConfidence)
		}
		if tt.Margin == nil {
			tt.Margin = numberPtr(0)
		}
		d.TailTest = &tt
	}
	if len(c.Queries) > 0 {
		d.Queries = slices.Clone(c.Queries)
		for i := range d.Queries {
			q := &d.Queries[i]
			if q.Canary == "" && c.PromQL != nil {
				q.Canary = c.PromQL.Canary
			}
			if q.Stable == "" && c.PromQL != nil {
				q.Stable = c.PromQL.Stable
			}
		}
	}
	return d
}

// Validate reports every problem of the configuration, each starting with
// its field path (slo.p99, istio.canary, …). It changes nothing.
func (c Config) Validate() error {
	_, err := Compile(c)
	return err
}

// Compile validates c (with its defaults) and returns the Rules an Analyzer
// judges by. It has no side effects: c is not changed.
func Compile(c Config) (*Rules, error) {
	d := c.WithDefaults()
	var errs config.Errors
	r := &Rules{}

	d.compileSource(&errs, r)
	d.compileWindow(&errs, r)
	d.compileSLO(&errs, r)
	d.compileQueries(&errs, r)
	r.minSamples = compileCount(&errs, "minSamples", *d.MinSamples, maxMinSamples)
	r.minTailCount = compileCount(&errs, "minTailCount", *d.MinTailCount, maxMinTailCount)
	switch t := d.Timeout.D(); {
	case t <= 0:
		errs.Addf("timeout", "%s must be positive; write it like \"30s\"", t)
	case t > maxTimeout:
		errs.Addf("timeout", "%s is longer than %s: a measurement waits for its queries that long; use at most %s", t, maxTimeout, maxTimeout)
	default:
		r.timeout = t
	}
	if d.Source == SourceLoad && d.Load != nil && d.Load.Deadline > 0 {
		// A load measurement runs in the background (the plugin's Run
		// starts it, Resume polls it): load.deadline bounds it, not the
		// timeout of a blocking query.
		r.timeout = d.Load.Deadline.D()
	}
	if !c.anythingToCheck() {
		errs.Addf("slo", "nothing to check; set at least one of slo.p50 … slo.p999, slo.max, slo.maxErrorRate, slo.ratio.*, tailTest or queries")
	}
	if err := errs.Err(); err != nil {
		return nil, fmt.Errorf("invalid danki/latency config: %w", err)
	}
	return r, nil
}

// anythingToCheck reports whether any SLO, the tail test or a query is set.
func (c Config) anythingToCheck() bool {
	return c.hasLatencySLO() || c.SLO.MaxErrorRate != nil || len(c.Queries) > 0
}

func (c Config) compileSource(p *config.Errors, r *Rules) {
	blocks := map[string]bool{
		SourceIstio:  c.Istio != nil,
		SourceEnvoy:  c.Envoy != nil,
		SourcePromQL: c.PromQL != nil,
		SourceFortio: c.Fortio != nil,
		SourceLoad:   c.Load != nil,
	}
	switch c.Source {
	case SourceIstio, SourceEnvoy, SourcePromQL, SourceFortio, SourceLoad:
	case "":
		p.Addf("source", "missing; set it to istio, envoy, promql, fortio or load")
		return
	default:
		p.Addf("source", "%q is not a source; use istio, envoy, promql, fortio or load", c.Source)
		return
	}
	for _, name := range []string{SourceIstio, SourceEnvoy, SourcePromQL, SourceFortio, SourceLoad} {
		if !blocks[name] || name == c.Source {
			continue
		}
		if name == SourcePromQL && c.readsPrometheus() &&
			c.PromQL.Histogram == "" && c.PromQL.Requests == "" && c.PromQL.Errors == "" {
			continue // only label matchers for queries
		}
		p.Addf(name, "set, but source is %q; remove it or set source: %s", c.Source, name)
	}
	if c.readsPrometheus() {
		c.Prometheus.compile(p)
	} else if c.Prometheus != nil {
		p.Addf("prometheus", "set, but source is %s, which does not read Prometheus; remove it", c.Source)
	}
	if !blocks[c.Source] {
		p.Addf(c.Source, "missing; source %q needs an %s block with the canary (and stable) to compare", c.Source, c.Source)
		return
	}

	// Each source's block checks itself (istio.go … load.go); here is only
	// what it can measure.
	switch c.Source {
	case SourceIstio:
		c.Istio.compile(p)
		r.hasLatency, r.hasRequests, r.hasStable = true, true, c.Istio.Stable != nil
	case SourceEnvoy:
		c.Envoy.compile(p)
		r.hasLatency, r.hasRequests, r.hasStable = true, true, c.Envoy.hasStable()
	case SourcePromQL:
		c.PromQL.compile(p)
		pc := c.PromQL
		r.hasLatency, r.hasRequests, r.hasStable = pc.Histogram != "", pc.Requests != "", pc.Stable != ""
	case SourceFortio:
		c.Fortio.compile(p)
		r.hasLatency, r.hasRequests, r.hasStable = true, true, c.Fortio.Stable != ""
	case SourceLoad:
		c.Load.compile(p)
		r.hasLatency, r.hasRequests, r.hasStable = true, true, c.Load.hasStable()
	}
}

// readsPrometheus reports whether the source queries Prometheus (fortio
// reads result files, load measures its own requests).
func (c Config) readsPrometheus() bool { return c.Source != SourceFortio && c.Source != SourceLoad }

// rawLatencies reports whether the source keeps every request's latency
// (or at least the raw maximum), so slo.max can be checked.
func (c Config) rawLatencies() bool { return c.Source == SourceFortio || c.Source == SourceLoad }

func (c Config) compileWindow(p *config.Errors, r *Rules) {
	if c.Window.Cumulative {
		r.cumulative = true
		return
	}
	switch d := c.Window.Duration.D(); {
	case d < time.Second:
		p.Addf("window", "%s is shorter than 1s; PromQL ranges need at least two scrapes, use e.g. \"5m\"", d)
	case d > maxWindow:
		p.Addf("window", "%s is longer than %s, beyond any Prometheus retention worth querying; use e.g. \"10m\" or cumulative", d, model.Duration(maxWindow))
	default:
		r.window = d
	}
}

func (c Config) compileSLO(p *config.Errors, r *Rules) {
	s := c.SLO
	abs := map[string]*config.Duration{"p50": s.P50, "p90": s.P90, "p95": s.P95, "p99": s.P99, "p999": s.P999}
	rat := map[string]*config.Number{"p50": s.Ratio.P50, "p90": s.Ratio.P90, "p95": s.Ratio.P95, "p99": s.Ratio.P99, "p999": s.Ratio.P999}
	for _, qs := range quantiles {
		if v := abs[qs.key]; v != nil {
			if ms, ok := compileLatency(p, "slo."+qs.key, *v); ok {
				r.limits = append(r.limits, quantileLimit{qs, ms})
			}
		}
		if v := rat[qs.key]; v != nil {
			if f, ok := compileRatio(p, "slo.ratio."+qs.key, float64(*v)); ok {
				r.ratios = append(r.ratios, quantileLimit{qs, f})
			}
		}
	}
	if s.Max != nil {
		if ms, ok := compileLatency(p, "slo.max", *s.Max); ok {
			r.maxMs = ms
		}
		if !c.rawLatencies() && c.Source != "" {
			p.Addf("slo.max", "source %s has only histogram buckets, no raw maximum; use slo.p999, or source fortio or load", c.Source)
		}
	}
	switch {
	case s.MaxErrorRate != nil:
		if f := float64(*s.MaxErrorRate); f < 0 || f > 1 {
			p.Addf("slo.maxErrorRate", "%g is outside 0…1; write a fraction (0.01) or a percentage (\"1%%\")", f)
		} else {
			r.errorRate, r.hasErrorRate = f, true
		}
	case c.hasLatencySLO():
		// Fast failures (an instant 503) make a failing canary look fast:
		// latency is never judged without the error rate.
		r.errorRate, r.hasErrorRate, r.errorRateDefault = DefaultMaxErrorRate, true, true
	}
	if tt := c.TailTest; tt != nil {
		r.tail = &tailRule{
			q:          compileFraction(p, "tailTest.quantile", *tt.Quantile, 0.5, 0.9999),
			confidence: compileFraction(p, "tailTest.confidence", *tt.Confidence, 0.5, 0.9999),
			margin:     compileFraction(p, "tailTest.margin", *tt.Margin, 0, 0.5),
		}
	}

	if len(r.limits)+len(r.ratios) > 0 || r.maxMs > 0 || r.tail != nil {
		if !r.hasLatency && c.Source == SourcePromQL && c.PromQL != nil {
			p.Addf("promql.histogram", "missing; the latency SLOs and the tail test need a histogram query")
		}
	}
	if r.hasErrorRate && c.Source == SourcePromQL && c.PromQL != nil {
		why := "slo.maxErrorRate needs promql.requests and promql.errors"
		if r.errorRateDefault {
			why = fmt.Sprintf("latency SLOs are judged together with the error rate (fast failures look fast; default slo.maxErrorRate %g): set promql.requests and promql.errors", DefaultMaxErrorRate)
		}
		for _, f := range []struct{ name, text string }{{"requests", c.PromQL.Requests}, {"errors", c.PromQL.Errors}} {
			if f.text == "" {
				p.Addf("promql."+f.name, "missing; %s", why)
			}
		}
	}
	if !r.hasStable && c.sourceBlockSet() {
		var need []string
		for _, l := range r.ratios {
			need = append(need, "slo.ratio."+l.key)
		}
		if r.tail != nil {
			need = append(need, "tailTest")
		}
		if len(need) > 0 {
			p.Addf(strings.Join(need, ", "), "compares with stable, but no stable side is set; set %s", stableField(c.Source))
		}
	}
}

// sourceBlockSet reports whether the block for the chosen source is there.
func (c Config) sourceBlockSet() bool {
	switch c.Source {
	case SourceIstio:
		return c.Istio != nil
	case SourceEnvoy:
		return c.Envoy != nil
	case SourcePromQL:
		return c.PromQL != nil
	case SourceFortio:
		return c.Fortio != nil
	case SourceLoad:
		return c.Load != nil
	}
	return false
}

func stableField(source string) string {
	switch source {
	case SourceIstio:
		return "istio.stable"
	case SourceEnvoy:
		return "envoy.stableCluster (or stableLabels with envoy.cluster)"
	case SourcePromQL:
		return "promql.stable"
	case SourceLoad:
		return "load.stableService (or stableURLs, stableSelector, stablePodTemplateHash)"
	}
	return "fortio.stable"
}

// compileLatency turns a latency limit into milliseconds.
func compileLatency(p *config.Errors, field string, v config.Duration) (float64, bool) {
	if v <= 0 {
		p.Addf(field, "%s must be positive; write it like \"250ms\"", v)
		return 0, false
	}
	return float64(v.D()) / float64(time.Millisecond), true
}

// compileRatio checks a canary ÷ stable limit: below 1 it would fail every
// canary as fast as stable (and, read the other way round, pass slow ones).
func compileRatio(p *config.Errors, field string, f float64) (float64, bool) {
	if f < 1 {
		p.Addf(field, "%g is below 1: a canary ÷ stable limit below 1 fails every canary as fast as stable; write at least 1, e.g. 1.2 (at most 20%% slower than stable)", f)
		return 0, false
	}
	return f, true
}

func compileCount(p *config.Errors, field string, v config.Number, maximum float64) float64 {
	f := float64(v)
	if f < 1 || f > maximum || f != math.Trunc(f) {
		p.Addf(field, "%g must be a whole number from 1 to %d", f, int(maximum))
		return 1
	}
	return f
}

func compileFraction(p *config.Errors, field string, v config.Number, lo, hi float64) float64 {
	f := float64(v)
	if f < lo || f > hi {
		p.Addf(field, "%g must be a number from %g to %g", f, lo, hi)
		return lo
	}
	return f
}

func compilePositive(p *config.Errors, field string, f float64) float64 {
	if !(f > 0) {
		p.Addf(field, "%g must be a positive number", f)
		return 0
	}
	return f
}
