package load

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Options.Call replaces the HTTP request: each connection calls its own
// function, paced, and the Recorder gets its outcome and details.
func TestCallReplacesHTTPRequest(t *testing.T) {
	var calls [2]atomic.Int64
	rec := &counter{}
	reqCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type key struct{}
	r, err := New(Options{
		Pace:           NewPace(200),
		Connections:    2,
		Recorder:       rec,
		RequestContext: context.WithValue(reqCtx, key{}, "request context"),
		Call: func(conn int) func(context.Context) (bool, string) {
			return func(ctx context.Context) (bool, string) {
				if ctx.Value(key{}) != "request context" {
					t.Error("Call did not get the RequestContext")
				}
				n := calls[conn].Add(1)
				time.Sleep(time.Millisecond)
				if n%4 == 0 {
					return false, "14" // e.g. a gRPC status code
				}
				return true, strconv.Itoa(0)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, r.Stop)
	res := r.Run()
	total := calls[0].Load() + calls[1].Load()
	if calls[0].Load() == 0 || calls[1].Load() == 0 {
		t.Errorf("calls per connection %d, %d: want both used", calls[0].Load(), calls[1].Load())
	}
	// 200/s for 1 s, paced: not unpaced (thousands), not far below.
	if total < 120 || total > 260 {
		t.Errorf("%d calls in 1 s at 200/s", total)
	}
	if rec.all.Load() != total || rec.ok.Load() != total-calls[0].Load()/4-calls[1].Load()/4 {
		t.Errorf("recorded %d (%d ok) of %d calls", rec.all.Load(), rec.ok.Load(), total)
	}
	if res.RunType != "gRPC" {
		t.Errorf("run type %q", res.RunType)
	}
}
