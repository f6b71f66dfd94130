package traffic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sync"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	"golang.org/x/net/http/httpguts"

	"github.com/danki-dev/danki/pkg/load"
)

// Defaults for TrafficConfig fields left zero.
const (
	// DefaultConnections spreads the load over enough connections that one
	// cold request does not stall the whole stream (each connection waits
	// for its reply before its next request).
	DefaultConnections = 8
	// DefaultTimeout is fortio's default request timeout.
	DefaultTimeout = fhttp.HTTPReqTimeOutDefaultValue
)

// TrafficConfig describes steady user traffic.
type TrafficConfig struct {
	// URL is the absolute http:// or https:// URL every request goes to.
	URL string
	// QPS is the request rate, summed over all connections. Must be > 0.
	QPS float64
	// Connections is the number of connections, each sending its share of
	// QPS one request at a time. Default DefaultConnections.
	Connections int
	// Timeout bounds one request. Default DefaultTimeout.
	Timeout time.Duration
	// Headers are extra request headers; "Host" sets the Host header (to
	// route through a gateway by host name).
	Headers map[string]string
}

// Sample is one request as the client saw it.
type Sample struct {
	// Start is when the request was sent.
	Start time.Time `json:"start"`
	// Latency is the time until the whole reply was read (or the request
	// failed).
	Latency time.Duration `json:"latency"`
	// Code is the HTTP status code, or -1 when no reply came (connection
	// refused or reset, timeout).
	Code int `json:"code"`
}

// OK reports whether the request succeeded: a 2xx or 3xx reply.
func (s Sample) OK() bool { return load.Succeeded(s.Code) }

// Result is what a traffic run measured.
type Result struct {
	URL         string `json:"url"`
	Connections int    `json:"connections"`
	// Start is when the run started; Duration how long it ran, until the
	// last in-flight request after the stop had finished.
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	// AskedQPS is TrafficConfig.QPS; AchievedQPS is Requests / Duration.
	// Achieved falls below asked when replies are slower than a connection's
	// share of the pacing interval: fortio skips the missed slots instead of
	// bursting to catch up.
	AskedQPS    float64 `json:"askedQPS"`
	AchievedQPS float64 `json:"achievedQPS"`
	Requests    int     `json:"requests"`
	// Errors counts requests that were not OK (see Sample.OK).
	Errors int `json:"errors"`
	// Samples holds every request, ordered by start time. Left out of JSON:
	// a minute at 2,000 qps is 120,000 samples; results files carry the
	// summaries (Scenario).
	Samples []Sample `json:"-"`
}

// Traffic is a running traffic generator. Stop it with Stop or by ending
// the context given to StartTraffic.
type Traffic struct {
	cfg    TrafficConfig
	rec    *recorder
	runner *load.Runner
	done   chan struct{}

	fortio periodic.RunnerResults // written before done is closed

	once   sync.Once
	result Result
}

// StartTraffic validates cfg and starts sending traffic in the background
// until ctx ends or Stop is called.
func StartTraffic(ctx context.Context, cfg TrafficConfig) (*Traffic, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start traffic to %s: %w", cfg.URL, err)
	}
	t := &Traffic{cfg: cfg, done: make(chan struct{})}
	t.rec = newRecorder(time.Now())
	t.runner, err = load.New(load.Options{
		URL:         cfg.URL,
		QPS:         cfg.QPS,
		Connections: cfg.Connections,
		Timeout:     cfg.Timeout,
		Headers:     cfg.Headers,
		Recorder:    t.rec,
		Label:       "danki demo traffic",
	})
	if err != nil {
		return nil, fmt.Errorf("start traffic to %s: %w", cfg.URL, err)
	}
	go func() {
		defer close(t.done)
		t.fortio = t.runner.Run()
	}()
	go func() {
		select {
		case <-ctx.Done():
			t.runner.Stop()
		case <-t.done:
		}
	}()
	return t, nil
}

// Count returns how many requests completed so far (for progress output).
func (t *Traffic) Count() int { return int(t.rec.count.Load()) }

// Errors returns how many requests so far were not OK.
func (t *Traffic) Errors() int { return int(t.rec.errors.Load()) }

// Done is closed once the traffic has stopped (Stop, or ctx ended) and the
// last in-flight request has finished.
func (t *Traffic) Done() <-chan struct{} { return t.done }

// Stop stops sending, waits for in-flight requests (at most the request
// timeout) and returns the result. Requests in flight are not cut short: they
// are user requests like any other and are recorded. Stop may be called more
// than once, also after ctx ended; every call returns the same Result.
func (t *Traffic) Stop() Result {
	t.runner.Stop()
	<-t.done
	t.once.Do(func() {
		samples := t.rec.samples()
		r := Result{
			URL:         t.cfg.URL,
			Connections: t.cfg.Connections,
			Start:       t.fortio.StartTime, // Duration counts from here
			Duration:    t.fortio.ActualDuration,
			AskedQPS:    t.cfg.QPS,
			Requests:    len(samples),
			Errors:      int(t.rec.errors.Load()),
			Samples:     samples,
		}
		if r.Start.IsZero() {
			r.Start = t.rec.origin
		}
		if s := r.Duration.Seconds(); s > 0 {
			r.AchievedQPS = float64(r.Requests) / s
		}
		t.result = r
	})
	return t.result
}

// withDefaults fills zero fields and rejects bad ones, naming the field.
func (c TrafficConfig) withDefaults() (TrafficConfig, error) {
	var errs []error
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		errs = append(errs, errors.New("TrafficConfig.URL is empty: set the URL to send traffic to, e.g. http://127.0.0.1:18080/"))
	case err != nil:
		errs = append(errs, fmt.Errorf("TrafficConfig.URL %q: %w", c.URL, err))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("TrafficConfig.URL %q must be an absolute http:// or https:// URL, e.g. http://127.0.0.1:18080/", c.URL))
	}
	if !(c.QPS > 0) { // also catches NaN
		errs = append(errs, fmt.Errorf("TrafficConfig.QPS must be > 0 (got %g); fortio would treat 0 as its default rate and < 0 as unpaced", c.QPS))
	}
	switch {
	case c.Connections < 0:
		errs = append(errs, fmt.Errorf("TrafficConfig.Connections must not be negative (got %d); 0 means %d", c.Connections, DefaultConnections))
	case c.Connections == 0:
		c.Connections = DefaultConnections
	}
	switch {
	case c.Timeout < 0:
		errs = append(errs, fmt.Errorf("TrafficConfig.Timeout must not be negative (got %s); 0 means %s", c.Timeout, DefaultTimeout))
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		if !httpguts.ValidHeaderFieldName(name) {
			errs = append(errs, fmt.Errorf("TrafficConfig.Headers: %q is not a valid HTTP header name", name))
		} else if !httpguts.ValidHeaderFieldValue(c.Headers[name]) {
			errs = append(errs, fmt.Errorf("TrafficConfig.Headers[%q]: the value contains characters not allowed in a header (control characters or newlines)", name))
		}
	}
	return c, errors.Join(errs...)
}
