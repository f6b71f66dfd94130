package testutil

import (
	"cmp"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ColdServer is an HTTP server on 127.0.0.1 whose latency depends on how
// many load requests it has served, like a JVM pod warming up. It counts
// what it served: load requests, health probes (HealthPath), first requests
// on a connection, and requests without the warm-up marker header. Set its
// fields before the first request.
type ColdServer struct {
	*httptest.Server

	// Delay gives the latency of load request n (1-based); firstOnConn is
	// true for the first request on its connection. Nil answers at once.
	Delay func(n int64, firstOnConn bool) time.Duration
	// HealthPath, if set, is the health path: its requests are probes, not
	// load. HealthStatus, if set, answers probe n (1-based); else 200.
	HealthPath   string
	HealthStatus func(n int64) int
	// FirstOnConnStatus, if set, answers the first request on each
	// connection, so a client's results can pick those requests out.
	FirstOnConnStatus int
	// MarkerHeader is the header every warm-up request must carry with
	// value "1"; requests without it are counted by Unmarked.
	MarkerHeader string
	// Record keeps every load request for Requests.
	Record bool
	// MetricsPath is a JVM's metrics page, read by the warm-up for its JIT
	// signal without the marker header (default /actuator/prometheus,
	// Spring Boot's, the warm-up's default). MetricsPage, if set, answers
	// it with 200 and its text; else it answers 404, as a pod without an
	// actuator. Its requests are counted by Scrapes only: neither load nor
	// unmarked warm-up requests.
	MetricsPath string
	MetricsPage func() string

	load, health, all, firstOnConn, unmarked, scrapes atomic.Int64

	mu   sync.Mutex
	seen []Request
	last Request
}

// Request is a request as the server saw it.
type Request struct {
	Method, URI, Host, Body string
	Header                  http.Header
}

type connCounterKey struct{}

// NewColdServer starts a ColdServer that answers with delay and closes it
// when the test ends. Its marker header is X-Danki-Warmup.
func NewColdServer(tb testing.TB, delay func(n int64, firstOnConn bool) time.Duration) *ColdServer {
	tb.Helper()
	s := &ColdServer{Delay: delay, MarkerHeader: "X-Danki-Warmup"}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCounterKey{}, new(atomic.Int64))
	}
	s.Listener.Close()
	s.Listener = ListenLoopback(tb)
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

// ListenLoopback listens on a free port of 127.0.0.1 (httptest may fall
// back to ::1).
func ListenLoopback(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on 127.0.0.1: %v", err)
	}
	return l
}

// ActuatorJITPath is where the warm-up looks for the JIT signal when the
// default Prometheus page has none (the Spring Boot actuator's JSON):
// test servers answer it apart from the load, as they do the page.
const ActuatorJITPath = "/actuator/metrics/jvm.compilation.time"

// IsJITPage says whether path is one the warm-up reads the JIT signal
// from by default (no warm-up request).
func IsJITPage(path string) bool { return path == "/actuator/prometheus" || path == ActuatorJITPath }

func (s *ColdServer) serve(w http.ResponseWriter, r *http.Request) {
	if s.MetricsPath == "" && r.URL.Path == ActuatorJITPath {
		http.NotFound(w, r) // no actuator JSON: the page alone
		return
	}
	if path := cmp.Or(s.MetricsPath, "/actuator/prometheus"); r.URL.Path == path {
		s.scrapes.Add(1)
		if s.MetricsPage == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, s.MetricsPage())
		return
	}
	s.all.Add(1)
	if s.MarkerHeader != "" && r.Header.Get(s.MarkerHeader) != "1" {
		s.unmarked.Add(1)
	}
	if s.HealthPath != "" && r.URL.Path == s.HealthPath {
		status := http.StatusOK
		if n := s.health.Add(1); s.HealthStatus != nil {
			status = s.HealthStatus(n)
		}
		w.WriteHeader(status)
		return
	}
	first := r.Context().Value(connCounterKey{}).(*atomic.Int64).Add(1) == 1
	if first {
		s.firstOnConn.Add(1)
	}
	n := s.load.Add(1)
	body, _ := io.ReadAll(r.Body)
	seen := Request{Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Body: string(body), Header: r.Header.Clone()}
	s.mu.Lock()
	s.last = seen
	if s.Record {
		s.seen = append(s.seen, seen)
	}
	s.mu.Unlock()
	if s.Delay != nil {
		select {
		case <-time.After(s.Delay(n, first)):
		case <-r.Context().Done(): // the client gave up
			return
		}
	}
	if first && s.FirstOnConnStatus != 0 {
		w.WriteHeader(s.FirstOnConnStatus)
	}
	_, _ = io.WriteString(w, "ok\n")
}

// Scrapes counts the requests for MetricsPath.
func (s *ColdServer) Scrapes() int64 { return s.scrapes.Load() }

// Load counts load requests: everything but health probes.
func (s *ColdServer) Load() int64 { return s.load.Load() }

// Health counts health probes.
func (s *ColdServer) Health() int64 { return s.health.Load() }

// All counts every request, probes included.
func (s *ColdServer) All() int64 { return s.all.Load() }

// FirstOnConn counts load requests that were the first on their connection.
func (s *ColdServer) FirstOnConn() int64 { return s.firstOnConn.Load() }

// Unmarked counts requests of any kind without the marker header.
func (s *ColdServer) Unmarked() int64 { return s.unmarked.Load() }

// Requests returns the load requests kept with Record.
func (s *ColdServer) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Last returns the latest load request.
func (s *ColdServer) Last() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Decaying is a JVM-like warm-up curve: request n takes base + extra·e^(−n/tau).
func Decaying(base, extra time.Duration, tau float64) func(int64, bool) time.Duration {
	return func(n int64, _ bool) time.Duration {
		return base + time.Duration(float64(extra)*math.Exp(-float64(n)/tau))
	}
}

// Flat answers every request after d.
func Flat(d time.Duration) func(int64, bool) time.Duration {
	return func(int64, bool) time.Duration { return d }
}

// NeverSettling answers in 2 ms, except that every other window of 20
// requests (counted on the server: use one connection) has one 150 ms
// request, so the p99 of consecutive windows alternates and never settles.
func NeverSettling(n int64, _ bool) time.Duration {
	if ((n-1)/20)%2 == 0 && n%20 == 10 {
		return 150 * time.Millisecond
	}
	return 2 * time.Millisecond
}
