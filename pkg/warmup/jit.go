package warmup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// The JVM's own signal. A JIT makes a pod faster in steps (tiers compiled
// at invocation counts of their own), so a latency plateau between two
// steps looks converged; the JIT's cumulative compile time still rising is
// the evidence that a step is still coming. Where the pod exposes it —
// Micrometer's jvm_compilation_time_ms_total on Spring Boot's
// /actuator/prometheus, the Prometheus Java client's (and the JMX
// exporter agent's) jvm_compilation_time_seconds_total, or, on a Spring
// Boot app without a Prometheus registry, Micrometer's own JSON at
// /actuator/metrics/jvm.compilation.time (exposed wherever the actuator's
// metrics endpoint is) — the warm-up reads it at every window and holds
// the stop back while the JIT is still compiling. Never required: a pod
// without it is judged on latency alone.
//
// Trust: the page is read from the pod being warmed only — its own address
// (the target's host), at a port and path the config gives, never a host —
// through the warm-up's checked dialer (the operator's network policy and
// the run's pod guard) and, for a pod dialled with Istio mTLS, its mTLS;
// redirects are not followed, the answer is read up to jitMaxPage, and the
// request carries no marker header and no credentials.

// Defaults of JITMetrics.
const (
	DefaultJITMetricsPath = "/actuator/prometheus"
	// DefaultJITMetric is Micrometer's name (Spring Boot's actuator);
	// jitMetricSeconds the Prometheus Java client's (simpleclient_hotspot,
	// client_java 1.x, the JMX exporter's Java agent). With the default,
	// either is used.
	DefaultJITMetric = "jvm_compilation_time_ms_total"
	jitMetricSeconds = "jvm_compilation_time_seconds_total"
	// jitActuatorPath is the Spring Boot actuator's JSON of Micrometer's
	// jvm.compilation.time: read with the default path and metric when
	// the Prometheus page has no signal (404, or without the metric).
	jitActuatorPath   = "/actuator/metrics/jvm.compilation.time"
	jitActuatorMetric = "jvm.compilation.time"
)

// JITMetrics is where the pod exposes its JIT's compile time
// (Config.JITMetrics).
type JITMetrics struct {
	// Enabled: read the signal where the pod exposes it. Default true; a
	// pod that does not (404, no such metric) is judged on latency alone.
	Enabled *bool `json:"enabled,omitempty"`
	// Port is the pod's port serving the page (its own IP always).
	// Default: the warm-up's target port. Give it for gRPC services (their
	// port speaks no HTTP/1.1) and for a management port.
	Port int `json:"port,omitempty"`
	// Path is the page's path, from "/": Prometheus text, or the
	// actuator's JSON of one meter. Default /actuator/prometheus, then
	// (with the default Metric) /actuator/metrics/jvm.compilation.time.
	Path string `json:"path,omitempty"`
	// Metric is the counter of the JIT's cumulative compile time, summed
	// over its series; a name ending in _seconds or _seconds_total is in
	// seconds, any other in milliseconds. Default: Micrometer's
	// jvm_compilation_time_ms_total, else the Prometheus Java client's
	// jvm_compilation_time_seconds_total.
	Metric string `json:"metric,omitempty"`
}

// on says whether the signal is read (Enabled, default true).
func (j JITMetrics) on() bool { return j.Enabled == nil || *j.Enabled }

func (j JITMetrics) withDefaults() JITMetrics {
	setDefault(&j.Path, DefaultJITMetricsPath)
	return j
}

// validate checks a defaulted JITMetrics; errors name the field.
func (j JITMetrics) validate(errs *config.Errors) {
	if j.Port < 0 || j.Port > 65535 {
		errs.Addf("jitMetrics.port", "must be a port number 1–65535 of the pod, or left out for the warm-up's target port (got %d)", j.Port)
	}
	if !strings.HasPrefix(j.Path, "/") || strings.HasPrefix(j.Path, "//") {
		errs.Addf("jitMetrics.path", "%q must be a path on the pod starting with a single /, such as /actuator/prometheus (the pod's own address is always used)", j.Path)
	} else if u, err := url.Parse(j.Path); err != nil || u.Scheme != "" || u.Host != "" || u.Fragment != "" {
		errs.Addf("jitMetrics.path", "%q must be a path (and query) on the pod, such as /actuator/prometheus", j.Path)
	}
	if j.Metric != "" && !model.LegacyValidation.IsValidMetricName(j.Metric) {
		errs.Addf("jitMetrics.metric", "%q is not a Prometheus metric name, such as %s", j.Metric, DefaultJITMetric)
	}
}

// metrics are the names looked up on the page, in order.
func (j JITMetrics) metrics() []string {
	if j.Metric != "" {
		return []string{j.Metric}
	}
	return []string{DefaultJITMetric, jitMetricSeconds}
}

// jitURL is where the signal of target t is looked for first: t's own
// host, the configured port (default t's) and path; "" when it is not read
// (off, a gRPC target without a port given, a target URL that cannot be
// parsed). Only the port and path come from the config: the host is the
// pod's.
func (c *Config) jitURL(t Target) string {
	if pages := c.jitURLs(t); len(pages) > 0 {
		return pages[0]
	}
	return ""
}

// jitURLs are the pages the signal of target t is looked for on, in
// order: the configured one and, with the default path and metric, the
// actuator's JSON on the same port.
func (c *Config) jitURLs(t Target) []string {
	j := c.JITMetrics.withDefaults()
	if !j.on() || (c.isGRPC() && j.Port == 0) {
		return nil
	}
	paths := []string{j.Path}
	if j.Path == DefaultJITMetricsPath && j.Metric == "" {
		paths = append(paths, jitActuatorPath)
	}
	var pages []string
	for _, p := range paths {
		if u := jitPageURL(t, j.Port, p); u != "" {
			pages = append(pages, u)
		}
	}
	return pages
}

// jitPageURL is path on t's own host, at jitPort (0: t's port).
func jitPageURL(t Target, jitPort int, path string) string {
	u, err := url.Parse(t.URL)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if jitPort != 0 {
		port = strconv.Itoa(jitPort)
	}
	if port == "" {
		port = "80"
	}
	ref, err := url.Parse(path)
	if err != nil {
		return ""
	}
	page := url.URL{Scheme: "http", Host: net.JoinHostPort(u.Hostname(), port), Path: ref.Path, RawPath: ref.RawPath, RawQuery: ref.RawQuery}
	return page.String()
}

// jitMaxPage bounds the metrics page read: a JVM's page is tens of KiB.
const jitMaxPage = 1 << 20

// jitScrapeTimeout bounds one read of the page (and the per-request
// timeout, when shorter).
const jitScrapeTimeout = 5 * time.Second

// jitGiveUp: a page that failed this many reads in a row before any
// succeeded (no answer, HTTP 5xx) is given up as unreadable.
const jitGiveUp = 3

// jitStatus is what became of a target's signal.
type jitStatus int

const (
	jitPending    jitStatus = iota // no answer yet
	jitReadable                    // readings coming in
	jitNotExposed                  // 404, or no such metric on the page
	jitUnreadable                  // another answer, a page that does not parse, no answer jitGiveUp times
)

// jitReader reads one target's signal, one read at a time, in the
// background: the coordinator kicks it at every window and takes its
// readings at the next, never waiting for the pod.
type jitReader struct {
	url string
	// next are the pages to look on after url, when it has no signal.
	next   []string
	client *http.Client
	names  []string
	ctx    context.Context
	// count is the target's requests so far: a reading is taken at the
	// count when the page answered.
	count func() int64

	mu       sync.Mutex
	busy     bool
	readings []rule.Reading
	status   jitStatus
	why      string // for jitNotExposed, jitUnreadable: what the page said
	failures int    // reads failed in a row
	// missed are what the earlier pages without the signal said.
	missed []string
	wg     sync.WaitGroup
}

// newJITReader returns the reader of t's signal, nil when it is not read.
// Its requests go through the warm-up's checked dial (dialContext: the
// network policy, the guard, mTLS for a pod that has it).
func (c *session) newJITReader(ctx context.Context, t Target, count func() int64) *jitReader {
	pages := c.jitURLs(t)
	if len(pages) == 0 {
		return nil
	}
	return &jitReader{
		url:    pages[0],
		next:   pages[1:],
		client: c.sideClient(min(c.Timeout.D(), jitScrapeTimeout)),
		names:  c.JITMetrics.metrics(),
		ctx:    ctx,
		count:  count,
	}
}

// kick starts a read unless one is under way or the signal was given up.
func (r *jitReader) kick() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy || r.status == jitNotExposed || r.status == jitUnreadable || r.ctx.Err() != nil {
		return
	}
	r.busy = true
	r.wg.Go(func() {
		ms, status, why := r.read()
		requests := r.count()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.busy = false
		switch {
		case status == jitReadable:
			r.readings = append(r.readings, rule.Reading{Requests: requests, MS: ms})
			r.status, r.failures = jitReadable, 0
		case status == jitPending: // no answer: try again
			if r.ctx.Err() != nil {
				return
			}
			r.failures++
			if r.status == jitPending {
				r.why = why
				if r.failures >= jitGiveUp {
					r.status = jitUnreadable
				}
			}
		case status == jitNotExposed && r.status == jitPending && len(r.next) > 0:
			// No signal on this page: the next one, at the next kick.
			r.missed = append(r.missed, why)
			r.url, r.next, r.failures = r.next[0], r.next[1:], 0
		default:
			r.status, r.why = status, why
		}
	})
}

// close waits for a read under way (ctx is cancelled first) and drops the
// idle connection.
func (r *jitReader) close() {
	if r == nil {
		return
	}
	r.wg.Wait()
	r.client.CloseIdleConnections()
}

// readingsFrom are the readings taken since the first n (in order): each
// reading is handed to the stopping rule once, not the whole list at every
// window.
func (r *jitReader) readingsFrom(n int) []rule.Reading {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.readings[n:])
}

// where is the page for messages: ":8080/actuator/prometheus".
func (r *jitReader) where() string {
	u, err := url.Parse(r.url)
	if err != nil {
		return r.url
	}
	return ":" + u.Port() + u.RequestURI()
}

// read reads the page once: the compile time in ms (jitReadable), or why
// not — jitPending for an error worth another try (no answer, HTTP 5xx).
func (r *jitReader) read() (ms float64, status jitStatus, why string) {
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, jitUnreadable, err.Error()
	}
	// No marker header (this is no warm-up request) and no credentials.
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,application/json;q=0.9,*/*;q=0.1")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, jitPending, fmt.Sprintf("no answer at %s: %v", r.where(), err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(io.LimitReader(resp.Body, jitMaxPage+1))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, jitNotExposed, fmt.Sprintf("404 at %s", r.where())
	case resp.StatusCode >= 500:
		return 0, jitPending, fmt.Sprintf("HTTP %s at %s", resp.Status, r.where())
	case resp.StatusCode != http.StatusOK:
		return 0, jitUnreadable, fmt.Sprintf("HTTP %s at %s", resp.Status, r.where())
	case err != nil:
		return 0, jitPending, fmt.Sprintf("reading %s: %v", r.where(), err)
	case len(page) > jitMaxPage:
		return 0, jitUnreadable, fmt.Sprintf("%s is over %d KiB", r.where(), jitMaxPage>>10)
	}
	if isJSON(resp.Header, page) {
		ms, found, err := jitActuatorMS(page)
		switch {
		case err != nil:
			return 0, jitUnreadable, fmt.Sprintf("%s is no actuator metric JSON: %v", r.where(), err)
		case !found:
			return 0, jitNotExposed, fmt.Sprintf("no %s at %s", jitActuatorMetric, r.where())
		}
		return ms, jitReadable, ""
	}
	ms, found, err := jitCompileMS(page, resp.Header, r.names)
	switch {
	case err != nil:
		return 0, jitUnreadable, fmt.Sprintf("%s is no Prometheus text page: %v", r.where(), err)
	case !found:
		return 0, jitNotExposed, fmt.Sprintf("no %s at %s", strings.Join(r.names, " or "), r.where())
	}
	return ms, jitReadable, ""
}

// isJSON says whether the page is JSON (the actuator's), by its media
// type (application/json, application/vnd.spring-boot.actuator.v3+json)
// or, without one, by its first byte.
func isJSON(h http.Header, page []byte) bool {
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil {
		return mt == "application/json" || strings.HasSuffix(mt, "+json")
	}
	return bytes.HasPrefix(bytes.TrimSpace(page), []byte("{"))
}

// jitActuatorMS reads the Spring Boot actuator's JSON of one Micrometer
// meter (/actuator/metrics/{name}): jvm.compilation.time is a function
// counter, its measurement COUNT in the meter's baseUnit (milliseconds;
// seconds accepted). found is false for another meter or no measurement.
func jitActuatorMS(page []byte) (ms float64, found bool, err error) {
	var meter struct {
		Name         string `json:"name"`
		BaseUnit     string `json:"baseUnit"`
		Measurements []struct {
			Statistic string  `json:"statistic"`
			Value     float64 `json:"value"`
		} `json:"measurements"`
	}
	if err := json.Unmarshal(page, &meter); err != nil {
		return 0, false, err
	}
	if meter.Name != jitActuatorMetric {
		return 0, false, nil
	}
	for _, m := range meter.Measurements {
		if m.Statistic != "COUNT" && m.Statistic != "TOTAL" && m.Statistic != "TOTAL_TIME" {
			continue
		}
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || m.Value < 0 {
			return 0, false, fmt.Errorf("%s is %g", meter.Name, m.Value)
		}
		switch meter.BaseUnit {
		case "", "milliseconds", "ms":
			return m.Value, true, nil
		case "seconds", "s":
			return m.Value * 1000, true, nil
		}
		return 0, false, fmt.Errorf("%s in %q: want milliseconds or seconds", meter.Name, meter.BaseUnit)
	}
	return 0, false, nil
}

// jitCompileMS finds the first of names on a Prometheus text page and sums
// its series, in ms (names ending in _seconds or _seconds_total are in
// seconds). The page is parsed by prometheus/common's expfmt; a family
// named with or without _total matches (the Prometheus Java client names
// a counter's family without it in one format and with it in the other).
func jitCompileMS(page []byte, h http.Header, names []string) (ms float64, found bool, err error) {
	format := expfmt.ResponseFormat(h)
	if format.FormatType() != expfmt.TypeTextPlain {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(page), format)
	families := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, false, err
		}
		families[mf.GetName()] = &mf
	}
	for _, name := range names {
		mf := families[name]
		if mf == nil {
			if base, ok := strings.CutSuffix(name, "_total"); ok {
				mf = families[base]
			} else {
				mf = families[name+"_total"]
			}
		}
		if mf == nil || len(mf.GetMetric()) == 0 {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
		if math.IsNaN(sum) || math.IsInf(sum, 0) || sum < 0 {
			return 0, false, fmt.Errorf("%s is %g", name, sum)
		}
		if strings.HasSuffix(strings.TrimSuffix(name, "_total"), "_seconds") {
			sum *= 1000
		}
		return sum, true, nil
	}
	return 0, false, nil
}

// jitResult says what the warm-up made of a target's signal, for
// TargetResult.JIT: the reader's status, and the stopping rule's notes
// (rule.Pod.JIT: "" when it judged on latency alone).
func jitResult(r *jitReader, notes string) string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	status, why, n, where := r.status, r.why, len(r.readings), r.where()
	if n == 0 && len(r.missed) > 0 {
		why = strings.Join(append(slices.Clone(r.missed), why), ", ")
	}
	r.mu.Unlock()
	switch status {
	case jitNotExposed:
		return "not exposed (" + why + ")"
	case jitUnreadable:
		if n > 0 {
			return fmt.Sprintf("used, then unreadable (%s)", why)
		}
		return "unreadable (" + why + ")"
	case jitPending:
		if why != "" {
			return "unreadable (" + why + ")"
		}
		return "no reading yet"
	}
	if notes == "" {
		return "used (read at " + where + ")"
	}
	return "used (" + notes + "; read at " + where + ")"
}
