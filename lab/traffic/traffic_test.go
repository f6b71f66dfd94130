package traffic

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

func TestTrafficRecordsEveryRequest(t *testing.T) {
	const slow = 50 * time.Millisecond
	srv := startTestServer(t, slow, 0)
	cfg := TrafficConfig{
		URL:         srv.URL + "/api/users",
		QPS:         100,
		Connections: 4,
		Timeout:     5 * time.Second,
		Headers:     map[string]string{"Host": "app.demo.test", "X-Demo": "yes"},
	}
	tr, err := StartTraffic(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	res := tr.Stop()

	served := int(srv.All())
	if served == 0 {
		t.Fatal("the server saw no request")
	}
	if res.Requests != served || len(res.Samples) != served {
		t.Errorf("server served %d requests, result has Requests=%d and %d samples: every request must be recorded",
			served, res.Requests, len(res.Samples))
	}
	if got := int(tr.fortio.DurationHistogram.Count); got != len(res.Samples) {
		t.Errorf("fortio counted %d requests, recorder %d", got, len(res.Samples))
	}
	if tr.Count() != res.Requests {
		t.Errorf("Count() = %d after Stop, Result.Requests = %d", tr.Count(), res.Requests)
	}
	if res.Errors != 0 {
		t.Errorf("Errors = %d, want 0", res.Errors)
	}

	// The first request on each connection (status 203, delayed by the
	// server) must be among the samples, with its slow latency.
	conns := int(srv.FirstOnConn())
	if conns < cfg.Connections {
		t.Errorf("server saw %d connections, want at least %d", conns, cfg.Connections)
	}
	firsts := 0
	for _, s := range res.Samples {
		if s.Code == statusFirstOnConn {
			firsts++
			if s.Latency < slow {
				t.Errorf("first request on a connection took %s, the server delayed it %s", s.Latency, slow)
			}
		} else if s.Code != 200 {
			t.Errorf("sample with code %d, want 200 or %d", s.Code, statusFirstOnConn)
		}
	}
	if firsts != conns {
		t.Errorf("%d samples of first requests on a connection, server opened %d connections", firsts, conns)
	}

	if !slices.IsSortedFunc(res.Samples, func(a, b Sample) int { return a.Start.Compare(b.Start) }) {
		t.Error("samples are not ordered by start time")
	}
	end := res.Start.Add(res.Duration)
	for _, s := range res.Samples {
		if s.Start.Before(res.Start) || s.Start.After(end) {
			t.Fatalf("sample start %s outside the run [%s, %s]", s.Start, res.Start, end)
		}
	}

	// A sane band only: timing on a shared 2-core machine varies; the
	// benchmark measures the ratio.
	if res.AskedQPS != cfg.QPS {
		t.Errorf("AskedQPS = %g, want %g", res.AskedQPS, cfg.QPS)
	}
	if r := res.AchievedQPS / res.AskedQPS; r < 0.5 || r > 1.2 {
		t.Errorf("achieved %.1f qps for %.0f asked (ratio %.2f), want within 0.5–1.2", res.AchievedQPS, res.AskedQPS, r)
	}

	last := srv.Last()
	host, h := last.Host, last.Header
	if host != "app.demo.test" || h.Get("X-Demo") != "yes" {
		t.Errorf("server saw Host %q and X-Demo %q, want app.demo.test and yes", host, h.Get("X-Demo"))
	}

	// Stop is idempotent.
	if again := tr.Stop(); again.Requests != res.Requests || len(again.Samples) != len(res.Samples) {
		t.Errorf("second Stop returned %d requests, first %d", again.Requests, res.Requests)
	}
}

// Stop must wait for requests in flight and record them, not cut them off.
func TestTrafficStopWaitsForInFlightRequests(t *testing.T) {
	const delay = 300 * time.Millisecond
	srv := startTestServer(t, 0, delay)
	tr, err := StartTraffic(t.Context(), TrafficConfig{URL: srv.URL, QPS: 20, Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Stop as soon as the server has a request: it is still in flight.
	for deadline := time.Now().Add(5 * time.Second); srv.All() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no request reached the server within 5 s")
		}
	}
	res := tr.Stop()
	if served := int(srv.All()); served == 0 || len(res.Samples) != served {
		t.Fatalf("server got %d requests, %d samples recorded", served, len(res.Samples))
	}
	for _, s := range res.Samples {
		if !s.OK() || s.Latency < delay {
			t.Errorf("sample %+v: want an OK reply that took at least %s", s, delay)
		}
	}
}

func TestTrafficRecordsConnectionErrors(t *testing.T) {
	l := testutil.ListenLoopback(t)
	url := "http://" + l.Addr().String() + "/"
	l.Close() // nothing listens there any more: connection refused
	tr, err := StartTraffic(t.Context(), TrafficConfig{URL: url, QPS: 50, Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	res := tr.Stop()
	if res.Requests == 0 {
		t.Fatal("no request recorded")
	}
	if res.Errors != res.Requests || tr.Errors() != res.Requests {
		t.Errorf("Errors = %d (Errors() %d) of %d requests, want all", res.Errors, tr.Errors(), res.Requests)
	}
	for _, s := range res.Samples {
		if s.Code != -1 {
			t.Fatalf("sample code %d, want -1 for a refused connection", s.Code)
		}
	}
}

func TestTrafficTimeoutIsAnError(t *testing.T) {
	srv := startTestServer(t, 0, 2*time.Second)
	const timeout = 100 * time.Millisecond
	tr, err := StartTraffic(t.Context(), TrafficConfig{URL: srv.URL, QPS: 10, Connections: 1, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	res := tr.Stop()
	if res.Requests == 0 || res.Errors != res.Requests {
		t.Fatalf("%d errors of %d requests, want every request timed out", res.Errors, res.Requests)
	}
	for _, s := range res.Samples {
		if s.Code != -1 || s.Latency < timeout || s.Latency > time.Second {
			t.Errorf("sample %+v: want code -1 after about %s", s, timeout)
		}
	}
}

func TestTrafficStopsWhenContextEnds(t *testing.T) {
	srv := startTestServer(t, 0, 0)
	ctx, cancel := context.WithCancel(t.Context())
	tr, err := StartTraffic(ctx, TrafficConfig{URL: srv.URL, QPS: 50, Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("traffic still running 10 s after its context ended")
	}
	n := tr.Count()
	time.Sleep(100 * time.Millisecond)
	res := tr.Stop()
	if n == 0 || res.Requests != n || tr.Count() != n {
		t.Errorf("Count() %d when Done, %d after, Result.Requests %d: want equal and > 0", n, tr.Count(), res.Requests)
	}
	if served := int(srv.All()); served != n {
		t.Errorf("server served %d, recorded %d", served, n)
	}
}

func TestStartTrafficRejectsBadConfig(t *testing.T) {
	good := TrafficConfig{URL: "http://127.0.0.1:1/", QPS: 10}
	for _, tc := range []struct {
		name string
		edit func(*TrafficConfig)
		want string
	}{
		{"empty URL", func(c *TrafficConfig) { c.URL = "" }, "TrafficConfig.URL is empty"},
		{"relative URL", func(c *TrafficConfig) { c.URL = "/api" }, "TrafficConfig.URL \"/api\" must be an absolute http"},
		{"other scheme", func(c *TrafficConfig) { c.URL = "ftp://127.0.0.1/" }, "must be an absolute http:// or https:// URL"},
		{"unparsable URL", func(c *TrafficConfig) { c.URL = "http://[::1" }, "TrafficConfig.URL"},
		{"zero QPS", func(c *TrafficConfig) { c.QPS = 0 }, "TrafficConfig.QPS must be > 0 (got 0)"},
		{"negative QPS", func(c *TrafficConfig) { c.QPS = -5 }, "TrafficConfig.QPS must be > 0 (got -5)"},
		{"NaN QPS", func(c *TrafficConfig) { c.QPS = math.NaN() }, "TrafficConfig.QPS must be > 0"},
		{"negative connections", func(c *TrafficConfig) { c.Connections = -1 }, "TrafficConfig.Connections must not be negative"},
		{"negative timeout", func(c *TrafficConfig) { c.Timeout = -time.Second }, "TrafficConfig.Timeout must not be negative"},
		{"bad header name", func(c *TrafficConfig) { c.Headers = map[string]string{"Bad Name": "x"} }, `"Bad Name" is not a valid HTTP header name`},
		{"bad header value", func(c *TrafficConfig) { c.Headers = map[string]string{"X-A": "a\r\nX-B: b"} }, `TrafficConfig.Headers["X-A"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			tr, err := StartTraffic(t.Context(), cfg)
			if err == nil {
				tr.Stop()
				t.Fatalf("StartTraffic accepted %+v", cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if tr, err := StartTraffic(ctx, good); err == nil {
		tr.Stop()
		t.Error("StartTraffic started with a context that had already ended")
	}
}

func TestTrafficDefaults(t *testing.T) {
	cfg, err := TrafficConfig{URL: "https://example.test/", QPS: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Connections != DefaultConnections || cfg.Timeout != DefaultTimeout {
		t.Errorf("defaults: %d connections, timeout %s; want %d and %s", cfg.Connections, cfg.Timeout, DefaultConnections, DefaultTimeout)
	}
}

// Stop right after StartTraffic, possibly before fortio's run began, must
// neither hang nor lose what was sent.
func TestTrafficImmediateStop(t *testing.T) {
	srv := startTestServer(t, 0, 0)
	tr, err := StartTraffic(t.Context(), TrafficConfig{URL: srv.URL, QPS: 100})
	if err != nil {
		t.Fatal(err)
	}
	res := tr.Stop()
	if served := int(srv.All()); res.Requests != served || len(res.Samples) != served {
		t.Errorf("server served %d, result has %d requests and %d samples", served, res.Requests, len(res.Samples))
	}
	if res.Start.IsZero() {
		t.Error("Result.Start is zero")
	}
}
