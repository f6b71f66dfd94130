package warmup

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/periodic"
	"fortio.org/fortio/stats"
)

// fortioPercentiles go into fortio's result JSON; fortioResolution is the
// histogram bucket unit in seconds (100 µs: fortio's default of 1 ms is too
// coarse for warm services).
var fortioPercentiles = []float64{50, 75, 90, 99, 99.9}

const fortioResolution = 0.0001

// recorder collects the requests of one target (or of the stable pool) as
// fortio's periodic.AccessLogger: periodic calls Report after every request,
// on the request's goroutine, with the latency it measured for its own
// histogram. danki drives periodic with its own Runnable (fetchRunnable), so
// there is no unrecorded per-connection warm-up call: Report sees every
// request, the coldest first ones included.
type recorder struct {
	window int
	limit  int64 // request cap (MaxRequests); 0 = none
	onCap  func()
	events chan<- event

	total atomic.Int64 // requests so far; read by the coordinator without the lock

	mu      sync.Mutex
	cur     []sample
	windows int // completed windows
	errors  int64
	hist    *stats.Histogram
	errHist *stats.Histogram
	codes   map[int]int64
}

func newRecorder(window int, limit int64, events chan<- event) *recorder {
	return &recorder{
		window:  window,
		limit:   limit,
		events:  events,
		cur:     make([]sample, 0, window),
		hist:    stats.NewHistogram(0, fortioResolution),
		errHist: stats.NewHistogram(0, fortioResolution),
		codes:   map[int]int64{},
	}
}

// Start implements periodic.AccessLogger.
func (r *recorder) Start(ctx context.Context, _ periodic.ThreadID, _ int64, _ time.Time) context.Context {
	return ctx
}

// Report implements periodic.AccessLogger: it records one request and hands
// a completed window to the coordinator. The window is sent while holding the
// lock so windows arrive in order; the coordinator never takes this lock
// while load runs, so it always drains the channel.
func (r *recorder) Report(_ context.Context, _ periodic.ThreadID, _ int64, _ time.Time, latency float64, ok bool, details string) {
	code, _ := strconv.Atoi(details)
	r.mu.Lock()
	r.cur = append(r.cur, sample{latency: time.Duration(latency * float64(time.Second)), ok: ok})
	n := r.total.Add(1)
	r.hist.Record(latency)
	if !ok {
		r.errors++
		r.errHist.Record(latency)
	}
	r.codes[code]++
	if len(r.cur) >= r.window {
		r.windows++
		r.events <- event{rec: r, samples: r.cur, index: r.windows, total: n}
		r.cur = make([]sample, 0, r.window)
	}
	r.mu.Unlock()
	if r.limit > 0 && n == r.limit && r.onCap != nil {
		r.onCap()
	}
}

// Info implements periodic.AccessLogger.
func (r *recorder) Info() string { return "danki warm-up windows" }

// fetchRunnable is periodic's unit of work: one request on one connection's
// fortio client. It reports 2xx and 3xx as success.
type fetchRunnable struct {
	client fhttp.Fetcher
	ctx    context.Context // cancelled on a hard stop to cut in-flight requests
}

func (f *fetchRunnable) Run(context.Context, periodic.ThreadID) (bool, string) {
	code, _, _ := f.client.StreamFetch(f.ctx)
	return code >= 200 && code < 400, strconv.Itoa(code)
}

// loadRunner is fortio's periodic runner for one target: Connections
// goroutines, each with its own fortio std client whose transport is a
// requestRewriter, paced to QPS without catch-up bursts, running until its
// Aborter is aborted.
type loadRunner struct {
	target  Target
	aborter *periodic.Aborter
	runner  periodic.PeriodicRunner
	clients []fhttp.Fetcher
	lastErr *errorBox
}

func newLoadRunner(reqCtx context.Context, t Target, qps float64, conns int, cfg *Config, set *requestSet, seed, stream uint64, rec *recorder) (*loadRunner, error) {
	lr := &loadRunner{target: t, aborter: periodic.NewAborter(), lastErr: &errorBox{}}
	ro := periodic.RunnerOptions{
		RunType:      "HTTP",
		QPS:          qps,
		Duration:     -1, // until aborted
		NumThreads:   conns,
		Percentiles:  fortioPercentiles,
		Resolution:   fortioResolution,
		Out:          io.Discard, // fortio prints to stdout by default; go-plugin owns the plugin's stdout
		Stop:         lr.aborter, // our own Aborter: also keeps periodic from installing a SIGINT handler
		AccessLogger: rec,
		NoCatchUp:    true,
		Uniform:      conns > 1, // stagger connections instead of sending in bursts
		Labels:       "danki warmup " + t.Name,
	}
	lr.runner = periodic.NewPeriodicRunner(&ro)
	seq := &atomic.Int64{}
	for i := range lr.runner.Options().NumThreads {
		rw := &requestRewriter{gen: set.newGenerator(seed, stream<<20|uint64(i), seq), lastErr: lr.lastErr}
		o := fhttp.HTTPOptions{DisableFastClient: true, HTTPReqTimeOut: cfg.Timeout.D()}
		o.Init(t.URL + "/")
		o.ID = i
		o.Transport = func(base http.RoundTripper) http.RoundTripper {
			rw.base = base
			return rw
		}
		if err := o.AddAndValidateExtraHeader("User-Agent: " + userAgent); err != nil {
			lr.close()
			return nil, err
		}
		client, err := fhttp.NewStdClient(&o)
		if err != nil {
			lr.close()
			return nil, fmt.Errorf("create fortio client for %s: %w", t, err)
		}
		lr.clients = append(lr.clients, client)
		lr.runner.Options().Runners[i] = &fetchRunnable{client: client, ctx: reqCtx}
	}
	return lr, nil
}

// run sends load until aborted and returns fortio's results.
func (lr *loadRunner) run() periodic.RunnerResults {
	defer lr.close()
	return lr.runner.Run()
}

func (lr *loadRunner) close() {
	lr.aborter.Abort(false)
	for _, c := range lr.clients {
		c.Close()
	}
}
