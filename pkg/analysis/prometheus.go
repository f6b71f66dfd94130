package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// PrometheusConfig says how to reach Prometheus.
type PrometheusConfig struct {
	// Address is the Prometheus base URL. In the plugins it must be one
	// the operator allows (--prometheus in the plugin's args), and that
	// entry's credentials are used.
	Address string `json:"address"`
	// BearerToken (inline) or BearerTokenSecret (a Secret in the
	// AnalysisRun's or Rollout's own namespace, read at every request)
	// authenticate to Prometheus instead of the operator's credentials.
	BearerToken       string        `json:"bearerToken,omitempty"`
	BearerTokenSecret *SecretKeyRef `json:"bearerTokenSecret,omitempty"`
	// BearerTokenFile (re-read on every request, so rotated tokens work)
	// and CAFile name files on danki's machine: only the command line
	// (danki analyze) may use them; in the plugins those files are the
	// controller's, and the operator's --prometheus entry holds them.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// CAFile verifies an https Prometheus; InsecureSkipVerify skips that
	// (command line only).
	CAFile             string `json:"caFile,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`

	// noRedirects: the client follows no redirect, which would carry the
	// credentials to another address (set under a tenant policy).
	noRedirects bool
}

// defaultErrorCodeRegex is the response codes Istio's and Envoy's built-in
// queries count as errors.
const defaultErrorCodeRegex = "5.."

// promQueries is a Prometheus source's query set (istio.go, envoy.go,
// promql.go build theirs): both sides' label matchers for <<.Selector>>
// and the query templates.
type promQueries struct {
	canary, stable              string
	hasStable                   bool
	histogram, requests, errors string
	leScale                     float64 // le label × leScale = milliseconds
}

// Prometheus is a Source that reads Istio's or Envoy's standard metrics, or a
// custom PromQL query set, through the Prometheus HTTP API.
//
// Known limits of the data (see docs/latency.md): rate() and increase() never
// see what a series did before its first scrape, so a new pod's coldest
// requests can be missing; and histogram buckets bound the resolution of
// every percentile (Istio/Envoy defaults: 0.5 1 5 10 25 50 100 250 500 1000
// 2500 5000 … ms, so a true p99 of 15 ms reads as ~24 ms).
type Prometheus struct {
	api     promv1.API
	address string
	timeout time.Duration
	now     func() time.Time
	logger  *slog.Logger
	sides   []promSide // canary, then stable when configured
	// observer counts the queries (WithQueryObserver; nil: none).
	observer QueryObserver
}

type promSide struct {
	name      string
	data      QueryData // Window is filled per fetch
	histogram *queryTemplate
	requests  *queryTemplate
	errors    *queryTemplate
	leScale   float64 // le label × leScale = milliseconds
	values    []promValue
}

type promValue struct {
	name  string
	query *queryTemplate
	data  QueryData
}

// newPrometheusAPI builds a Prometheus API client for settings that
// resolvePrometheus returned: the bearer token (inline, from a file re-read
// on every request, or from a Secret of the measurement's namespace) and
// TLS settings, with prometheus/common's HTTP client configuration.
func newPrometheusAPI(pc PrometheusConfig, kube func() (kubernetes.Interface, error)) (promv1.API, error) {
	httpCfg := promconfig.HTTPClientConfig{
		FollowRedirects: !pc.noRedirects,
		EnableHTTP2:     true,
		TLSConfig: promconfig.TLSConfig{
			CAFile:             pc.CAFile,
			InsecureSkipVerify: pc.InsecureSkipVerify,
		},
	}
	switch {
	case pc.BearerToken != "":
		httpCfg.Authorization = &promconfig.Authorization{Type: "Bearer", Credentials: promconfig.Secret(pc.BearerToken)}
	case pc.BearerTokenFile != "":
		httpCfg.Authorization = &promconfig.Authorization{Type: "Bearer", CredentialsFile: pc.BearerTokenFile}
	}
	if err := httpCfg.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus client settings: %w", err)
	}
	rt, err := promconfig.NewRoundTripperFromConfig(httpCfg, "danki")
	if err != nil {
		return nil, fmt.Errorf("prometheus TLS/auth settings (prometheus.caFile, prometheus.bearerTokenFile): %w", err)
	}
	if pc.BearerTokenSecret != nil {
		rt = &secretToken{ref: *pc.BearerTokenSecret, kube: kube, next: rt}
	}
	hc := &http.Client{Transport: rt}
	if pc.noRedirects {
		// The credentials are added by the transport, to every request:
		// a redirect would carry them to wherever it points.
		hc.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("prometheus at %s redirected to %s: not followed, the operator's credentials go to the operator's address only", pc.Address, req.URL.Redacted())
		}
	}
	client, err := api.NewClient(api.Config{Address: pc.Address, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("prometheus.address %q: %w", pc.Address, err)
	}
	return promv1.NewAPI(client), nil
}

// NewPrometheus builds the Prometheus source for a Config (compiled and
// with its defaults applied here; cfg is not changed), held to the policy
// of WithPolicy (default: the strictest) and reading
// prometheus.bearerTokenSecret with WithKube's client. Other options are
// ignored but WithLogger.
func NewPrometheus(cfg Config, logger *slog.Logger, opts ...Option) (*Prometheus, error) {
	rules, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	o := options(opts)
	if logger != nil {
		o.logger = logger
	}
	return newPrometheusWithRules(cfg.WithDefaults(), rules, o)
}

// newPrometheusWithRules builds the source of every Prometheus reader (the
// analyzer, the stable tail, the mirror): the policy is checked here.
func newPrometheusWithRules(cfg Config, rules *Rules, o *Analyzer) (*Prometheus, error) {
	if cfg.Prometheus == nil {
		return nil, errors.New("prometheus.address: missing")
	}
	pc, err := resolvePrometheus(*cfg.Prometheus, o.policy)
	if err != nil {
		return nil, err
	}
	promAPI, err := newPrometheusAPI(pc, o.kube)
	if err != nil {
		return nil, err
	}
	p, err := newPrometheusWithAPI(cfg, rules, promAPI, o.logger)
	if err == nil {
		p.observer = o.queries
	}
	return p, err
}

// newPrometheusWithAPI builds the source from a Config with its defaults
// applied and its compiled rules.
func newPrometheusWithAPI(cfg Config, rules *Rules, promAPI promv1.API, logger *slog.Logger) (*Prometheus, error) {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Prometheus{
		api:     promAPI,
		address: cfg.Prometheus.Address,
		timeout: rules.timeout,
		now:     time.Now,
		logger:  logger,
	}

	// The source's query set (istio.go, envoy.go, promql.go).
	var q promQueries
	switch cfg.Source {
	case SourceIstio:
		q = cfg.Istio.queries()
	case SourceEnvoy:
		q = cfg.Envoy.queries()
	case SourcePromQL:
		q = cfg.PromQL.queries()
	default:
		return nil, fmt.Errorf("source %q does not read Prometheus", cfg.Source)
	}
	canary, stable, hasStable, leScale := q.canary, q.stable, q.hasStable, q.leScale

	mk := func(name, text string) (*queryTemplate, error) {
		if text == "" {
			return nil, nil
		}
		return parseQueryTemplate(name, text)
	}
	names := []string{"canary"}
	if hasStable {
		names = append(names, "stable")
	}
	for _, name := range names {
		s := promSide{name: name, leScale: leScale}
		s.data = QueryData{Side: name, Canary: canary, Stable: stable, Selector: canary}
		if name == "stable" {
			s.data.Selector = stable
		}
		var err error
		if s.histogram, err = mk("histogram", q.histogram); err != nil {
			return nil, err
		}
		if s.requests, err = mk("requests", q.requests); err != nil {
			return nil, err
		}
		if s.errors, err = mk("errors", q.errors); err != nil {
			return nil, err
		}
		for _, q := range cfg.Queries {
			t, err := parseQueryTemplate(q.Name, q.Query)
			if err != nil {
				return nil, fmt.Errorf("queries %s: %w", q.Name, err)
			}
			d := QueryData{Side: name, Canary: q.Canary, Stable: q.Stable, Selector: q.Canary}
			if name == "stable" {
				d.Selector = q.Stable
			}
			s.values = append(s.values, promValue{name: q.Name, query: t, data: d})
		}
		p.sides = append(p.sides, s)
	}
	// Queries comparing with stable need a stable side even when latency
	// has none (source istio without istio.stable, but queries[].stable set).
	if !hasStable {
		var values []promValue
		for _, q := range cfg.Queries {
			if q.Stable == "" {
				continue
			}
			t, _ := parseQueryTemplate(q.Name, q.Query)
			values = append(values, promValue{name: q.Name, query: t, data: QueryData{Side: "stable", Canary: q.Canary, Stable: q.Stable, Selector: q.Stable}})
		}
		if len(values) > 0 {
			p.sides = append(p.sides, promSide{name: "stable", values: values, leScale: leScale})
		}
	}
	return p, nil
}

// matchers renders equality matchers in a stable order, quoting values as
// PromQL string literals.
func matchers(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return strings.Join(parts, ",")
}

// Queries renders every query for a window, for GetMetadata and messages.
// A zero window renders as <window> (a cumulative window is only known at
// measurement time).
func (p *Prometheus) Queries(window time.Duration) []string {
	var out []string
	for _, s := range p.sides {
		for _, t := range []*queryTemplate{s.histogram, s.requests, s.errors} {
			if t != nil {
				out = append(out, render(t, s.data, window))
			}
		}
		for _, v := range s.values {
			out = append(out, render(v.query, v.data, window))
		}
	}
	return out
}

func render(t *queryTemplate, d QueryData, window time.Duration) string {
	d.Window = "<window>"
	if window > 0 {
		d.Window = promRange(window)
	}
	out, err := t.render(d)
	if err != nil {
		// Validate rendered every template with the same fields.
		return fmt.Sprintf("<template %s: %v>", t.name, err)
	}
	return out
}

// promRange renders a window as a PromQL range, rounded up to whole seconds.
func promRange(w time.Duration) string {
	if rem := w % time.Second; rem != 0 {
		w += time.Second - rem
	}
	return model.Duration(w).String()
}

type promJob struct {
	side  int
	kind  string // histogram, requests, errors, value
	index int    // value index
	query string
	vec   model.Vector
	err   error
}

// Fetch runs all queries of both sides concurrently at one evaluation time.
func (p *Prometheus) Fetch(ctx context.Context, window time.Duration) (*Sample, error) {
	at := p.now()
	var jobs []*promJob
	for i, s := range p.sides {
		add := func(kind string, t *queryTemplate, d QueryData, idx int) {
			if t != nil {
				jobs = append(jobs, &promJob{side: i, kind: kind, index: idx, query: render(t, d, window)})
			}
		}
		add("histogram", s.histogram, s.data, 0)
		add("requests", s.requests, s.data, 0)
		add("errors", s.errors, s.data, 0)
		for j, v := range s.values {
			add("value", v.query, v.data, j)
		}
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.vec, j.err = p.instant(ctx, j.query, at) })
	}
	wg.Wait()

	sample := &Sample{}
	sides := make([]*Side, len(p.sides))
	for i, s := range p.sides {
		side := &Side{Name: s.name, Values: make([]Measured, len(s.values))}
		for j, v := range s.values {
			side.Values[j] = Measured{Name: v.name}
		}
		sides[i] = side
	}
	var errs []error
	for _, j := range jobs {
		sample.Queries = append(sample.Queries, j.query)
		if j.err != nil {
			errs = append(errs, j.err)
			continue
		}
		side := sides[j.side]
		switch j.kind {
		case "histogram":
			h, err := toHistogram(j.vec, p.sides[j.side].leScale, j.query)
			if err != nil {
				errs = append(errs, err)
			}
			side.Latency, side.LatencyFrom = h, j.query
		case "requests", "errors", "value":
			m, err := toMeasured(j.vec, j.query)
			if err != nil {
				errs = append(errs, err)
			}
			switch j.kind {
			case "requests":
				side.Requests = m
			case "errors":
				side.Errors = m
			default:
				m.Name = side.Values[j.index].Name
				side.Values[j.index] = m
			}
		}
	}
	sample.Canary = *sides[0]
	if len(sides) > 1 {
		sample.Stable = sides[1]
	}
	return sample, firstError(errs)
}

// instant runs one instant query and returns its vector.
func (p *Prometheus) instant(ctx context.Context, query string, at time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	val, warnings, _, err := p.api.Query(ctx, query, at, promv1.WithTimeout(p.timeout))
	if p.observer != nil {
		p.observer.PrometheusQuery(queryErrorKind(err, val))
	}
	if err != nil {
		return nil, p.explain(query, err)
	}
	if len(warnings) > 0 {
		p.logger.Warn("prometheus query returned warnings", "query", query, "warnings", []string(warnings))
	}
	switch v := val.(type) {
	case model.Vector:
		return v, nil
	case *model.Scalar:
		return model.Vector{{Value: v.Value, Timestamp: v.Timestamp}}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("prometheus query %s returned a %s; it must return an instant vector", query, val.Type())
}

func (p *Prometheus) explain(query string, err error) error {
	if ce, ok := asCredentialError(err); ok {
		return fmt.Errorf("prometheus at %s not queried: %w", p.address, ce)
	}
	var apiErr *promv1.Error
	errors.As(err, &apiErr)
	// One classification for the message and the query-error metric
	// (observer.go's queryErrorKind).
	switch queryErrorKind(err, nil) {
	case "bad_query":
		return fmt.Errorf("prometheus rejected query %s: %s; fix the PromQL", query, apiErr.Msg)
	case "server":
		if apiErr == nil {
			break
		}
		msg := apiErr.Msg
		if detail := oneLine(apiErr.Detail); detail != "" {
			if len(detail) > 300 {
				detail = detail[:300] + "…"
			}
			msg += ": " + detail
		}
		return fmt.Errorf("prometheus query %s failed (%s): %s", query, apiErr.Type, msg)
	case "timeout":
		return fmt.Errorf("prometheus query %s: no answer within %s; raise timeout or check Prometheus' load: %w", query, p.timeout, err)
	case "tls":
		return fmt.Errorf("prometheus at %s: TLS verification failed (query %s): %w; set prometheus.caFile to the CA that signed its certificate (or insecureSkipVerify for a test setup)", p.address, query, err)
	case "unreachable":
		return fmt.Errorf("prometheus at %s unreachable (query %s): %w; check prometheus.address and the network path", p.address, query, err)
	}
	return fmt.Errorf("prometheus query %s: %w", query, err)
}

// firstError reports the first failure in full and counts the others: when
// Prometheus is down every query fails the same way.
func firstError(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w (and %d more queries failed)", errs[0], len(errs)-1)
}

// toHistogram turns a `sum by (le)` result into a Histogram in milliseconds.
// Series with the same le (e.g. a query without sum by (le)) are added up.
func toHistogram(vec model.Vector, leScale float64, query string) (Histogram, error) {
	var h Histogram
	for _, s := range vec {
		le, ok := s.Metric[model.BucketLabel]
		if !ok {
			return h, fmt.Errorf("histogram query %s returned a series without an le label (%s); aggregate it with sum by (le) (increase(…_bucket[…]))", query, s.Metric)
		}
		bound, err := strconv.ParseFloat(string(le), 64)
		if err != nil {
			return h, fmt.Errorf("histogram query %s returned le=%q, which is not a number", query, le)
		}
		v := float64(s.Value)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			// A NaN or infinite bucket count is broken data: skipping it
			// (or comparing with it) would let the verdict pass.
			return h, fmt.Errorf("histogram query %s returned the non-finite count %s for series %s; check the query and the exporter", query, s.Value, s.Metric)
		}
		if !math.IsInf(bound, +1) {
			bound *= leScale
		}
		h.Buckets = append(h.Buckets, Bucket{UpperBound: bound, Count: v})
	}
	h.normalize()
	return h, nil
}

// toMeasured turns a single-number result into a Measured. No series, or
// NaN (e.g. 0/0), is "not found" (with NaN recorded); ±Inf is an error;
// several series is an error, because which one to compare would be a guess.
func toMeasured(vec model.Vector, query string) (Measured, error) {
	m := Measured{From: query}
	switch len(vec) {
	case 0:
		return m, nil
	case 1:
		v := float64(vec[0].Value)
		if math.IsNaN(v) {
			m.NaN = true // e.g. 0/0: no value, but not "no series" either
			return m, nil
		}
		if math.IsInf(v, 0) {
			return m, fmt.Errorf("query %s returned %s for series %s; a count or value must be finite", query, vec[0].Value, vec[0].Metric)
		}
		m.Value, m.Found = v, true
		return m, nil
	}
	return m, fmt.Errorf("query %s returned %d series; it must return one number, wrap it in sum(…) or max(…)", query, len(vec))
}

// compile checks the prometheus block of a source that reads Prometheus
// (pc nil: the block is missing).
func (pc *PrometheusConfig) compile(p *config.Errors) {
	if pc == nil || pc.Address == "" {
		p.Addf("prometheus.address", "missing; set the Prometheus URL, e.g. http://prometheus.istio-system:9090")
		return
	}
	if !strings.HasPrefix(pc.Address, "http://") && !strings.HasPrefix(pc.Address, "https://") {
		p.Addf("prometheus.address", "%q is not an http(s) URL; write it like http://prometheus.istio-system:9090", pc.Address)
	}
	if pc.BearerToken != "" && pc.BearerTokenFile != "" {
		p.Addf("prometheus.bearerTokenFile", "set together with prometheus.bearerToken; keep only one")
	}
	if ref := pc.BearerTokenSecret; ref != nil {
		if pc.BearerToken != "" || pc.BearerTokenFile != "" {
			p.Addf("prometheus.bearerTokenSecret", "set together with prometheus.bearerToken or bearerTokenFile; keep only one")
		}
		if ref.Name == "" {
			p.Addf("prometheus.bearerTokenSecret.name", "missing; name a Secret in the AnalysisRun's (or Rollout's) own namespace")
		}
		if ref.Key == "" {
			p.Addf("prometheus.bearerTokenSecret.key", "missing; name the Secret's key that holds the token, e.g. token")
		}
	}
}

func compileLabels(p *config.Errors, field string, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !model.LegacyValidation.IsValidLabelName(k) {
			p.Addf(field, "%q is not a Prometheus label name", k)
		}
	}
}
