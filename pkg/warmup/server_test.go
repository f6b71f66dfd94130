package warmup

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testServer is an HTTP server on 127.0.0.1 whose latency is a function of
// how many load requests it has served: it plays a JVM pod warming up.
type testServer struct {
	*httptest.Server
	healthPath string

	load      atomic.Int64 // load requests (everything but the health path)
	unmarked  atomic.Int64 // requests of any kind without X-Danki-Warmup: 1
	firstOnce atomic.Int64 // load requests that were the first on their connection
	health    atomic.Int64 // health probes

	// delay gives the latency of load request n (1-based); first is true for
	// the first request on its connection.
	delay func(n int64, first bool) time.Duration
	// healthStatus, if set, answers health probe n (1-based).
	healthStatus func(n int64) int

	mu     sync.Mutex
	seen   []seenRequest
	record bool
}

type seenRequest struct {
	method, uri, body string
	header            http.Header
}

type connKey struct{}

func newTestServer(t testing.TB, delay func(n int64, first bool) time.Duration) *testServer {
	t.Helper()
	s := &testServer{healthPath: "/healthz", delay: delay}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	s.Start() // httptest listens on 127.0.0.1 only
	t.Cleanup(s.Close)
	return s
}

func (s *testServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(DefaultMarkerHeader) != "1" {
		s.unmarked.Add(1)
	}
	if r.URL.Path == s.healthPath {
		n := s.health.Add(1)
		if s.healthStatus != nil {
			w.WriteHeader(s.healthStatus(n))
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	first := r.Context().Value(connKey{}).(*atomic.Int64).Add(1) == 1
	if first {
		s.firstOnce.Add(1)
	}
	n := s.load.Add(1)
	if s.record {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, seenRequest{method: r.Method, uri: r.URL.RequestURI(), body: string(body), header: r.Header.Clone()})
		s.mu.Unlock()
	}
	if s.delay != nil {
		time.Sleep(s.delay(n, first))
	}
	_, _ = io.WriteString(w, "ok\n")
}

func (s *testServer) target() Target {
	return Target{Name: "test", URL: s.URL}
}

func (s *testServer) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// fastConfig is a small, quick warm-up config for tests.
func fastConfig() Config {
	return Config{
		HealthPath:    "/healthz",
		HealthTimeout: Duration(5 * time.Second),
		QPS:           1000,
		Connections:   2,
		Timeout:       Duration(5 * time.Second),
		Deadline:      Duration(30 * time.Second),
		Window:        20,
		StableWindows: 3,
		MinRequests:   60,
		MaxRequests:   2000,
		// Generous: the test machine has 2 shared cores, and scheduler
		// hiccups of tens of ms land in window maxima (p99 of 20 = max).
		Tolerance:         0.5,
		AbsoluteTolerance: Duration(3 * time.Millisecond),
		Seed:              1,
	}
}
