package rollouts

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/danki-dev/danki/internal/testutil"
)

// The step's capacity block runs on a warm canary pod after the warm-up: a
// pod whose knee is below minQPS fails the step (the rollout aborts at
// weight 0), one above passes with its knee in the message.
func TestStepCapacityCheckThroughRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("~20 s of load (skipped with -short)")
	}
	// One slot of 4 ms: a capacity of 250 requests a second.
	sem := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		sem <- struct{}{}
		time.Sleep(4 * time.Millisecond)
		<-sem
	})}
	l := testutil.ListenLoopback(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + l.Addr().String()

	p := warmupStepClient(t, newTestWarmupStep(t))
	for i, tc := range []struct {
		minQPS float64
		want   types.StepPhase
		says   string
	}{{500, types.PhaseFailed, "below minQPS 500"}, {100, types.PhaseSuccessful, "capacity: knee"}} {
		cfg := warmupConfigJSON(t, []string{url}, map[string]any{"qps": 100, "capacity": map[string]any{
			"minQPS": tc.minQPS, "startQPS": 60, "hold": "1s", "refine": 1, "healthPath": "/healthz"}})
		res, _ := runStepUntilDone(t, p, stepRollout("app", "h"+string(rune('a'+i)), 1), cfg, nil, 2*time.Minute)
		if res.Phase != tc.want || !strings.Contains(res.Message, tc.says) {
			t.Fatalf("minQPS %g: %s %q; want %s saying %q", tc.minQPS, res.Phase, res.Message, tc.want, tc.says)
		}
		t.Logf("minQPS %g: %s: %s", tc.minQPS, res.Phase, res.Message)
	}
	bad := warmupConfigJSON(t, []string{url}, map[string]any{"capacity": map[string]any{"startQPS": 10}})
	res, rerr := p.Run(stepRollout("app", "hz", 1), &types.RpcStepContext{PluginName: WarmupPluginName, Config: bad})
	if rerr.HasError() || res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "capacity.minQPS") {
		t.Fatalf("no minQPS: %s %q; want Failed naming capacity.minQPS", res.Phase, res.Message)
	}
}
