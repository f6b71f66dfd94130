package load

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fortio.org/fortio/periodic"

	"github.com/danki-dev/danki/internal/testutil"
)

// counter is an AccessLogger that counts requests and their outcomes.
type counter struct{ all, ok, firsts atomic.Int64 }

func (c *counter) Start(ctx context.Context, _ periodic.ThreadID, _ int64, _ time.Time) context.Context {
	return ctx
}

func (c *counter) Report(_ context.Context, _ periodic.ThreadID, _ int64, _ time.Time, _ float64, ok bool, details string) {
	c.all.Add(1)
	if ok {
		c.ok.Add(1)
	}
	if details == "203" {
		c.firsts.Add(1)
	}
}

func (c *counter) Info() string { return "test counter" }

func TestRunnerPacesAndRecordsEveryRequest(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	srv.FirstOnConnStatus = http.StatusNonAuthoritativeInfo
	srv.Record = true
	rec := &counter{}
	r, err := New(Options{URL: srv.URL + "/x", QPS: 100, Connections: 2, Headers: map[string]string{"X-Test": "yes"}, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing goes to stdout: it belongs to go-plugin in `danki plugin`.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = pw
	time.AfterFunc(time.Second, r.Stop)
	res := r.Run()
	os.Stdout = stdout
	pw.Close()
	if out, _ := io.ReadAll(pr); len(out) != 0 {
		t.Errorf("the runner wrote %d bytes to stdout: %q", len(out), out)
	}
	served := srv.Load()
	if rec.all.Load() != served || rec.ok.Load() != served || res.DurationHistogram.Count != served {
		t.Errorf("server served %d, recorder saw %d (%d ok), fortio counted %d", served, rec.all.Load(), rec.ok.Load(), res.DurationHistogram.Count)
	}
	// The first request on each connection is recorded too.
	if rec.firsts.Load() != srv.FirstOnConn() || srv.FirstOnConn() < 2 {
		t.Errorf("recorded %d first-on-connection requests, server saw %d", rec.firsts.Load(), srv.FirstOnConn())
	}
	// Paced, not as fast as possible: about 100 in a second.
	if served < 50 || served > 130 {
		t.Errorf("sent %d requests in 1 s at 100 qps", served)
	}
	if last := srv.Last(); last.URI != "/x" || last.Header.Get("X-Test") != "yes" {
		t.Errorf("last request %s with X-Test %q", last.URI, last.Header.Get("X-Test"))
	}
	after := srv.All()
	time.Sleep(100 * time.Millisecond)
	if late := srv.All() - after; late != 0 {
		t.Errorf("%d requests after Run returned", late)
	}
}

func TestRunnerRequestContextCutsRequestsInFlight(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(10*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	rec := &counter{}
	r, err := New(Options{URL: srv.URL, QPS: 10, Connections: 1, Recorder: rec, RequestContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); r.Run() }()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Run still waiting for a 10 s request after its context was cancelled")
	}
	if rec.all.Load() != 1 || rec.ok.Load() != 0 {
		t.Errorf("recorded %d requests (%d ok), want the one cut request as a failure", rec.all.Load(), rec.ok.Load())
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	if _, err := New(Options{URL: "http://127.0.0.1:1/", QPS: 0}); err == nil || !strings.Contains(err.Error(), "QPS must be > 0") {
		t.Errorf("QPS 0: err = %v, want it refused naming QPS", err)
	}
}
