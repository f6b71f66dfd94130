package load

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestMaxRequestsIsABudget: with far more connections than MaxRequests,
// exactly MaxRequests requests reach the server, paced or not. The cap
// used to be checked after each request completed, so every connection
// had already sent one (5,000 requests for maxRequests 1).
func TestMaxRequestsIsABudget(t *testing.T) {
	for _, paced := range []bool{false, true} {
		var arrived atomic.Int64
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Add(1)
			// Held until the run ends, so every connection would be busy
			// at once if each sent a request before the cap was seen.
			select {
			case <-release:
			case <-r.Context().Done():
			case <-time.After(200 * time.Millisecond):
			}
		}))
		rec := &counter{}
		o := Options{URL: srv.URL + "/", QPS: 10_000, Connections: 40, MaxRequests: 3, Recorder: rec}
		if paced {
			o.QPS, o.Pace = 0, NewPace(10_000)
		}
		r, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		r.Run() // returns on its own once the budget is spent
		close(release)
		srv.Close()
		if n := arrived.Load(); n != 3 {
			t.Errorf("paced %v: %d requests arrived with MaxRequests 3 and 40 connections", paced, n)
		}
		if n := rec.all.Load(); n != 3 {
			t.Errorf("paced %v: the recorder saw %d requests, want the 3 sent", paced, n)
		}
	}
}
