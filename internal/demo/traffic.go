package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	flog "fortio.org/log"
	"golang.org/x/net/http/httpguts"
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
func (s Sample) OK() bool { return s.Code >= 200 && s.Code < 400 }

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
	cfg     TrafficConfig
	rec     *recorder
	aborter *periodic.Aborter
	clients []*fhttp.Client
	done    chan struct{}

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
	quietFortio()
	t := &Traffic{cfg: cfg, aborter: periodic.NewAborter(), done: make(chan struct{})}
	origin := time.Now()
	t.rec = newRecorder(origin)
	ro := periodic.RunnerOptions{
		RunType:      "HTTP",
		QPS:          cfg.QPS,
		Duration:     -1, // until aborted
		NumThreads:   cfg.Connections,
		Out:          io.Discard, // fortio prints its summary to stdout by default
		Stop:         t.aborter,  // our own Aborter also keeps periodic from catching SIGINT
		AccessLogger: t.rec,
		NoCatchUp:    true,
		Uniform:      cfg.Connections > 1, // stagger connections instead of sending in bursts
		Labels:       "danki demo traffic",
	}
	runner := periodic.NewPeriodicRunner(&ro)
	for i := range runner.Options().NumThreads {
		client, err := newClient(cfg, i)
		if err != nil {
			t.closeClients()
			t.aborter.Abort(false)
			return nil, err
		}
		t.clients = append(t.clients, client)
		runner.Options().Runners[i] = fetch{client}
	}
	go func() {
		defer close(t.done)
		t.fortio = runner.Run()
		t.closeClients()
	}()
	go func() {
		select {
		case <-ctx.Done():
			t.aborter.Abort(false)
		case <-t.done:
		}
	}()
	return t, nil
}

var quietFortioOnce sync.Once

// quietFortio keeps fortio's own logging (one line per failed request, one
// per connection at the end) to real trouble: every request is a Sample, its
// failure included. Process-wide, as pkg/warmup does.
func quietFortio() {
	quietFortioOnce.Do(func() { flog.SetLogLevelQuiet(flog.Critical) })
}

func newClient(cfg TrafficConfig, id int) (*fhttp.Client, error) {
	o := fhttp.HTTPOptions{DisableFastClient: true, HTTPReqTimeOut: cfg.Timeout}
	o.Init(cfg.URL)
	o.ID = id
	// Sorted, so every connection sends the headers in the same order.
	for _, name := range slices.Sorted(maps.Keys(cfg.Headers)) {
		if err := o.AddAndValidateExtraHeader(name + ": " + cfg.Headers[name]); err != nil {
			return nil, fmt.Errorf("TrafficConfig.Headers[%q]: %w", name, err)
		}
	}
	client, err := fhttp.NewStdClient(&o)
	if err != nil {
		return nil, fmt.Errorf("create fortio client for %s: %w", cfg.URL, err)
	}
	return client, nil
}

func (t *Traffic) closeClients() {
	for _, c := range t.clients {
		c.Close()
	}
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
	t.aborter.Abort(false)
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

// fetch is periodic's unit of work: one request on one connection's fortio
// client. It reports the status code as details for the recorder.
type fetch struct{ client *fhttp.Client }

func (f fetch) Run(ctx context.Context, _ periodic.ThreadID) (bool, string) {
	code, _, _ := f.client.StreamFetch(ctx)
	return Sample{Code: code}.OK(), strconv.Itoa(code)
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
