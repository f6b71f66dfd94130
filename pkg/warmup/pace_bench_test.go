package warmup

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fortio.org/fortio/periodic"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/load"
)

// spinServer answers after burning CPU for cost(n) (request n, 1-based):
// unlike ColdServer's sleep, a cold pod's work takes CPU from everything
// else on the machine, as a JVM's JIT takes it from the stable pods on
// its node.
func spinServer(tb testing.TB, cost func(n int64) time.Duration) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		d := cost(n.Add(1))
		for start := time.Now(); time.Since(start) < d; {
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	srv.Listener.Close()
	srv.Listener = testutil.ListenLoopback(tb)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// userLatencies records the users' requests to stable by when they started.
type userLatencies struct {
	mu  sync.Mutex
	all []userRequest
}

type userRequest struct {
	at      time.Time
	latency time.Duration
}

func (u *userLatencies) Start(ctx context.Context, _ periodic.ThreadID, _ int64, _ time.Time) context.Context {
	return ctx
}

func (u *userLatencies) Report(_ context.Context, _ periodic.ThreadID, _ int64, at time.Time, latency float64, _ bool, _ string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.all = append(u.all, userRequest{at, time.Duration(latency * float64(time.Second))})
}

func (u *userLatencies) Info() string { return "users" }

// p99 and max of the requests started in [from, to).
func (u *userLatencies) p99(from, to time.Time) (p99, worst time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var ls []time.Duration
	for _, r := range u.all {
		if !r.at.Before(from) && r.at.Before(to) {
			ls = append(ls, r.latency)
		}
	}
	if len(ls) == 0 {
		return 0, 0
	}
	slices.Sort(ls)
	return ls[(len(ls)*99+99)/100-1], ls[len(ls)-1]
}

// BenchmarkUsersDuringWarmup measures what a warm-up costs the users of
// stable when both share the machine's CPU: users send 50 qps to a stable
// server (0.3 ms of CPU per request) while a cold canary (0.3 ms + 20 ms ×
// e^(−n/300) of CPU per request: 2 cores' worth at full pace at first) is
// warmed at 100 qps over 4 connections: at full pace from the start
// without the guard, with the pace ramp alone, and with the pace ramp and
// the neighbour guard (the defaults). It reports the users' p99 in the
// second before the warm-up and during it, their ratio, their max during
// it, and the warm-up's requests and seconds (medians of the runs).
// Figures depend on the machine and what else it runs: compare the
// sub-benchmarks of one run.
func BenchmarkUsersDuringWarmup(b *testing.B) {
	for _, mode := range []struct {
		name     string
		startQPS float64
		guard    bool
	}{{"full-pace", 100, false}, {"ramp", 0, false}, {"ramp+guard", 0, true}} {
		b.Run(mode.name, func(b *testing.B) {
			var ratios, during, before, worst, requests, seconds []float64
			for range b.N {
				stable := spinServer(b, func(int64) time.Duration { return 300 * time.Microsecond })
				canary := spinServer(b, func(n int64) time.Duration {
					return 300*time.Microsecond + time.Duration(20*float64(time.Millisecond)*math.Exp(-float64(n)/300))
				})
				users := &userLatencies{}
				ul, err := load.New(load.Options{URL: stable.URL + "/", QPS: 50, Connections: 4, Recorder: users})
				if err != nil {
					b.Fatal(err)
				}
				go ul.Run()
				time.Sleep(1500 * time.Millisecond)
				start := time.Now()
				cfg := Config{HealthPath: "/healthz", QPS: 100, Connections: 4, StartQPS: mode.startQPS, NeighbourGuard: &mode.guard,
					Window: 50, MinRequests: 600, MaxRequests: 5000, Deadline: config.Duration(60 * time.Second), Seed: 1}
				res, err := Run(context.Background(), cfg, []Target{{Name: "canary", URL: canary.URL}}, Options{Stable: []Target{{Name: "stable", URL: stable.URL}}})
				end := time.Now()
				ul.Stop()
				if err != nil {
					b.Fatalf("warm-up: %v", err)
				}
				p0, _ := users.p99(start.Add(-time.Second), start)
				p1, m1 := users.p99(start, end)
				worst = append(worst, float64(m1)/1e6)
				before = append(before, float64(p0)/1e6)
				during = append(during, float64(p1)/1e6)
				ratios = append(ratios, float64(p1)/float64(max(p0, time.Microsecond)))
				requests = append(requests, float64(res.Requests()))
				seconds = append(seconds, res.Elapsed.Seconds())
				if testing.Verbose() {
					fmt.Printf("%s: users' p99 %.2f ms before, %.2f ms during the warm-up (max %.1f ms); %s\n", mode.name, float64(p0)/1e6, float64(p1)/1e6, float64(m1)/1e6, res.Summary())
				}
			}
			med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			b.ReportMetric(med(before), "user-p99-before-ms")
			b.ReportMetric(med(during), "user-p99-during-ms")
			b.ReportMetric(med(ratios), "user-p99-ratio")
			b.ReportMetric(med(worst), "user-max-during-ms")
			b.ReportMetric(med(requests), "warmup-requests")
			b.ReportMetric(med(seconds), "warmup-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
