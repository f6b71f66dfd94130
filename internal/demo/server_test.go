package demo

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// statusFirstOnConn is the status the test server answers the first request
// on each connection with (2xx, so it counts as OK): it lets a test find
// exactly those requests among the client's samples.
const statusFirstOnConn = http.StatusNonAuthoritativeInfo // 203

// testServer is an HTTP server on 127.0.0.1 that counts what it served. The
// first request on each connection waits firstDelay and answers
// statusFirstOnConn, like a cold service; every request waits delay.
type testServer struct {
	*httptest.Server
	requests atomic.Int64
	conns    atomic.Int64

	mu      sync.Mutex
	host    string
	headers http.Header
}

type connCounter struct{ n atomic.Int64 }

type connKey struct{}

func startTestServer(tb testing.TB, firstDelay, delay time.Duration) *testServer {
	tb.Helper()
	ts := &testServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.requests.Add(1)
		ts.mu.Lock()
		ts.host, ts.headers = r.Host, r.Header.Clone()
		ts.mu.Unlock()
		wait, status := delay, http.StatusOK
		if r.Context().Value(connKey{}).(*connCounter).n.Add(1) == 1 {
			ts.conns.Add(1)
			wait, status = wait+firstDelay, statusFirstOnConn
		}
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-r.Context().Done(): // client gave up
				return
			}
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("ok\n"))
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &connCounter{})
	}
	srv.Listener.Close()
	srv.Listener = listenLoopback(tb)
	srv.Start()
	tb.Cleanup(srv.Close)
	ts.Server = srv
	return ts
}

// listenLoopback listens on 127.0.0.1 only (httptest may fall back to ::1).
func listenLoopback(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on 127.0.0.1: %v", err)
	}
	return l
}

func (ts *testServer) seen() (host string, h http.Header) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.host, ts.headers
}
