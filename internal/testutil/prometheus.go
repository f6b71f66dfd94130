package testutil

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Prometheus is a fake Prometheus HTTP API on 127.0.0.1 that answers
// instant queries (/api/v1/query, GET or POST, as client_golang's api/v1
// sends them) in Prometheus' own JSON shape. It holds series, each with a
// label set and one value that stands for the series' increase over any
// window, and evaluates the first vector selector of a query for real:
// metric name and =, !=, =~, !~ matchers, so a query that selects the
// wrong series gets the wrong answer, as it would from a real Prometheus.
// A query containing "by (le)" returns one sum per le label; any other
// query returns the sum of the matching series (no series: an empty
// vector). Set answers exact numbers for other query shapes, and Respond
// overrides everything (errors, malformed answers).
//
// All methods are safe for concurrent use.
type Prometheus struct {
	URL string

	mu      sync.Mutex
	series  []promSeries
	values  []promValue
	respond func(query string) (status int, body string)
	delay   time.Duration
	queries []string
	auth    []string
}

type promSeries struct {
	labels map[string]string
	value  float64
}

type promValue struct {
	substring string
	value     float64
}

// NewPrometheus starts a fake Prometheus that lives until the test ends.
func NewPrometheus(t testing.TB) *Prometheus {
	t.Helper()
	p := &Prometheus{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Add adds a series: name is the metric name, value its increase over any
// window.
func (p *Prometheus) Add(name string, labels map[string]string, value float64) {
	l := map[string]string{"__name__": name}
	for k, v := range labels {
		l[k] = v
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.series = append(p.series, promSeries{labels: l, value: value})
}

// AddHistogram adds the <name>_bucket series of one histogram: cumulative
// counts per upper bound (the last bound is usually +Inf), with le written
// as Prometheus writes it.
func (p *Prometheus) AddHistogram(name string, labels map[string]string, bounds, cumulativeCounts []float64) {
	for i, b := range bounds {
		l := map[string]string{"le": FormatLe(b)}
		for k, v := range labels {
			l[k] = v
		}
		p.Add(name+"_bucket", l, cumulativeCounts[i])
	}
}

// FormatLe writes a bucket bound as Prometheus' le label does.
func FormatLe(b float64) string {
	if math.IsInf(b, +1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}

// Set answers every query containing substring with one sample of value
// (checked before the series).
func (p *Prometheus) Set(substring string, value float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.values = append(p.values, promValue{substring, value})
}

// Respond makes f answer every query with an HTTP status and JSON body.
func (p *Prometheus) Respond(f func(query string) (status int, body string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.respond = f
}

// Delay makes every answer wait d (or until the request is cancelled).
func (p *Prometheus) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Queries returns every query received, in order.
func (p *Prometheus) Queries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.queries...)
}

// Authorizations returns the Authorization header of every request.
func (p *Prometheus) Authorizations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auth...)
}

// ServeHTTP answers /api/v1/query.
func (p *Prometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query" {
		http.Error(w, `{"status":"error","errorType":"not_found","error":"fake Prometheus answers /api/v1/query only"}`, http.StatusNotFound)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.Form.Get("query")
	p.mu.Lock()
	p.queries = append(p.queries, q)
	p.auth = append(p.auth, r.Header.Get("Authorization"))
	delay := p.delay
	p.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	status, body := p.answer(q)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

var (
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*$`)
)

func (p *Prometheus) answer(q string) (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.respond != nil {
		return p.respond(q)
	}
	for _, v := range p.values {
		if strings.Contains(q, v.substring) {
			return http.StatusOK, VectorJSON(SampleJSON(nil, v.value))
		}
	}
	m := selectorRe.FindStringSubmatch(q)
	if m == nil {
		return http.StatusOK, VectorJSON()
	}
	match, err := parseMatchers(m[1], m[2])
	if err != nil {
		return http.StatusBadRequest, fmt.Sprintf(`{"status":"error","errorType":"bad_data","error":%q}`, err.Error())
	}
	byLe := strings.Contains(q, "by (le)")
	sums := map[string]float64{}
	for _, s := range p.series {
		if !match(s.labels) {
			continue
		}
		key := ""
		if byLe {
			key = s.labels["le"]
		}
		sums[key] += s.value
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		var labels map[string]string
		if byLe {
			labels = map[string]string{"le": k}
		}
		out = append(out, SampleJSON(labels, sums[k]))
	}
	return http.StatusOK, VectorJSON(out...)
}

// parseMatchers parses the inside of {…}: comma-separated label matchers
// with quoted values.
func parseMatchers(name, inside string) (func(map[string]string) bool, error) {
	type matcher struct {
		label, op string
		value     string
		re        *regexp.Regexp
	}
	ms := []matcher{{label: "__name__", op: "=", value: name}}
	for _, part := range splitOutsideQuotes(inside) {
		if strings.TrimSpace(part) == "" {
			continue
		}
		m := matcherRe.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("fake prometheus: cannot parse matcher %q", part)
		}
		value, err := strconv.Unquote(m[3])
		if err != nil {
			return nil, fmt.Errorf("fake prometheus: matcher %q: %v", part, err)
		}
		mt := matcher{label: m[1], op: m[2], value: value}
		if mt.op == "=~" || mt.op == "!~" {
			if mt.re, err = regexp.Compile("^(?:" + value + ")$"); err != nil {
				return nil, fmt.Errorf("fake prometheus: matcher %q: %v", part, err)
			}
		}
		ms = append(ms, mt)
	}
	return func(labels map[string]string) bool {
		for _, m := range ms {
			v := labels[m.label] // a missing label is the empty string, as in PromQL
			ok := false
			switch m.op {
			case "=":
				ok = v == m.value
			case "!=":
				ok = v != m.value
			case "=~":
				ok = m.re.MatchString(v)
			case "!~":
				ok = !m.re.MatchString(v)
			}
			if !ok {
				return false
			}
		}
		return true
	}, nil
}

func splitOutsideQuotes(s string) []string {
	var parts []string
	start, inQuote, escaped := 0, false, false
	for i, c := range s {
		switch {
		case escaped:
			escaped = false
		case c == '\\' && inQuote:
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// SampleJSON is one instant-vector sample in Prometheus' JSON: labels and
// a value (NaN and ±Inf written as Prometheus writes them).
func SampleJSON(labels map[string]string, v float64) string {
	if labels == nil {
		labels = map[string]string{}
	}
	m, _ := json.Marshal(labels)
	return fmt.Sprintf(`{"metric":%s,"value":[1700000000,%q]}`, m, FormatLe(v))
}

// VectorJSON is a successful instant-query answer holding samples.
func VectorJSON(samples ...string) string {
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}

// FastSlowBucketsJSON answers a `sum by (le)` bucket query for one window
// of 100 requests: slow of them in (100, 250] ms, the rest in (1, 5] ms,
// cumulative over bounds (ms), as a cold pod's histogram reads.
func FastSlowBucketsJSON(bounds []float64, slow int) string {
	slow = min(100, max(0, slow))
	out := make([]string, 0, len(bounds))
	for _, b := range bounds {
		n := 0
		if b >= 5 {
			n += 100 - slow
		}
		if b >= 250 {
			n += slow
		}
		out = append(out, SampleJSON(map[string]string{"le": FormatLe(b)}, float64(n)))
	}
	return VectorJSON(out...)
}
