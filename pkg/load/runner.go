package load

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	flog "fortio.org/log"
	"golang.org/x/net/http2"
)

// MaxResponseHeaderBytes bounds the headers of a response to the load (and
// the warm-up's side requests): a server that sends endless headers makes
// net/http buffer up to 10 MB per connection by default, per target.
const MaxResponseHeaderBytes = 64 << 10

// Options describe paced load on one URL.
type Options struct {
	// URL is where every request goes (a transport from WrapTransport may
	// rewrite it per request).
	URL string
	// QPS is the rate, summed over all connections; must be > 0 unless
	// Pace is set.
	QPS float64
	// Pace, if set, is a rate that may change while the Runner runs; it
	// replaces QPS. fortio's own results (RunnerResults) then count the
	// wait for each turn as part of a call, and one unsent call per
	// connection stopped while waiting: the Recorder gets every request
	// actually sent, with its own latency.
	Pace *Pace
	// Connections each send their share of QPS, one request at a time.
	Connections int
	// Timeout bounds one request; 0 is fortio's default.
	Timeout time.Duration
	// Headers are sent with every request; "Host" sets the Host header.
	Headers map[string]string
	// Recorder is told about every request (on the request's goroutine),
	// with details set to the HTTP status code, or -1 when no reply came.
	Recorder periodic.AccessLogger
	// Label names the run in fortio's results.
	Label string
	// Percentiles and Resolution (seconds) shape fortio's own histogram in
	// the results; zero values take fortio's defaults.
	Percentiles []float64
	Resolution  float64
	// RequestContext, if set, is the context of every request: cancelling
	// it cuts requests in flight, while Stop only stops new ones.
	RequestContext context.Context
	// WrapTransport, if set, wraps connection conn's HTTP transport (the
	// warm-up renders each request of its mix there).
	WrapTransport func(conn int, base http.RoundTripper) http.RoundTripper
	// Call, if set, replaces the HTTP request: connection conn sends each
	// request by calling the function it returns (the warm-up's gRPC
	// calls), which reports success and the details for the Recorder (the
	// status code). URL, Headers and WrapTransport are then unused; pacing,
	// recording and Stop are the same as for HTTP.
	Call func(conn int) func(ctx context.Context) (ok bool, details string)
	// MaxRequests, if > 0, is a budget of requests: each connection takes
	// one from it before it starts a request, and once none is left the
	// Runner stops. No request is started past it, however many
	// connections there are (a cap checked when requests complete lets
	// every connection start one more).
	MaxRequests int64
	// DialContext, if set, opens every connection of the HTTP load
	// (instead of fortio's own dialer, and with no proxy): the operator's
	// policy checks the address actually connected to there.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Runner sends the load of one Options until Stop.
type Runner struct {
	aborter  *periodic.Aborter
	runner   periodic.PeriodicRunner
	clients  []*fhttp.Client
	stop     chan struct{} // closed by Stop: ends paced connections' waits
	stopOnce sync.Once
	budget   *atomic.Int64 // requests left to start (Options.MaxRequests); nil: no budget
}

// New prepares a Runner; nothing is sent before Run.
func New(o Options) (*Runner, error) {
	if o.Pace != nil {
		if q := o.Pace.QPS(); !(q > 0) {
			return nil, fmt.Errorf("load: Pace must be > 0 requests per second (got %g)", q)
		}
	} else if !(o.QPS > 0) {
		return nil, fmt.Errorf("load: QPS must be > 0 (got %g); fortio would treat 0 as its default rate and < 0 as unpaced", o.QPS)
	}
	quietFortio()
	r := &Runner{aborter: periodic.NewAborter(), stop: make(chan struct{})}
	if o.MaxRequests > 0 {
		r.budget = &atomic.Int64{}
		r.budget.Store(o.MaxRequests)
	}
	ro := periodic.RunnerOptions{
		RunType:      "HTTP",
		QPS:          o.QPS,
		Duration:     -1, // until stopped
		NumThreads:   max(o.Connections, 1),
		Percentiles:  o.Percentiles,
		Resolution:   o.Resolution,
		Out:          io.Discard, // fortio prints its report to stdout by default
		Stop:         r.aborter,  // our own Aborter also keeps periodic from catching SIGINT
		AccessLogger: o.Recorder,
		NoCatchUp:    true,
		Uniform:      o.Connections > 1, // stagger connections instead of sending in bursts
		Labels:       o.Label,
	}
	if o.Pace != nil {
		// periodic unpaced: every connection waits for its turn in fetch.
		ro.QPS, ro.Uniform = -1, false
	}
	if o.Pace != nil || r.budget != nil {
		// Drops the calls that sent nothing (stopped while waiting for a
		// turn, or no budget left), which periodic counts all the same.
		ro.AccessLogger = pacedRecorder{inner: o.Recorder, paced: o.Pace != nil}
	}
	if o.Call != nil {
		ro.RunType = "gRPC"
	}
	r.runner = periodic.NewPeriodicRunner(&ro)
	for i := range r.runner.Options().NumThreads {
		if o.Call != nil {
			r.runner.Options().Runners[i] = &fetch{call: o.Call(i), ctx: o.RequestContext, pace: o.Pace, stop: r.stop, budget: r.budget, spent: r.Stop}
			continue
		}
		client, err := newClient(o, i)
		if err != nil {
			r.close()
			return nil, err
		}
		r.clients = append(r.clients, client)
		r.runner.Options().Runners[i] = &fetch{client: client, ctx: o.RequestContext, pace: o.Pace, stop: r.stop, budget: r.budget, spent: r.Stop}
	}
	return r, nil
}

func newClient(o Options, conn int) (*fhttp.Client, error) {
	ho := fhttp.HTTPOptions{DisableFastClient: true, HTTPReqTimeOut: o.Timeout}
	ho.Init(o.URL)
	ho.ID = conn
	if o.DialContext != nil && !strings.HasPrefix(o.URL, "http://") {
		return nil, fmt.Errorf("load %s: a checked dialer (DialContext) needs a plain http:// URL", o.URL)
	}
	ho.Transport = func(base http.RoundTripper) http.RoundTripper {
		switch tr := base.(type) {
		case *http.Transport:
			tr.MaxResponseHeaderBytes = MaxResponseHeaderBytes // HTTP/2 over it too (MaxHeaderListSize)
		//lint:ignore SA1019 fortio's h2 client is x/net's http2.Transport: its own cap is the one it reads
		case *http2.Transport:
			//lint:ignore SA1019 as above
			tr.MaxHeaderListSize = MaxResponseHeaderBytes
		}
		if o.DialContext != nil {
			tr, ok := base.(*http.Transport)
			if !ok {
				// Fail closed: never send through a dialer that was not checked.
				return refuse{fmt.Errorf("load %s: fortio's transport is a %T, not an *http.Transport: its dialer cannot be checked", o.URL, base)}
			}
			// A proxy would be the address dialled (and checked) instead of
			// the target's.
			tr.DialContext, tr.Proxy = o.DialContext, nil
		}
		if o.WrapTransport != nil {
			return o.WrapTransport(conn, base)
		}
		return base
	}
	// Sorted, so every connection sends the headers in the same order.
	for _, name := range slices.Sorted(maps.Keys(o.Headers)) {
		if err := ho.AddAndValidateExtraHeader(name + ": " + o.Headers[name]); err != nil {
			return nil, fmt.Errorf("header %q: %w", name, err)
		}
	}
	client, err := fhttp.NewStdClient(&ho)
	if err != nil {
		return nil, fmt.Errorf("create fortio client for %s: %w", o.URL, err)
	}
	return client, nil
}

// Run sends load until Stop and returns fortio's results once the last
// request in flight has finished.
func (r *Runner) Run() periodic.RunnerResults {
	defer r.close()
	return r.runner.Run()
}

// Stop sends no new request; requests in flight finish (and are recorded).
// It may be called more than once, and before Run.
func (r *Runner) Stop() {
	r.stopOnce.Do(func() { close(r.stop) })
	r.aborter.Abort(false)
}

func (r *Runner) close() {
	r.Stop()
	for _, c := range r.clients {
		c.Close()
	}
}

// Succeeded reports whether an HTTP status code counts as a success: 2xx
// and 3xx.
func Succeeded(code int) bool { return code >= 200 && code < 400 }

// fetch is periodic's unit of work: one request on one connection's fortio
// client. Its details are the status code for the Recorder.
type fetch struct {
	client *fhttp.Client
	call   func(context.Context) (bool, string) // replaces client (Options.Call)
	ctx    context.Context                      // nil: periodic's
	pace   *Pace                                // nil: periodic paces
	stop   <-chan struct{}
	budget *atomic.Int64 // shared by the Runner's connections; nil: none
	spent  func()        // stops the Runner once the budget is spent
}

func (f *fetch) Run(ctx context.Context, _ periodic.ThreadID) (bool, string) {
	m, _ := ctx.Value(measuredKey{}).(*measured)
	if m == nil {
		m = &measured{}
	}
	if f.pace != nil && !f.pace.wait(f.stop) {
		m.unsent = true
		return false, "-1"
	}
	// The budget is taken right before the request starts (after the wait
	// for a turn, which may end in a stop): a request that is started has
	// its token, and none starts without one.
	if f.budget != nil && f.budget.Add(-1) < 0 {
		m.unsent = true
		f.spent()
		return false, "-1"
	}
	if f.pace != nil {
		m.start = time.Now()
	}
	if f.ctx != nil {
		ctx = f.ctx
	}
	if f.call != nil {
		ok, details := f.call(ctx)
		if f.pace != nil {
			m.latency = time.Since(m.start)
		}
		return ok, details
	}
	code, _, _ := f.client.StreamFetch(ctx)
	if f.pace != nil {
		m.latency = time.Since(m.start)
	}
	return Succeeded(code), strconv.Itoa(code)
}

// refuse is a RoundTripper that sends nothing.
type refuse struct{ err error }

func (r refuse) RoundTrip(*http.Request) (*http.Response, error) { return nil, r.err }

var quietFortioOnce sync.Once

// quietFortio keeps fortio's own logging (a line per failed request, one per
// connection at the end) to real trouble: callers record every request,
// failures included, and `danki plugin` stderr goes to the controller log.
// fortio's log level is process-wide.
func quietFortio() {
	quietFortioOnce.Do(func() { flog.SetLogLevelQuiet(flog.Critical) })
}
