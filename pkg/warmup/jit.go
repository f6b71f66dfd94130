package warmup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/pkg/config"
)

// The JVM's own signal. A JIT makes a pod faster in steps (tiers compiled
// at invocation counts of their own), so a latency plateau between two
// steps looks converged; the JIT's cumulative compile time still rising is
// the evidence that a step is still coming. Where the pod exposes it —
// Micrometer's jvm_compilation_time_ms_total on Spring Boot's
// /actuator/prometheus, the Prometheus Java client's (and the JMX
// exporter agent's) jvm_compilation_time_seconds_total — the warm-up reads
// it at every window and holds the stop back while the JIT is still
// compiling. Never required: a pod without it is judged on latency alone.
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
	// Path is the page's path, from "/". Default /actuator/prometheus.
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

// jitURL is where the signal of target t is read: t's own host, the
// configured port (default t's) and path; "" when it is not read (off, a
// gRPC target without a port given, a target URL that cannot be parsed).
// Only the port and path come from the config: the host is the pod's.
func (c *Config) jitURL(t Target) string {
	j := c.JITMetrics.withDefaults()
	if !j.on() || (c.isGRPC() && j.Port == 0) {
		return ""
	}
	u, err := url.Parse(t.URL)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if j.Port != 0 {
		port = strconv.Itoa(j.Port)
	}
	if port == "" {
		port = "80"
	}
	ref, err := url.Parse(j.Path)
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

// jitReading is the JIT's cumulative compile time, in ms, read when the
// target had been sent requests requests.
type jitReading struct {
	requests int64
	ms       float64
}

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
	url    string
	client *http.Client
	names  []string
	ctx    context.Context
	// count is the target's requests so far: a reading is taken at the
	// count when the page answered.
	count func() int64

	mu       sync.Mutex
	busy     bool
	readings []jitReading
	status   jitStatus
	why      string // for jitNotExposed, jitUnreadable: what the page said
	failures int    // reads failed in a row
	wg       sync.WaitGroup
}

// newJITReader returns the reader of t's signal, nil when it is not read.
// Its requests go through the warm-up's checked dial (dialContext: the
// network policy, the guard, mTLS for a pod that has it).
func (c *Config) newJITReader(ctx context.Context, t Target, count func() int64) *jitReader {
	u := c.jitURL(t)
	if u == "" {
		return nil
	}
	return &jitReader{
		url:    u,
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
			r.readings = append(r.readings, jitReading{requests: requests, ms: ms})
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

// appendNew appends to seen (the readings taken so far, in order) those
// taken since: each reading is copied once, not the whole list at every
// window.
func (r *jitReader) appendNew(seen []jitReading) []jitReading {
	if r == nil {
		return seen
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(seen, r.readings[len(seen):]...)
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
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
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
	ms, found, err := jitCompileMS(page, resp.Header, r.names)
	switch {
	case err != nil:
		return 0, jitUnreadable, fmt.Sprintf("%s is no Prometheus text page: %v", r.where(), err)
	case !found:
		return 0, jitNotExposed, fmt.Sprintf("no %s at %s", strings.Join(r.names, " or "), r.where())
	}
	return ms, jitReadable, ""
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

// jitQuietShare and jitQuietPeakShare say when the JIT has stopped
// compiling, judged over the stopping rule's latest block of requests (a
// quarter of the warm-up, at least 300 requests: the span the latency is
// judged over). The JIT is quiet when the compile time it added over the
// block is at most jitQuietShare of its total so far, or when its compile
// time per request over the block has fallen to at most jitQuietPeakShare
// of the highest it had over any earlier look's block.
//
// The share: measured on the sample app (JDK 17, one CPU; docs/warmup.md),
// 4.6 s compiled by its 500th request, then, its latency long settled,
// +0 to +56 ms per 100 requests with single compiles of 100–350 ms — 1–2 %
// of its total per block, up to 3.5 % around one of those compiles. The
// total includes the compiling before the first request (the JVM's start,
// a pod that warmed itself): a pod warm from the start is quiet at once.
//
// The fall from the peak: a Spring Boot service keeps compiling in the
// background for thousands of requests (the lab's Spring sample behind its
// sidecar, one CPU: ~5 ms of compiling per request over its first blocks,
// a burst of 2 ms per request around request 6,000, then 0.4–0.5 ms), so
// its blocks, which grow with the warm-up, add more than 3 % of its total
// long after its latency settled; a rate a tenth of its peak is a JIT
// that has done its work, whatever the service's size. Not an absolute
// cap: a block of 2,000 requests of a big service passes any fixed number
// of milliseconds of background compiling.
const (
	jitQuietShare     = 0.03
	jitQuietPeakShare = 0.1
)

// jitSignal is the stopping rule's view of a target's JIT (stopState.jit):
// its readings, and what the rule made of them.
type jitSignal struct {
	readings []jitReading
	// quietFrom is the request count from which the JIT has been quiet
	// (jitQuietShare, jitQuietPeakShare) at every look since (0: not quiet
	// at the latest look); held counts the looks at which a still compiling JIT held
	// back a stop.
	quietFrom int64
	held      int
	// busy is the latest look's "still compiling" figures ("" quiet).
	busy string
	// peak is the highest compile time per request over a look's block.
	peak float64
}

// quiet says whether the JIT has stopped compiling over the span of
// requests up to n, and known whether the readings tell: a reading within
// the span and one at least a span before it (from: its request count). A
// signal that went stale (no reading for a span) tells nothing: the
// warm-up never needs it. Each look's compile time per request counts
// towards the peak (jitQuietPeakShare).
func (j *jitSignal) quiet(n, span int64) (quiet, known bool, added float64, over, from int64) {
	if j == nil || len(j.readings) < 2 {
		return false, false, 0, 0, 0
	}
	b := j.readings[len(j.readings)-1]
	if n-b.requests > span {
		return false, false, 0, 0, 0
	}
	for i := len(j.readings) - 2; i >= 0; i-- {
		if a := j.readings[i]; a.requests <= b.requests-span {
			added, over = b.ms-a.ms, b.requests-a.requests
			rate := added / float64(over)
			j.peak = max(j.peak, rate)
			return added <= jitQuietShare*b.ms || rate <= jitQuietPeakShare*j.peak, true, added, over, a.requests
		}
	}
	return false, false, 0, 0, 0
}

// hold is the JVM signal's part in the stopping rule (Config.next), given
// the rule's check on latency alone: a target whose JIT is still compiling
// is not called warm — next to stable or on its own plateau — however
// flat its latency: the JIT gets faster in steps, and a flat stretch
// between two is no end. Rejection is never held, nor the bounds
// (deadline, maxRequests, acceptNearStable: the coordinator's).
//
// A quiet JIT releases nothing sooner: caches fill and lazy endpoints
// warm without it, so it cannot vouch for a plateau (a plateau judged
// only since the JIT went quiet released the zoo's cache-fill early in 60 %
// of runs: docs/warmup.md).
func (j *jitSignal) hold(c *Config, ch check, windows []WindowStats) check {
	if j == nil {
		return ch
	}
	complete := completePrefix(windows)
	if len(complete) == 0 {
		return ch
	}
	n := complete[len(complete)-1].Requests
	span := int64(max(c.blockWindows(len(complete)), 1) * c.Window)
	quiet, known, added, over, from := j.quiet(n, span)
	switch {
	case !known:
		j.quietFrom, j.busy = 0, ""
		return ch
	case quiet:
		if j.quietFrom == 0 {
			j.quietFrom = from
		}
		j.busy = ""
		return ch
	}
	total := j.readings[len(j.readings)-1].ms
	j.quietFrom = 0
	j.busy = fmt.Sprintf("the JIT is still compiling: +%s over the last %d requests (%.1f %% of its %s, %.2f ms per request; quiet is at most %g %% or %g of its peak %.2f ms per request)",
		formatMS(added), over, 100*added/max(total, 1), formatMS(total), added/float64(max(over, 1)), 100*jitQuietShare, jitQuietPeakShare, j.peak)
	if ch.converged && ch.rejected == "" {
		j.held++
		ch.converged, ch.settled, ch.plateau = false, "", false
		ch.why = "latency converged but " + j.busy
	}
	return ch
}

func formatMS(ms float64) string {
	if ms >= 10000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// jitResult says what the warm-up made of a target's signal, for
// TargetResult.JIT.
func jitResult(r *jitReader, j *jitSignal) string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	status, why, n := r.status, r.why, len(r.readings)
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
	if j == nil {
		return "used"
	}
	var notes []string
	switch {
	case j.quietFrom > 0:
		notes = append(notes, fmt.Sprintf("compile time flat since request %d", j.quietFrom))
	case j.busy != "":
		notes = append(notes, j.busy)
	default:
		notes = append(notes, "too few readings to judge")
	}
	if j.held > 0 {
		notes = append(notes, fmt.Sprintf("it held the stop back at %d window(s)", j.held))
	}
	return "used (" + strings.Join(notes, "; ") + ")"
}
