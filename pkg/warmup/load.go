package warmup

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"fortio.org/fortio/periodic"
	"fortio.org/fortio/stats"

	"github.com/danki-dev/danki/pkg/load"
)

// fortioPercentiles go into fortio's result JSON; fortioResolution is the
// histogram bucket unit in seconds (100 µs: fortio's default of 1 ms is too
// coarse for warm services).
var fortioPercentiles = []float64{50, 75, 90, 99, 99.9}

const fortioResolution = 0.0001

// failFastStreak is how many requests in a row must fail before a target is
// given up as broken (refused, timing out, 5xx) instead of warmed until the
// deadline: far beyond what maxErrorRatio lets a warming pod have.
const failFastStreak = 20

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
	// pacer, if set, is told every request's latency (the pace ramp).
	pacer *pacer
	// look, if > 0, sends every look requests' latencies to the
	// coordinator as well (the neighbour guard's looks at stable).
	look    int
	lookCur []time.Duration

	total atomic.Int64 // requests so far; read by the coordinator without the lock

	mu      sync.Mutex
	cur     []sample
	windows int // completed windows
	errors  int64
	// failStreak counts requests failed in a row; lastFailCode is the HTTP
	// status of the last failed answer (0: none, or a transport error).
	failStreak   int
	lastFailCode int
	hist         *stats.Histogram
	errHist      *stats.Histogram
	codes        map[int]int64
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
	l := time.Duration(latency * float64(time.Second))
	r.mu.Lock()
	r.cur = append(r.cur, sample{latency: l, ok: ok})
	n := r.total.Add(1)
	r.hist.Record(latency)
	if !ok {
		r.errors++
		r.errHist.Record(latency)
		r.failStreak++
		if code > 0 {
			r.lastFailCode = code
		}
		if r.failStreak == failFastStreak {
			r.events <- event{rec: r, failing: true, total: n, failCode: r.lastFailCode}
		}
	} else {
		r.failStreak = 0
	}
	r.codes[code]++
	if r.pacer != nil {
		r.pacer.observe(l)
	}
	if r.look > 0 {
		r.lookCur = append(r.lookCur, l)
		if len(r.lookCur) >= r.look {
			r.events <- event{rec: r, look: r.lookCur}
			r.lookCur = make([]time.Duration, 0, r.look)
		}
	}
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

// loadRunner is the load on one target: a paced fortio runner
// (pkg/load) whose connections each render the request mix through their
// own requestRewriter, running until stopped.
type loadRunner struct {
	target  Target
	runner  *load.Runner
	lastErr *errorBox
	// renderFails counts requests that failed before being sent: their
	// template did not render (requestRewriter, grpcLoad.call).
	renderFails atomic.Int64
	close       func() // closes a gRPC target's channels; nil for HTTP
}

// newLoadRunner loads t at pace when it is set (the canary targets' ramp),
// else at a fixed qps (the stable probe).
//
// limit, if > 0, is the target's budget of requests (maxRequests): none is
// started past it.
func newLoadRunner(reqCtx context.Context, t Target, qps float64, pace *load.Pace, conns int, limit int64, cfg *session, set *requestSet, seed, stream uint64, rec *recorder) (*loadRunner, error) {
	lr := &loadRunner{target: t, lastErr: &errorBox{}}
	if set.grpc != nil {
		return lr, newGRPCRunner(reqCtx, lr, qps, pace, conns, limit, cfg, set, seed, stream, rec)
	}
	seq := &atomic.Int64{}
	explain := cfg.explainerFor(t.URL)
	var dial func(context.Context, string, string) (net.Conn, error)
	if cfg.checked() {
		dial = cfg.dialContext
	}
	r, err := load.New(load.Options{
		URL:            t.URL + "/",
		QPS:            qps,
		Pace:           pace,
		Connections:    conns,
		Timeout:        cfg.Timeout.D(),
		Headers:        map[string]string{"User-Agent": userAgent},
		Recorder:       rec,
		Label:          "danki warmup " + t.Name,
		Percentiles:    fortioPercentiles,
		Resolution:     fortioResolution,
		RequestContext: reqCtx, // cancelled on a hard stop to cut in-flight requests
		MaxRequests:    limit,
		DialContext:    dial,
		WrapTransport: func(conn int, base http.RoundTripper) http.RoundTripper {
			return bodyCap{&requestRewriter{base: base, gen: set.newGenerator(seed, stream<<20|uint64(conn), seq), lastErr: lr.lastErr, renderFails: &lr.renderFails, explain: explain}}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", t, err)
	}
	lr.runner = r
	return lr, nil
}

// run sends load until stopped and returns fortio's results.
func (lr *loadRunner) run() periodic.RunnerResults {
	if lr.close != nil {
		defer lr.close()
	}
	return lr.runner.Run()
}

// stop sends no new request; requests in flight finish.
func (lr *loadRunner) stop() { lr.runner.Stop() }
