package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
)

// Source names accepted in Config.Source.
const (
	SourceIstio  = "istio"
	SourceEnvoy  = "envoy"
	SourcePromQL = "promql"
	SourceFortio = "fortio"
)

// Defaults applied by Validate. They are documented in docs/latency.md.
const (
	// WindowCumulative makes every check look at everything since the
	// analysis started (the AnalysisRun's start, or the Gate's creation), so
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
	DefaultMaxErrorRate   = 0.01
	DefaultIstioReporter  = "source"
	DefaultResponseCode   = "response_code"
	DefaultClusterLabel   = "cluster_name"
	DefaultPromQLUnit     = "s"
	defaultErrorCodeRegex = "5.."
)

// Config is the danki/latency configuration: the JSON object under
// metric.provider.plugin["danki/latency"] in an AnalysisTemplate, also built
// by `danki analyze` and by pkg/shift's gate. Durations are strings with a
// unit ("250ms", "5m"); numbers may be JSON numbers or strings, because Argo's
// {{args.…}} substitution produces strings. ParseConfig decodes and validates
// it; Validate checks a Config built in code.
type Config struct {
	// Source of latency data: istio, envoy, promql or fortio.
	Source     string            `json:"source"`
	Prometheus *PrometheusConfig `json:"prometheus,omitempty"`
	Istio      *IstioConfig      `json:"istio,omitempty"`
	Envoy      *EnvoyConfig      `json:"envoy,omitempty"`
	PromQL     *PromQLConfig     `json:"promql,omitempty"`
	Fortio     *FortioConfig     `json:"fortio,omitempty"`
	// Queries are extra value checks in PromQL (GC pause time, CPU …).
	Queries []QueryCheck `json:"queries,omitempty"`
	// Window every query looks back over: a duration ("5m") or "cumulative"
	// (since the analysis started). Default cumulative.
	Window Duration `json:"window,omitempty"`
	SLO    SLO      `json:"slo"`
	// TailTest, when present (even as {}), enables the statistical tail test.
	TailTest *TailTestConfig `json:"tailTest,omitempty"`
	// MinSamples each side needs before any check can pass. Default 100.
	MinSamples Number `json:"minSamples,omitempty"`
	// MinTailCount: a check on quantile q needs at least MinTailCount/(1-q)
	// observations (5 → p99 needs 500, p99.9 needs 5,000). Default 5.
	MinTailCount Number `json:"minTailCount,omitempty"`
	// Timeout for one whole analysis (all queries). Default 30s.
	Timeout Duration `json:"timeout,omitempty"`

	rules *rules // set by Validate
}

// PrometheusConfig says how to reach Prometheus.
type PrometheusConfig struct {
	Address string `json:"address"`
	// BearerToken or BearerTokenFile (re-read on every request, so rotated
	// service-account tokens work) authenticate to Prometheus.
	BearerToken     string `json:"bearerToken,omitempty"`
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// CAFile verifies an https Prometheus; InsecureSkipVerify skips that.
	CAFile             string `json:"caFile,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
}

// IstioConfig selects canary and stable traffic in Istio's standard metrics
// (istio_request_duration_milliseconds_bucket, istio_requests_total).
type IstioConfig struct {
	// Reporter label: "destination" (the server sidecar, default) or "source"
	// (the client side, e.g. an ingress gateway).
	Reporter string         `json:"reporter,omitempty"`
	Canary   IstioSelector  `json:"canary"`
	Stable   *IstioSelector `json:"stable,omitempty"`
}

// IstioSelector picks one version's series; every field set becomes an
// equality matcher.
type IstioSelector struct {
	Workload  string            `json:"workload,omitempty"`  // destination_workload
	Namespace string            `json:"namespace,omitempty"` // destination_workload_namespace
	Service   string            `json:"service,omitempty"`   // destination_service, e.g. app-canary.default.svc.cluster.local
	Version   string            `json:"version,omitempty"`   // destination_version
	Labels    map[string]string `json:"labels,omitempty"`    // any other label
}

// EnvoyConfig selects canary and stable upstream clusters in Envoy's cluster
// metrics (envoy_cluster_upstream_rq_time_bucket, envoy_cluster_upstream_rq).
type EnvoyConfig struct {
	// CanaryCluster and StableCluster are cluster names, e.g.
	// outbound|8080||app-canary.default.svc.cluster.local.
	CanaryCluster string `json:"canaryCluster"`
	StableCluster string `json:"stableCluster,omitempty"`
	// ClusterLabel names the label holding the cluster name: "cluster_name"
	// with Istio's stats tags (default), "envoy_cluster_name" with plain
	// Envoy's.
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// ResponseCodeLabel names the response-code label of
	// envoy_cluster_upstream_rq: "response_code" with Istio's stats tags
	// (default), "envoy_response_code" with Envoy's own.
	ResponseCodeLabel string `json:"responseCodeLabel,omitempty"`
	// Labels are extra equality matchers for both sides (e.g. job).
	Labels map[string]string `json:"labels,omitempty"`
}

// PromQLConfig is a custom query set. Queries are Go text/template with
// << and >> as delimiters (Argo resolves every {{…}} in a metric itself and
// fails on the ones it does not know): <<.Selector>> is this side's label
// matchers, <<.Window>> the range ("5m"), <<.Side>> "canary" or "stable",
// <<.Canary>> and <<.Stable>> both sides' matchers.
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

// FortioConfig reads fortio result JSON (fortio's -json output, or what
// danki's warm-up step writes) from files or http(s) URLs.
type FortioConfig struct {
	Canary string `json:"canary"`
	Stable string `json:"stable,omitempty"`
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
	// canary ÷ stable. At least one is required.
	Max      Number `json:"max,omitempty"`
	MaxRatio Number `json:"maxRatio,omitempty"`
}

// SLO holds the latency limits. Percentile limits are durations; ratio
// limits compare the canary's percentile with stable's over the same window.
type SLO struct {
	P50  Duration `json:"p50,omitempty"`
	P90  Duration `json:"p90,omitempty"`
	P95  Duration `json:"p95,omitempty"`
	P99  Duration `json:"p99,omitempty"`
	P999 Duration `json:"p999,omitempty"`
	// Max latency: only for sources that keep raw latencies (fortio).
	Max Duration `json:"max,omitempty"`
	// MaxErrorRate is a fraction (0.01) or a percentage string ("1%").
	MaxErrorRate Number   `json:"maxErrorRate,omitempty"`
	Ratio        RatioSLO `json:"ratio,omitempty"`
}

// RatioSLO limits canary percentile ÷ stable percentile (1.2 = at most 20 %
// slower than stable).
type RatioSLO struct {
	P50  Number `json:"p50,omitempty"`
	P90  Number `json:"p90,omitempty"`
	P95  Number `json:"p95,omitempty"`
	P99  Number `json:"p99,omitempty"`
	P999 Number `json:"p999,omitempty"`
}

// TailTestConfig configures the sequential tail test (see tailtest.go).
type TailTestConfig struct {
	// Quantile whose stable bucket bound is the threshold. Default 0.99.
	Quantile Number `json:"quantile,omitempty"`
	// Confidence of a Fail verdict, 1 - false-alarm probability. Default 0.95.
	Confidence Number `json:"confidence,omitempty"`
	// Margin (a fraction) the canary's exceedance rate may be above
	// stable's before it counts. Default 0.
	Margin Number `json:"margin,omitempty"`
}

// Duration is a duration written with a unit, e.g. "250ms", "1.5s", "5m".
type Duration string

// UnmarshalJSON keeps the raw text; Validate parses it so its error can name
// the field.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := rawText(b)
	*d = Duration(s)
	return err
}

// Number is a number written as a JSON number or a string.
type Number string

// UnmarshalJSON keeps the raw text; Validate parses it.
func (n *Number) UnmarshalJSON(b []byte) error {
	s, err := rawText(b)
	*n = Number(s)
	return err
}

func rawText(b []byte) (string, error) {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return "", nil
	case len(b) > 0 && b[0] == '"':
		var s string
		err := json.Unmarshal(b, &s)
		return strings.TrimSpace(s), err
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return "", fmt.Errorf("want a string or a number, got %s", b)
	}
	return string(b), nil
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

// rules is the validated, parsed form of a Config.
type rules struct {
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

// ParseConfig decodes the danki/latency JSON (unknown fields are errors,
// so typos do not silently drop an SLO), applies defaults and validates it.
// Errors name the field and say how to fix it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(data)) == 0 {
		return c, errors.New("danki/latency config is empty; set at least source and one SLO (see docs/latency.md)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, explainJSONError(err)
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

func explainJSONError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "config"
		}
		return fmt.Errorf("danki/latency config: %s: want %s, got a JSON %s", field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("danki/latency config is not valid JSON (at byte %d): %w", syntaxErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("danki/latency config is not valid JSON: it ends early (an unclosed { or \")")
	case strings.Contains(err.Error(), "unknown field"):
		return fmt.Errorf("danki/latency config: %s; check its spelling against docs/latency.md",
			strings.TrimPrefix(err.Error(), "json: "))
	}
	return fmt.Errorf("danki/latency config: %w", err)
}

// problems collects every validation error so the user sees them all at once.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Validate applies defaults and checks the whole configuration. Each problem
// starts with the field's path (slo.p99, istio.canary, …).
func (c *Config) Validate() error {
	var p problems
	r := &rules{}

	c.validateSource(&p, r)
	c.validateWindow(&p, r)
	c.validateSLO(&p, r)
	c.validateQueries(&p, r)

	r.minSamples = parseCount(&p, "minSamples", c.MinSamples, DefaultMinSamples)
	r.minTailCount = parseCount(&p, "minTailCount", c.MinTailCount, DefaultMinTailCount)
	r.timeout = parsePositiveDuration(&p, "timeout", c.Timeout, DefaultTimeout)

	if !c.anythingToCheck() {
		p.add("slo: nothing to check; set at least one of slo.p50 … slo.p999, slo.max, slo.maxErrorRate, slo.ratio.*, tailTest or queries")
	}
	if len(p) > 0 {
		return fmt.Errorf("invalid danki/latency config: %s", strings.Join(p, "; "))
	}
	c.rules = r
	return nil
}

// anythingToCheck reports whether any SLO, the tail test or a query is set
// (valid or not: a malformed one has its own error).
func (c *Config) anythingToCheck() bool {
	s := c.SLO
	for _, v := range []string{string(s.P50), string(s.P90), string(s.P95), string(s.P99), string(s.P999), string(s.Max), string(s.MaxErrorRate),
		string(s.Ratio.P50), string(s.Ratio.P90), string(s.Ratio.P95), string(s.Ratio.P99), string(s.Ratio.P999)} {
		if v != "" {
			return true
		}
	}
	return c.TailTest != nil || len(c.Queries) > 0
}

func (c *Config) validateSource(p *problems, r *rules) {
	blocks := map[string]bool{
		SourceIstio:  c.Istio != nil,
		SourceEnvoy:  c.Envoy != nil,
		SourcePromQL: c.PromQL != nil,
		SourceFortio: c.Fortio != nil,
	}
	switch c.Source {
	case SourceIstio, SourceEnvoy, SourcePromQL, SourceFortio:
	case "":
		p.add("source: missing; set it to istio, envoy, promql or fortio")
		return
	default:
		p.add("source: %q is not a source; use istio, envoy, promql or fortio", c.Source)
		return
	}
	for _, name := range []string{SourceIstio, SourceEnvoy, SourcePromQL, SourceFortio} {
		if !blocks[name] || name == c.Source {
			continue
		}
		if name == SourcePromQL && c.Source != SourceFortio &&
			c.PromQL.Histogram == "" && c.PromQL.Requests == "" && c.PromQL.Errors == "" {
			continue // only label matchers for queries
		}
		p.add("%s: set, but source is %q; remove it or set source: %s", name, c.Source, name)
	}
	if c.Source != SourceFortio {
		c.validatePrometheus(p)
	} else if c.Prometheus != nil {
		p.add("prometheus: set, but source is fortio, which reads result files; remove it")
	}
	if !blocks[c.Source] {
		p.add("%s: missing; source %q needs an %s block with the canary (and stable) to compare", c.Source, c.Source, c.Source)
		return
	}

	switch c.Source {
	case SourceIstio:
		ic := c.Istio
		if ic.Reporter == "" {
			ic.Reporter = DefaultIstioReporter
		}
		if ic.Reporter != "destination" && ic.Reporter != "source" {
			p.add("istio.reporter: %q is not an Istio reporter; use destination or source", ic.Reporter)
		}
		validateIstioSelector(p, "istio.canary", ic.Reporter, &ic.Canary)
		if ic.Stable != nil {
			validateIstioSelector(p, "istio.stable", ic.Reporter, ic.Stable)
		}
		r.hasLatency, r.hasRequests, r.hasStable = true, true, ic.Stable != nil
	case SourceEnvoy:
		ec := c.Envoy
		if ec.CanaryCluster == "" {
			p.add("envoy.canaryCluster: missing; set the canary's cluster_name, e.g. outbound|8080||app-canary.default.svc.cluster.local")
		}
		if ec.ResponseCodeLabel == "" {
			ec.ResponseCodeLabel = DefaultResponseCode
		}
		if ec.ClusterLabel == "" {
			ec.ClusterLabel = DefaultClusterLabel
		}
		if !model.LegacyValidation.IsValidLabelName(ec.ClusterLabel) {
			p.add("envoy.clusterLabel: %q is not a Prometheus label name", ec.ClusterLabel)
		}
		if !model.LegacyValidation.IsValidLabelName(ec.ResponseCodeLabel) {
			p.add("envoy.responseCodeLabel: %q is not a Prometheus label name", ec.ResponseCodeLabel)
		}
		validateLabels(p, "envoy.labels", ec.Labels)
		r.hasLatency, r.hasRequests, r.hasStable = true, true, ec.StableCluster != ""
	case SourcePromQL:
		pc := c.PromQL
		if pc.Canary == "" {
			p.add("promql.canary: missing; set the label matchers that select the canary's series, e.g. app=\"checkout\",version=\"v2\"")
		}
		if pc.Unit == "" {
			pc.Unit = DefaultPromQLUnit
		}
		if pc.Unit != "s" && pc.Unit != "ms" {
			p.add("promql.unit: %q is not a unit; use s (seconds, the Prometheus convention) or ms", pc.Unit)
		}
		for _, f := range []struct{ name, text string }{{"histogram", pc.Histogram}, {"requests", pc.Requests}, {"errors", pc.Errors}} {
			if f.text != "" {
				validateTemplate(p, "promql."+f.name, f.text)
			}
		}
		if pc.Errors != "" && pc.Requests == "" {
			p.add("promql.requests: missing; promql.errors needs it as the error rate's denominator")
		}
		r.hasLatency, r.hasRequests, r.hasStable = pc.Histogram != "", pc.Requests != "", pc.Stable != ""
	case SourceFortio:
		if c.Fortio.Canary == "" {
			p.add("fortio.canary: missing; set the path or http(s) URL of the canary's fortio result JSON")
		}
		r.hasLatency, r.hasRequests, r.hasStable = true, true, c.Fortio.Stable != ""
	}
}

func (c *Config) validatePrometheus(p *problems) {
	pc := c.Prometheus
	if pc == nil || pc.Address == "" {
		p.add("prometheus.address: missing; set the Prometheus URL, e.g. http://prometheus.istio-system:9090")
		return
	}
	if !strings.HasPrefix(pc.Address, "http://") && !strings.HasPrefix(pc.Address, "https://") {
		p.add("prometheus.address: %q is not an http(s) URL; write it like http://prometheus.istio-system:9090", pc.Address)
	}
	if pc.BearerToken != "" && pc.BearerTokenFile != "" {
		p.add("prometheus.bearerTokenFile: set together with prometheus.bearerToken; keep only one")
	}
}

func validateIstioSelector(p *problems, field, reporter string, s *IstioSelector) {
	if s.Workload == "" && s.Service == "" && s.Version == "" && len(s.Labels) == 0 {
		p.add("%s: selects nothing; set at least one of workload, service, version or labels (e.g. service: app-canary.default.svc.cluster.local)", field)
	}
	if reporter == "destination" && s.Service != "" {
		// The server sidecar labels destination_service with one of the
		// Services its pod belongs to; Argo's canary pods belong to the
		// canary Service and the root Service (and after promotion stable's),
		// so that label cannot tell canary from stable.
		p.add("%s.service: with istio.reporter destination, Istio labels destination_service with any one of the Services the pod belongs to, so it cannot tell Argo's canary from stable; use reporter: source (the default: the gateway's or client sidecars' view of the Service they routed to), or select by version or labels", field)
	}
	validateLabels(p, field+".labels", s.Labels)
}

func validateLabels(p *problems, field string, labels map[string]string) {
	for k := range labels {
		if !model.LegacyValidation.IsValidLabelName(k) {
			p.add("%s: %q is not a Prometheus label name", field, k)
		}
	}
}

func validateTemplate(p *problems, field, text string) {
	t, err := parseQueryTemplate(field, text)
	if err != nil {
		p.add("%s: %v", field, err)
		return
	}
	var b strings.Builder
	if err := t.Execute(&b, QueryData{Selector: `a="b"`, Window: "5m", Side: "canary", Canary: `a="b"`, Stable: `a="c"`}); err != nil {
		p.add("%s: %v (fields: <<.Selector>> <<.Window>> <<.Side>> <<.Canary>> <<.Stable>>)", field, err)
	}
}

func (c *Config) validateWindow(p *problems, r *rules) {
	w := strings.TrimSpace(string(c.Window))
	if w == "" {
		w = DefaultWindow
	}
	if w == WindowCumulative {
		r.cumulative = true
		return
	}
	d, err := time.ParseDuration(w)
	switch {
	case err != nil:
		p.add("window: %q is neither a duration nor %q; write it like \"5m\"", w, WindowCumulative)
	case d < time.Second:
		p.add("window: %s is shorter than 1s; PromQL ranges need at least two scrapes, use e.g. \"5m\"", d)
	default:
		r.window = d
	}
}

func (c *Config) validateSLO(p *problems, r *rules) {
	s := c.SLO
	abs := map[string]Duration{"p50": s.P50, "p90": s.P90, "p95": s.P95, "p99": s.P99, "p999": s.P999}
	rat := map[string]Number{"p50": s.Ratio.P50, "p90": s.Ratio.P90, "p95": s.Ratio.P95, "p99": s.Ratio.P99, "p999": s.Ratio.P999}
	for _, qs := range quantiles {
		if v := abs[qs.key]; v != "" {
			if ms, ok := parseLatency(p, "slo."+qs.key, v); ok {
				r.limits = append(r.limits, quantileLimit{qs, ms})
			}
		}
		if v := rat[qs.key]; v != "" {
			f, err := strconv.ParseFloat(string(v), 64)
			switch {
			case err != nil:
				p.add("slo.ratio.%s: %q is not a number; write the allowed canary÷stable ratio, e.g. 1.2", qs.key, v)
			case !(f > 0) || math.IsInf(f, 0):
				p.add("slo.ratio.%s: %v must be a positive ratio, e.g. 1.2 (canary at most 20%% slower than stable)", qs.key, v)
			default:
				r.ratios = append(r.ratios, quantileLimit{qs, f})
			}
		}
	}
	if s.Max != "" {
		if ms, ok := parseLatency(p, "slo.max", s.Max); ok {
			r.maxMs = ms
		}
		if c.Source != SourceFortio && c.Source != "" {
			p.add("slo.max: source %s has only histogram buckets, no raw maximum; use slo.p999, or source fortio", c.Source)
		}
	}
	if s.MaxErrorRate != "" {
		text := string(s.MaxErrorRate)
		scale := 1.0
		if strings.HasSuffix(text, "%") {
			text, scale = strings.TrimSpace(strings.TrimSuffix(text, "%")), 0.01
		}
		f, err := strconv.ParseFloat(text, 64)
		switch {
		case err != nil:
			p.add("slo.maxErrorRate: %q is not a number; write a fraction (0.01) or a percentage (\"1%%\")", s.MaxErrorRate)
		case f*scale < 0 || f*scale > 1:
			p.add("slo.maxErrorRate: %v is outside 0…1; write a fraction (0.01) or a percentage (\"1%%\")", s.MaxErrorRate)
		default:
			r.errorRate, r.hasErrorRate = f*scale, true
		}
	}
	if tt := c.TailTest; tt != nil {
		t := &tailRule{
			q:          parseFraction(p, "tailTest.quantile", tt.Quantile, DefaultTailQuantile, 0.5, 0.9999),
			confidence: parseFraction(p, "tailTest.confidence", tt.Confidence, DefaultConfidence, 0.5, 0.9999),
			margin:     parseFraction(p, "tailTest.margin", tt.Margin, 0, 0, 0.5),
		}
		r.tail = t
	}

	if len(r.limits)+len(r.ratios) > 0 || r.maxMs > 0 || r.tail != nil {
		if !r.hasLatency && c.Source == SourcePromQL && c.PromQL != nil {
			p.add("promql.histogram: missing; the latency SLOs and the tail test need a histogram query")
		}
	}
	latencySLOs := len(r.limits)+len(r.ratios) > 0 || r.maxMs > 0 || r.tail != nil
	if latencySLOs && !r.hasErrorRate {
		r.errorRate, r.hasErrorRate, r.errorRateDefault = DefaultMaxErrorRate, true, true
	}
	if r.hasErrorRate && c.Source == SourcePromQL && c.PromQL != nil && (c.PromQL.Requests == "" || c.PromQL.Errors == "") {
		why := "slo.maxErrorRate needs promql.requests and promql.errors"
		if r.errorRateDefault {
			why = fmt.Sprintf("latency SLOs are judged together with the error rate (fast failures look fast; default slo.maxErrorRate %g): set promql.requests and promql.errors", DefaultMaxErrorRate)
		}
		for _, f := range []struct{ name, text string }{{"requests", c.PromQL.Requests}, {"errors", c.PromQL.Errors}} {
			if f.text == "" {
				p.add("promql.%s: missing; %s", f.name, why)
			}
		}
	}
	if !r.hasStable && c.sourceBlockSet() {
		need := []string{}
		for _, l := range r.ratios {
			need = append(need, "slo.ratio."+l.key)
		}
		if r.tail != nil {
			need = append(need, "tailTest")
		}
		if len(need) > 0 {
			p.add("%s: compares with stable, but no stable side is set; set %s", strings.Join(need, ", "), stableField(c.Source))
		}
	}
}

// sourceBlockSet reports whether the block for the chosen source is there.
func (c *Config) sourceBlockSet() bool {
	switch c.Source {
	case SourceIstio:
		return c.Istio != nil
	case SourceEnvoy:
		return c.Envoy != nil
	case SourcePromQL:
		return c.PromQL != nil
	case SourceFortio:
		return c.Fortio != nil
	}
	return false
}

func stableField(source string) string {
	switch source {
	case SourceIstio:
		return "istio.stable"
	case SourceEnvoy:
		return "envoy.stableCluster"
	case SourcePromQL:
		return "promql.stable"
	}
	return "fortio.stable"
}

func (c *Config) validateQueries(p *problems, r *rules) {
	if len(c.Queries) > 0 && c.Source == SourceFortio {
		p.add("queries: need Prometheus, but source is fortio; use source istio, envoy or promql")
		return
	}
	seen := map[string]bool{}
	for i := range c.Queries {
		q := &c.Queries[i]
		field := fmt.Sprintf("queries[%d]", i)
		if q.Name == "" {
			p.add("%s.name: missing; name the check, e.g. gc-pause-fraction", field)
		} else if seen[q.Name] {
			p.add("%s.name: %q is used twice; names must be unique", field, q.Name)
		}
		seen[q.Name] = true
		if q.Query == "" {
			p.add("%s.query: missing; write the PromQL, e.g. sum(rate(jvm_gc_pause_seconds_sum{<<.Selector>>}[<<.Window>>]))", field)
		} else {
			validateTemplate(p, field+".query", q.Query)
		}
		if q.Canary == "" && c.PromQL != nil {
			q.Canary = c.PromQL.Canary
		}
		if q.Stable == "" && c.PromQL != nil {
			q.Stable = c.PromQL.Stable
		}
		if q.Canary == "" && strings.Contains(q.Query, ".Selector") {
			p.add("%s.canary: missing; set the label matchers of the canary's series (or promql.canary)", field)
		}
		rule := queryRule{name: q.Name}
		if q.Max != "" {
			rule.max = parsePositive(p, field+".max", q.Max)
		}
		if q.MaxRatio != "" {
			rule.maxRatio = parsePositive(p, field+".maxRatio", q.MaxRatio)
			if q.Stable == "" && strings.Contains(q.Query, ".Selector") {
				p.add("%s.stable: missing; maxRatio compares with stable, set the stable's label matchers (or promql.stable)", field)
			}
		}
		if q.Max == "" && q.MaxRatio == "" {
			p.add("%s: set max and/or maxRatio", field)
		}
		r.queries = append(r.queries, rule)
	}
}

// parseLatency parses a latency limit into milliseconds.
func parseLatency(p *problems, field string, v Duration) (float64, bool) {
	d, err := time.ParseDuration(string(v))
	if err != nil {
		if _, numErr := strconv.ParseFloat(string(v), 64); numErr == nil {
			p.add("%s: %q has no unit; write it like \"%sms\"", field, v, v)
		} else {
			p.add("%s: %q is not a duration; write it like \"250ms\" or \"1.5s\"", field, v)
		}
		return 0, false
	}
	if d <= 0 {
		p.add("%s: %s must be positive", field, v)
		return 0, false
	}
	return float64(d) / float64(time.Millisecond), true
}

func parsePositiveDuration(p *problems, field string, v Duration, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d <= 0 {
		p.add("%s: %q is not a positive duration; write it like \"30s\"", field, v)
		return def
	}
	return d
}

func parseCount(p *problems, field string, v Number, def float64) float64 {
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f < 1 || f != math.Trunc(f) {
		p.add("%s: %q must be a whole number ≥ 1", field, v)
		return def
	}
	return f
}

func parseFraction(p *problems, field string, v Number, def, lo, hi float64) float64 {
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f < lo || f > hi {
		p.add("%s: %q must be a number from %g to %g", field, v, lo, hi)
		return def
	}
	return f
}

func parsePositive(p *problems, field string, v Number) float64 {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		p.add("%s: %q must be a positive number", field, v)
		return 0
	}
	return f
}

// QueryData is what a PromQL template sees.
type QueryData struct {
	Selector string // this side's label matchers
	Window   string // PromQL range, e.g. 5m
	Side     string // canary or stable
	Canary   string // the canary's label matchers
	Stable   string // the stable's label matchers
}

func parseQueryTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Delims("<<", ">>").Option("missingkey=error").Parse(text)
}
