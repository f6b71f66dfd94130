package rollouts

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	goplugin "github.com/hashicorp/go-plugin"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmupstep"
)

// newStepLoadServer is a pod stand-in on 127.0.0.1 with the health path
// /healthz that counts warm-up requests.
func newStepLoadServer(t *testing.T, delay func(n int64, firstOnConn bool) time.Duration) *testutil.ColdServer {
	t.Helper()
	s := testutil.NewColdServer(t, delay)
	s.HealthPath = "/healthz"
	return s
}

// stepDecay is a cold pod: 1 ms + 20 ms·e^(−n/40).
var stepDecay = testutil.Decaying(time.Millisecond, 20*time.Millisecond, 40)

// warmupStepClient serves impl through go-plugin's real net/rpc plumbing and
// returns the controller-side client, as the Argo Rollouts controller
// dispenses it.
func warmupStepClient(t *testing.T, impl *warmupStep) rpc.StepPlugin {
	t.Helper()
	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{"RpcStepPlugin": &rpc.RpcStepPlugin{Impl: impl}}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense("RpcStepPlugin")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := raw.(rpc.StepPlugin)
	if !ok {
		t.Fatalf("dispensed %T, not a StepPlugin", raw)
	}
	return p
}

func newTestWarmupStep(*testing.T) *warmupStep {
	return newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), policy.Local())
}

func stepRollout(name, hash string, step int32) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
		Status: v1alpha1.RolloutStatus{CurrentPodHash: hash, StableRS: "old", CurrentStepIndex: &step},
	}
}

// warmupConfigJSON is a quick warm-up against the given URLs.
func warmupConfigJSON(t *testing.T, urls []string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{
		"healthPath": "/healthz", "qps": 500, "connections": 2, "window": 20, "stableWindows": 3,
		"minRequests": 60, "maxRequests": 3000, "tolerance": 0.5, "absoluteTolerance": "3ms", "deadline": "60s",
	}
	if urls != nil {
		c["urls"] = urls
	}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// runStepUntilDone calls Run as the controller does, feeding back each returned
// Status, until the phase is no longer Running.
func runStepUntilDone(t *testing.T, p rpc.StepPlugin, ro *v1alpha1.Rollout, cfg json.RawMessage, status json.RawMessage, timeout time.Duration) (types.RpcStepResult, []warmupstep.Status) {
	t.Helper()
	var seen []warmupstep.Status
	deadline := time.Now().Add(timeout)
	for {
		res, rerr := p.Run(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg, Status: status})
		if rerr.HasError() {
			t.Fatalf("Run: RpcError %v", rerr)
		}
		var st warmupstep.Status
		if err := json.Unmarshal(res.Status, &st); err != nil {
			t.Fatalf("Run returned status %q: %v", res.Status, err)
		}
		seen = append(seen, st)
		if res.Phase != types.PhaseRunning {
			return res, seen
		}
		if res.RequeueAfter <= 10*time.Second {
			t.Fatalf("RequeueAfter %s: Argo ignores <= 10s", res.RequeueAfter)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still Running after %s: %s", timeout, res.Message)
		}
		status = res.Status
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStepRunConvergesThroughRPC(t *testing.T) {
	srv := newStepLoadServer(t, stepDecay)
	impl := newTestWarmupStep(t)
	p := warmupStepClient(t, impl)
	if err := p.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	if got := p.Type(); got != WarmupPluginName {
		t.Errorf("Type() = %q", got)
	}
	ro := stepRollout("cart", "h1", 0)
	cfg := warmupConfigJSON(t, []string{srv.URL}, nil)

	first, rerr := p.Run(ro, &types.RpcStepContext{Config: cfg})
	if rerr.HasError() || first.Phase != types.PhaseRunning || first.RequeueAfter != warmupstep.DefaultPollInterval {
		t.Fatalf("first Run = %+v, %v; want Running, RequeueAfter 15s", first, rerr)
	}
	st := warmupstep.ParseStatus(first.Status)
	if st == nil || st.RunID != "shop/cart/h1/0" || st.StartedAt.IsZero() {
		t.Fatalf("first status %s", first.Status)
	}
	// Repeated Runs, with and without the status, report the same warm-up.
	again, _ := p.Run(ro, &types.RpcStepContext{Config: cfg, Status: first.Status})
	if st2 := warmupstep.ParseStatus(again.Status); again.Phase != types.PhaseRunning && again.Phase != types.PhaseSuccessful || st2.StartedAt != st.StartedAt {
		t.Errorf("repeated Run: %+v", again)
	}
	res, seen := runStepUntilDone(t, p, ro, cfg, again.Status, 30*time.Second)
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("phase %s: %s", res.Phase, res.Message)
	}
	if runs := len(impl.step.Supervisor.Keys()); runs != 1 {
		t.Errorf("%d warm-ups in memory after repeated Runs, want 1", runs)
	}
	final := seen[len(seen)-1]
	if final.Phase != warmupstep.PhaseConverged || final.Requests == 0 || final.Windows < 3 || final.FirstP99 == "" || final.LastP99 == "" || final.Converged != 1 {
		t.Errorf("final status %+v", final)
	}
	for _, want := range []string{"converged: 1/1 targets warm", "requests", "worst p99"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
	if srv.Unmarked() != 0 {
		t.Errorf("%d requests without marker", srv.Unmarked())
	}
	// Status round trip: the controller hands the final status back.
	back, _ := p.Run(ro, &types.RpcStepContext{Config: cfg, Status: res.Status})
	if back.Phase != types.PhaseSuccessful {
		t.Errorf("Run with the final status: %s %s", back.Phase, back.Message)
	}
}

func TestStepFailsWithTrendWhenNotConverging(t *testing.T) {
	srv := newStepLoadServer(t, testutil.NeverSettling)
	p := warmupStepClient(t, newTestWarmupStep(t))
	cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"connections": 1, "maxRequests": 200, "tolerance": 0.2})
	res, _ := runStepUntilDone(t, p, stepRollout("cart", "h1", 1), cfg, nil, 30*time.Second)
	if res.Phase != types.PhaseFailed {
		t.Fatalf("phase %s, want Failed: %s", res.Phase, res.Message)
	}
	for _, want := range []string{"maxRequests 200", "p99 of windows", " → ", "200 requests"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
	if st := warmupstep.ParseStatus(res.Status); st == nil || st.Phase != warmupstep.PhaseFailed {
		t.Errorf("status %s", res.Status)
	}
}

func TestStepRefusesBadConfig(t *testing.T) {
	p := warmupStepClient(t, newTestWarmupStep(t))
	ro := stepRollout("cart", "h1", 0)
	cases := map[string]json.RawMessage{
		"requests[0].method": warmupConfigJSON(t, []string{"http://127.0.0.1:1"}, map[string]any{"requests": []map[string]any{{"method": "DELETE", "path": "/cart"}}}),
		"pollInterval":       warmupConfigJSON(t, []string{"http://127.0.0.1:1"}, map[string]any{"pollInterval": "5s"}),
		"qsp: unknown field": json.RawMessage(`{"qsp": 5}`),
		"urls[0]":            warmupConfigJSON(t, []string{"http://127.0.0.1:1/api"}, nil),
	}
	for want, cfg := range cases {
		res, rerr := p.Run(ro, &types.RpcStepContext{Config: cfg})
		if rerr.HasError() || res.Phase != types.PhaseFailed || !strings.Contains(res.Message, want) {
			t.Errorf("config %s: got %s %q (rpc err %v), want Failed naming %s", cfg, res.Phase, res.Message, rerr, want)
		}
	}
}

func TestStepAbortAndTerminateStopLoad(t *testing.T) {
	for _, op := range []string{"Abort", "Terminate"} {
		t.Run(op, func(t *testing.T) {
			srv := newStepLoadServer(t, testutil.Flat(2*time.Millisecond))
			p := warmupStepClient(t, newTestWarmupStep(t))
			ro := stepRollout("cart", "h1", 0)
			cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"minRequests": 200000, "maxRequests": 200000, "qps": 200})
			res, _ := p.Run(ro, &types.RpcStepContext{Config: cfg})
			if res.Phase != types.PhaseRunning {
				t.Fatalf("Run: %s %s", res.Phase, res.Message)
			}
			testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 50 })
			start := time.Now()
			var out types.RpcStepResult
			var rerr types.RpcError
			sc := &types.RpcStepContext{Config: cfg, Status: res.Status}
			if op == "Abort" {
				out, rerr = p.Abort(ro, sc)
			} else {
				out, rerr = p.Terminate(ro, sc)
			}
			took := time.Since(start)
			if rerr.HasError() || out.Phase != types.PhaseSuccessful || !strings.Contains(out.Message, "1 running warm-up(s) stopped") {
				t.Fatalf("%s = %+v, %v", op, out, rerr)
			}
			if took > time.Second {
				t.Errorf("%s took %s, want the load stopped within a second", op, took)
			}
			after := srv.Load()
			time.Sleep(300 * time.Millisecond)
			if late := srv.Load() - after; late != 0 {
				t.Errorf("server got %d requests after %s returned", late, op)
			}
		})
	}
}

func TestStepRestartedPluginResumes(t *testing.T) {
	srv := newStepLoadServer(t, stepDecay)
	ro := stepRollout("cart", "h1", 2)
	cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"minRequests": 400})

	old := newTestWarmupStep(t)
	res, _ := warmupStepClient(t, old).Run(ro, &types.RpcStepContext{Config: cfg})
	testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 20 })
	// The process dies: its load stops, only the controller's status remains.
	old.step.Supervisor.Stop(ro.Namespace + "/" + ro.Name)
	running := warmupstep.ParseStatus(res.Status)
	if running.Phase == warmupstep.PhaseConverged || running.Phase == warmupstep.PhaseFailed {
		t.Fatalf("first status already warmupTerminal: %+v", running)
	}

	fresh := warmupStepClient(t, newTestWarmupStep(t))
	first, _ := fresh.Run(ro, &types.RpcStepContext{Config: cfg, Status: res.Status})
	st := warmupstep.ParseStatus(first.Status)
	if first.Phase != types.PhaseRunning || st.Restarts != 1 || !st.StartedAt.Equal(running.StartedAt) {
		t.Fatalf("restarted Run: %s, status %+v (first started %s)", first.Phase, st, running.StartedAt)
	}
	done, _ := runStepUntilDone(t, fresh, ro, cfg, first.Status, 30*time.Second)
	if done.Phase != types.PhaseSuccessful {
		t.Fatalf("restarted warm-up: %s %s", done.Phase, done.Message)
	}
	if warmupstep.ParseStatus(done.Status).Restarts != 1 {
		t.Errorf("final status lost the restart count: %s", done.Status)
	}

	// A fresh process handed a finished status reports it without new load.
	before := srv.Load()
	again, _ := warmupStepClient(t, newTestWarmupStep(t)).Run(ro, &types.RpcStepContext{Config: cfg, Status: done.Status})
	if again.Phase != types.PhaseSuccessful || srv.Load() != before {
		t.Errorf("finished status: %s, %d new requests", again.Phase, srv.Load()-before)
	}

	// Restarted too often, or past the deadline: Failed, not wedged.
	tooMany := *running
	tooMany.Restarts = warmupstep.MaxRestarts
	raw, _ := json.Marshal(tooMany)
	if r, _ := warmupStepClient(t, newTestWarmupStep(t)).Run(ro, &types.RpcStepContext{Config: cfg, Status: raw}); r.Phase != types.PhaseFailed || !strings.Contains(r.Message, "restarted") {
		t.Errorf("too many restarts: %s %s", r.Phase, r.Message)
	}
	late := *running
	late.StartedAt = time.Now().Add(-2 * time.Minute)
	raw, _ = json.Marshal(late)
	if r, _ := warmupStepClient(t, newTestWarmupStep(t)).Run(ro, &types.RpcStepContext{Config: cfg, Status: raw}); r.Phase != types.PhaseFailed || !strings.Contains(r.Message, "deadline 1m0s passed") {
		t.Errorf("past deadline: %s %s", r.Phase, r.Message)
	}
}

func TestStepFindsCanaryPodsOfRollout(t *testing.T) {
	srv := newStepLoadServer(t, stepDecay)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())

	pod := func(name, hash string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "cart", "rollouts-pod-template-hash": hash}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "cart-canary-x", Labels: map[string]string{discoveryv1.LabelServiceName: "cart-canary"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: stepPtr("http"), Port: stepPtr(int32(port))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "cart-h1-a"}}},
	}

	for _, mode := range []string{"canaryService", "selector"} {
		t.Run(mode, func(t *testing.T) {
			before := srv.Load()
			impl := newTestWarmupStep(t)
			impl.kube = fake.NewClientset(pod("cart-h1-a", "h1"), slice)
			p := warmupStepClient(t, impl)
			ro := stepRollout("cart", "h1", 0)
			if mode == "canaryService" {
				ro.Spec.Strategy.Canary.CanaryService = "cart-canary"
			}
			res, seen := runStepUntilDone(t, p, ro, warmupConfigJSON(t, nil, map[string]any{"port": "http"}), nil, 30*time.Second)
			if res.Phase != types.PhaseSuccessful {
				t.Fatalf("%s: %s", res.Phase, res.Message)
			}
			if srv.Load() == before {
				t.Error("no load reached the pod")
			}
			final := seen[len(seen)-1]
			if len(final.Pods) != 1 || final.Pods[0].Name != "cart-h1-a (127.0.0.1:"+u.Port()+")" {
				t.Errorf("pods in status: %+v", final.Pods)
			}
		})
	}

	t.Run("no pods of the canary hash", func(t *testing.T) {
		impl := newTestWarmupStep(t)
		impl.kube = fake.NewClientset(pod("cart-old", "h0"))
		p := warmupStepClient(t, impl)
		res, _ := runStepUntilDone(t, p, stepRollout("cart", "h1", 0), warmupConfigJSON(t, nil, map[string]any{"healthTimeout": "500ms"}), nil, 10*time.Second)
		if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "found 0 of 1 ready pods") {
			t.Errorf("%s: %s", res.Phase, res.Message)
		}
	})
}

func TestStepConcurrentRollouts(t *testing.T) {
	impl := newTestWarmupStep(t)
	p := warmupStepClient(t, impl)
	t.Run("rollouts", func(t *testing.T) {
		for i := range 4 {
			t.Run(fmt.Sprintf("svc%d", i), func(t *testing.T) {
				t.Parallel() // the controller calls from several workers at once
				srv := newStepLoadServer(t, stepDecay)
				ro := stepRollout(fmt.Sprintf("svc%d", i), "h1", 0)
				res, _ := runStepUntilDone(t, p, ro, warmupConfigJSON(t, []string{srv.URL}, nil), nil, 60*time.Second)
				if res.Phase != types.PhaseSuccessful {
					t.Errorf("%s %s", res.Phase, res.Message)
				}
			})
		}
	})
	if runs := impl.step.Supervisor.Keys(); len(runs) != 4 {
		t.Errorf("%d runs in memory, want one per rollout: %v", len(runs), runs)
	}
}

func stepPtr[T any](v T) *T { return &v }

// warmupRunKey is the supervisor's key of ro's warm-up.
func warmupRunKey(ro *v1alpha1.Rollout) warmupstep.RunKey {
	return warmupstep.RunKey{Owner: ro.Namespace + "/" + ro.Name, Revision: ro.Status.CurrentPodHash, Step: stepIndex(ro)}
}
