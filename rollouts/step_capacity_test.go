package rollouts

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/pkg/wellknown"
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

// The knee a canary passed with is recorded on the Rollout; the next
// rollout's canary is compared with it: a version with half the capacity
// of the one it replaces fails, though it clears minQPS.
func TestStepCapacityComparesWithTheStableRevisionsKnee(t *testing.T) {
	if testing.Short() {
		t.Skip("~20 s of load (skipped with -short)")
	}
	// 100 and 50 qps: low rates a busy machine's load generator still
	// delivers (a starved generator reads as a lower knee).
	fast, slow := slotURL(t, 2, 20*time.Millisecond), slotURL(t, 1, 20*time.Millisecond)
	step := newTestWarmupStep(t)
	first := stepRollout("app", "r1", 1)
	first.Status.StableRS = "r0"
	step.argo = argofake.NewSimpleClientset(first.DeepCopy())
	p := warmupStepClient(t, step)
	capacityCfg := func(url string) json.RawMessage {
		return warmupConfigJSON(t, []string{url}, map[string]any{"qps": 40, "untilConverged": false, "maxRequests": 100, "capacity": map[string]any{
			"minQPS": 20, "maxQPS": 400, "startQPS": 20, "hold": "1s", "refine": 1, "healthPath": "/healthz"}})
	}

	res, _ := runStepUntilDone(t, p, first, capacityCfg(fast), nil, 2*time.Minute)
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "no knee recorded for the stable revision") || !strings.Contains(res.Message, "recorded for revision r1") {
		t.Fatalf("first rollout: %s %q; want Successful, nothing to compare with, its knee recorded", res.Phase, res.Message)
	}
	t.Logf("first rollout (r1, 100 qps): %s", res.Message)
	ro, err := step.argo.ArgoprojV1alpha1().Rollouts("shop").Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	history, err := capacity.ParseHistory(ro.Annotations[wellknown.CapacityKneesAnnotation])
	k, ok := history.Of("r1")
	if err != nil || !ok || k.QPS < 70 {
		t.Fatalf("annotation %q (%v): want r1's knee near 100 qps", ro.Annotations[wellknown.CapacityKneesAnnotation], err)
	}

	// r1 is stable now; r2 has half its capacity.
	second := ro.DeepCopy()
	second.Status.StableRS, second.Status.CurrentPodHash = "r1", "r2"
	// The controller records the new revision before it runs the step (the
	// warm-up stops if its Rollout's canary is another revision).
	if second, err = step.argo.ArgoprojV1alpha1().Rollouts("shop").UpdateStatus(context.Background(), second, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, _ = runStepUntilDone(t, p, second, capacityCfg(slow), nil, 2*time.Minute)
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "the stable revision r1's knee") || !strings.Contains(res.Message, "below minRatioToPrevious 0.8") {
		t.Fatalf("half the capacity: %s %q; want Failed against r1's knee", res.Phase, res.Message)
	}
	t.Logf("second rollout (r2, 50 qps): %s", res.Message)
	ro, _ = step.argo.ArgoprojV1alpha1().Rollouts("shop").Get(context.Background(), "app", metav1.GetOptions{})
	if h, _ := capacity.ParseHistory(ro.Annotations[wellknown.CapacityKneesAnnotation]); len(h) != 1 {
		t.Errorf("a failed check recorded a knee: %s", ro.Annotations[wellknown.CapacityKneesAnnotation])
	}
}

// slotURL serves with slots concurrent slots of service each (capacity
// slots ÷ service) and a /healthz.
func slotURL(t *testing.T, slots int, service time.Duration) string {
	t.Helper()
	sem := make(chan struct{}, slots)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		sem <- struct{}{}
		time.Sleep(service)
		<-sem
	})}
	l := testutil.ListenLoopback(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// A poll of a running warm-up reports its progress without building its job
// again: the Rollout's capacity history, read when the run started, is not
// parsed on every poll (nor are the guard's and mirror's sources built).
func TestStepPollDoesNotRebuildTheRunningJob(t *testing.T) {
	srv := newStepLoadServer(t, testutil.NeverSettling)
	p := warmupStepClient(t, newTestWarmupStep(t))
	ro := stepRollout("app", "h1", 1)
	cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"qps": 50, "deadline": "30s", "capacity": map[string]any{
		"minQPS": 10, "startQPS": 20, "hold": "1s", "healthPath": "/healthz"}})
	first, rerr := p.Run(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg})
	if rerr.HasError() || first.Phase != types.PhaseRunning {
		t.Fatalf("first Run: %s %q", first.Phase, first.Message)
	}
	defer p.Terminate(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg})
	ro.Annotations = map[string]string{wellknown.CapacityKneesAnnotation: "not json"}
	again, rerr := p.Run(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg, Status: first.Status})
	if rerr.HasError() || again.Phase != types.PhaseRunning || warmupstep.ParseStatus(again.Status).StartedAt != warmupstep.ParseStatus(first.Status).StartedAt {
		t.Fatalf("poll of the running warm-up: %s %q; want the same run, Running", again.Phase, again.Message)
	}
	// A new run (another revision) does read the history, and refuses it.
	ro.Status.CurrentPodHash = "h2"
	if res, _ := p.Run(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg}); res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "shop/app") {
		t.Errorf("new run with a bad history: %s %q; want Failed naming the Rollout", res.Phase, res.Message)
	}
}
