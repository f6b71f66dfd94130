package capacity

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"

	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

func TestHistoryKeepsTheNewestKneePerRevision(t *testing.T) {
	h, err := ParseHistory("")
	if err != nil || len(h) != 0 {
		t.Fatalf("empty annotation: %v, %v", h, err)
	}
	for i, rev := range []string{"a", "b", "c", "b", "d", "e", "f"} {
		h = h.With(Knee{Revision: rev, QPS: float64(100 + i)})
	}
	// "b" re-measured replaces its older entry; five kept, oldest ("a") gone.
	if len(h) != historyLimit || h[0].Revision != "c" || h[len(h)-1].Revision != "f" {
		t.Fatalf("history %+v", h)
	}
	if k, ok := h.Of("b"); !ok || k.QPS != 103 {
		t.Errorf("b: %+v %v; want its newest knee 103", k, ok)
	}
	if _, ok := h.Of("a"); ok {
		t.Error("a was trimmed but is still found")
	}
	back, err := ParseHistory(h.String())
	if err != nil || len(back) != len(h) || back[2] != h[2] {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if _, err := ParseHistory("{broken"); err == nil || !strings.Contains(err.Error(), wellknown.CapacityKneesAnnotation) {
		t.Errorf("broken annotation: %v; want an error naming %s", err, wellknown.CapacityKneesAnnotation)
	}
}

func TestCompareWithTheStableRevisionsKnee(t *testing.T) {
	check, err := ParseCheck([]byte(`{"minQPS": 50}`), policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	prev := &Knee{Revision: "old", QPS: 400, At: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name     string
		knee     Knee
		previous *Knee
		ratio    *float64
		fail     string // "" passes
		says     string
	}{
		{name: "first rollout", knee: Knee{QPS: 100}, says: "no knee recorded"},
		{name: "as fast", knee: Knee{QPS: 390}, previous: prev, says: "0.97× the stable revision old's knee 400 qps"},
		{name: "at the bound", knee: Knee{QPS: 320}, previous: prev, says: "0.80×"},
		{name: "slower", knee: Knee{QPS: 200}, previous: prev, fail: "0.50× the stable revision old's knee 400 qps (2026-11-01), below minRatioToPrevious 0.8"},
		{name: "capped below the bound", knee: Knee{QPS: 200, Capped: true}, previous: prev, fail: "raise capacity.maxQPS above 320"},
		{name: "off", knee: Knee{QPS: 10}, previous: prev, ratio: new(float64), says: "minRatioToPrevious 0"},
	} {
		c := check
		if tc.ratio != nil {
			c.MinRatioToPrevious = tc.ratio
		}
		says, err := c.comparePrevious(tc.knee, tc.previous)
		switch {
		case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)):
			t.Errorf("%s: %q, %v; want an error saying %q", tc.name, says, err, tc.fail)
		case tc.fail == "" && (err != nil || !strings.Contains(says, tc.says)):
			t.Errorf("%s: %q, %v; want a pass saying %q", tc.name, says, err, tc.says)
		}
	}
	if _, err := ParseCheck([]byte(`{"minQPS": 50, "minRatioToPrevious": 1.5}`), policy.Local()); err == nil || !strings.Contains(err.Error(), "capacity.minRatioToPrevious") {
		t.Errorf("ratio 1.5: %v; want an error naming capacity.minRatioToPrevious", err)
	}
	if *check.MinRatioToPrevious != DefaultMinRatioToPrevious {
		t.Errorf("default ratio %g", *check.MinRatioToPrevious)
	}
}

// A capacity block without requests sends the warm-up's.
func TestCheckInheritsTheWarmUpsRequests(t *testing.T) {
	w := warmup.Config{Requests: []warmup.RequestSpec{{Path: "/api/items?id={{randInt 1 9}}"}}, MarkerHeader: "X-Warm", HealthPath: "/ready", AllowSideEffects: true, MTLS: mtls.Off}
	c := Check{}.Inherit(w)
	if len(c.Requests) != 1 || c.Requests[0].Path != w.Requests[0].Path || c.MarkerHeader != "X-Warm" || c.HealthPath != "/ready" || !c.AllowSideEffects || c.MTLS != mtls.Off {
		t.Errorf("inherited %+v", c.Config)
	}
	own := Check{Config: Config{Requests: []warmup.RequestSpec{{Path: "/cheap"}}, HealthPath: "/h", MTLS: mtls.Istio}}.Inherit(w)
	if own.Requests[0].Path != "/cheap" || own.HealthPath != "/h" || own.AllowSideEffects || own.MTLS != mtls.Istio {
		t.Errorf("the block's own settings were overridden: %+v", own.Config)
	}
}

// A step that breaks once by chance does not end the ramp: it is measured
// again (confirm) and the ramp goes on when the repeat holds.
func TestABrokenStepIsConfirmedBeforeItCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("~10 s of load (skipped with -short)")
	}
	// Capacity 100 qps (1 slot × 10 ms), and one hiccup: the 40th request
	// stalls 300 ms, breaking the p99 of whichever step it lands in.
	var n atomic.Int64
	sem := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		sem <- struct{}{}
		defer func() { <-sem }()
		if n.Add(1) == 40 {
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
	})}
	l := testutil.ListenLoopback(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	target := warmup.Target{Name: "hiccup", URL: "http://" + l.Addr().String()}
	// p99Ratio 10 (not the default 3): the hiccup's step (p99 ~300 ms)
	// breaks 10 × the first step's ~12 ms, a loaded CI machine's scheduling
	// delay of a few tens of ms in the 30-request repeat does not (at 3× it
	// once broke the repeat at 44.6 ms > 40.7 ms).
	cfg := Config{HealthPath: "/healthz", StartQPS: 20, Hold: configDuration(time.Second), MaxQPS: 400, Refine: new(int), P99Ratio: 10}
	res, err := Run(context.Background(), cfg, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	_ = res.WriteTable(&table)
	t.Logf("\n%s", table.String())
	confirmed := slices.ContainsFunc(res.Steps[1:], func(s Step) bool { return s.Repeat && s.Broke == "" })
	if !confirmed || res.Steps[1].Broke == "" {
		t.Errorf("want the step with the hiccup (the 40th request: the second step) broken, then repeated and held:\n%s", table.String())
	}
	if res.KneeQPS < 60 {
		t.Errorf("knee %.0f qps: one hiccup ended the ramp", res.KneeQPS)
	}
}
