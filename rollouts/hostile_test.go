package rollouts

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One plugin process serves every tenant's rollout from inside Argo's
// controller, whose RPC calls have no timeout: a call that never answers
// holds one of its ten reconcile workers for good. These tests drive each
// entry point, through the real plugin RPC, with what a hostile tenant
// wrote, and require an answer within answerBound and a second tenant
// still served after it.

// answerBound is how long any call into danki may take whatever the
// config: far above what a healthy call takes, far below a hang.
const answerBound = 15 * time.Second

// within runs call and fails the test if it has not answered within
// answerBound; the call goes on in the background then (it cannot be
// stopped), which is the defect being tested for.
func within[T any](t *testing.T, what string, call func() T) T {
	t.Helper()
	answer := make(chan T, 1)
	go func() { answer <- call() }()
	select {
	case v := <-answer:
		return v
	case <-time.After(answerBound):
		t.Fatalf("%s: no answer within %s", what, answerBound)
		panic("unreachable")
	}
}

// hostileRequests are request templates that, in Go's text/template, never
// end or allocate without bound, by the field that must be named.
var hostileRequests = []struct {
	name, field string
	request     map[string]any
}{
	{"range over an integer", "requests[0].path", map[string]any{"path": "/{{range 1000000000000}}{{end}}"}},
	{"template recursion", "requests[0].path", map[string]any{"path": `/{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`}},
	{"printf width", "requests[0].headers", map[string]any{"path": "/", "headers": map[string]string{"X-Pad": `{{printf "%999999999d" 1}}`}}},
	{"randString of 4 GB", "requests[0].body", map[string]any{"method": "GET", "path": "/", "body": "{{randString 4000000000}}"}},
	{"amplifying pipeline", "requests[0].path", map[string]any{"path": "/" + strings.Repeat("{{randString 4000 | urlquery | urlquery | urlquery | urlquery}}", 64)}},
}

func TestStepAnswersHostileConfigsInTimeThroughRPC(t *testing.T) {
	impl := newTestWarmupStep(t)
	p := warmupStepClient(t, impl)
	mustOK(t, "InitPlugin", p.InitPlugin())
	cases := map[string]json.RawMessage{}
	for _, h := range hostileRequests {
		cases[h.name+" → "+h.field] = warmupConfigJSON(t, []string{"http://127.0.0.1:1"}, map[string]any{"requests": []map[string]any{h.request}})
	}
	cases["window of 10^10 → window"] = warmupConfigJSON(t, []string{"http://127.0.0.1:1"}, map[string]any{"window": 10_000_000_000, "untilConverged": false})
	for name, cfg := range cases {
		field := name[strings.Index(name, "→ ")+len("→ "):]
		t.Run(name, func(t *testing.T) {
			ro := stepRollout("evil", "h1", 0)
			res := within(t, "Run", func() types.RpcStepResult {
				res, rerr := p.Run(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg})
				if rerr.HasError() {
					t.Errorf("Run: RpcError %v", rerr)
				}
				return res
			})
			if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, field) {
				t.Errorf("Run = %s %q, want Failed naming %s", res.Phase, res.Message, field)
			}
			for _, stop := range []struct {
				name string
				call func(*v1alpha1.Rollout, *types.RpcStepContext) (types.RpcStepResult, types.RpcError)
			}{{"Abort", p.Abort}, {"Terminate", p.Terminate}} {
				res := within(t, stop.name, func() types.RpcStepResult {
					res, _ := stop.call(ro, &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg})
					return res
				})
				if res.Phase != types.PhaseSuccessful {
					t.Errorf("%s = %s %q", stop.name, res.Phase, res.Message)
				}
			}
		})
	}
	if n := len(impl.step.Supervisor.Keys()); n != 0 {
		t.Errorf("%d warm-ups in memory from refused configs", n)
	}

	// The next tenant's warm-up still runs to its verdict.
	srv := newStepLoadServer(t, stepDecay)
	res, _ := runStepUntilDone(t, p, stepRollout("cart", "h2", 0), warmupConfigJSON(t, []string{srv.URL}, nil), nil, 30*time.Second)
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("the next tenant's warm-up: %s %s", res.Phase, res.Message)
	}
}

func TestMetricAnswersHostileConfigsInTimeThroughRPC(t *testing.T) {
	fake := latencyProm(t)
	mp, _ := dispenseLatency(t, time.Now())
	run := analysisRunFor("evil")
	cases := map[string]v1alpha1.Metric{}
	for _, h := range hostileRequests {
		path, _ := json.Marshal(h.request)
		// source: load writes its templates with << >> (Argo resolves {{…}}).
		text := strings.NewReplacer("{{", "<<", "}}", ">>").Replace(string(path))
		cases[h.name+" → load."+h.field] = latencyMetric("evil", fmt.Sprintf(`{"source": "load",
		  "load": {"urls": ["http://127.0.0.1:1"], "requests": [%s]}, "slo": {"p99": "30ms"}}`, text))
	}
	cases["PromQL range → promql.histogram"] = latencyMetric("evil", `{"source":"promql","prometheus":{"address":"`+fake.URL+`"},
	  "promql":{"canary":"a=\"b\"","histogram":"h{<<.Selector>>}<<range 1000000000000>><<end>>","requests":"r{<<.Selector>>}","errors":"e{<<.Selector>>}"},"slo":{"p99":"1s"}}`)
	for name, metric := range cases {
		field := name[strings.Index(name, "→ ")+len("→ "):]
		t.Run(name, func(t *testing.T) {
			m := within(t, "Run", func() v1alpha1.Measurement { return mp.Run(run, metric) })
			if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, field) {
				t.Errorf("Run = %s %q, want Error naming %s", m.Phase, m.Message, field)
			}
			within(t, "GetMetadata", func() map[string]string { return mp.GetMetadata(metric) })
			within(t, "Terminate", func() v1alpha1.Measurement { return mp.Terminate(run, metric, m) })
		})
	}
	next := within(t, "the next tenant's Run", func() v1alpha1.Measurement {
		return mp.Run(&v1alpha1.AnalysisRun{Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: time.Now().Add(-time.Minute)}}},
			latencyMetric("latency", istioPluginConfig(fake.URL, "app-canary")))
	})
	if next.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("the next tenant's measurement: %s %s", next.Phase, next.Message)
	}
}

// TestMetricSlowQueryRunsInTheBackground: a tenant's query that takes a
// minute (its config's timeout allows five) answers Running at once and
// its verdict on a later Resume, while another tenant's measurement
// answers meanwhile.
func TestMetricSlowQueryRunsInTheBackground(t *testing.T) {
	slow, fast := latencyProm(t), latencyProm(t)
	slow.Delay(answerWithin + 2*time.Second)
	mp, _ := dispenseLatency(t, time.Now())
	run := &v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: "default"},
		Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: time.Now().Add(-time.Minute)}}}
	metric := latencyMetric("latency", istioPluginConfig(slow.URL, "app-canary"))
	start := time.Now()
	m := within(t, "Run", func() v1alpha1.Measurement { return mp.Run(run, metric) })
	if m.Phase != v1alpha1.AnalysisPhaseRunning || m.ResumeAt == nil {
		t.Fatalf("Run on a slow Prometheus = %s (resumeAt %v) %q, want Running with a resumeAt", m.Phase, m.ResumeAt, m.Message)
	}
	if took := time.Since(start); took > answerWithin+2*time.Second {
		t.Errorf("Run answered after %s, want about answerWithin (%s)", took, answerWithin)
	}
	other := within(t, "another tenant's Run", func() v1alpha1.Measurement {
		return mp.Run(&v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "team-b"},
			Status: v1alpha1.AnalysisRunStatus{StartedAt: &metav1.Time{Time: time.Now().Add(-time.Minute)}}},
			latencyMetric("latency", istioPluginConfig(fast.URL, "app-slow")))
	})
	if other.Phase != v1alpha1.AnalysisPhaseFailed {
		t.Errorf("another tenant's measurement = %s %q, want its own verdict (Failed: app-slow)", other.Phase, other.Message)
	}
	deadline := time.Now().Add(time.Minute)
	for m.Phase == v1alpha1.AnalysisPhaseRunning {
		if time.Now().After(deadline) {
			t.Fatalf("still running after a minute: %s", m.Message)
		}
		m = within(t, "Resume", func() v1alpha1.Measurement { return mp.Resume(run, metric, m) })
	}
	if m.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("slow measurement's verdict = %s %q, want Successful", m.Phase, m.Message)
	}
	if n := len(slow.Queries()); n > 6 {
		t.Errorf("%d queries for one measurement: Resume started it again instead of collecting it", n)
	}
}

// TestRouterAnswersHostileGatesInTimeThroughRPC: the gate is checked in
// every SetWeight; a template that never ends is refused naming the field,
// and a gate whose Prometheus answers in a minute holds the ramp instead
// of the controller's worker.
func TestRouterAnswersHostileGatesInTimeThroughRPC(t *testing.T) {
	slow := latencyProm(t)
	slow.Delay(answerWithin + 7*time.Second)
	gate := func(address, histogram string) string {
		return `{"virtualService": {"name": "reviews"}, "ramp": {"step": 20, "interval": "1s"}, "gate": {"source": "promql",
		  "prometheus": {"address": "` + address + `"},
		  "promql": {"canary": "a=\"b\"", "stable": "a=\"c\"", "histogram": "` + histogram + `", "requests": "r{<<.Selector>>}", "errors": "e{<<.Selector>>}"},
		  "slo": {"p99": "250ms"}, "minSamples": 1}}`
	}
	t.Run("template that never ends", func(t *testing.T) {
		f := newTRFixture(t, hostVS())
		ro := trRollout(gate(slow.URL, `h{<<.Selector>>}<<range 1000000000000>><<end>>`))
		err := within(t, "SetWeight", func() types.RpcError { return f.plugin.SetWeight(ro, 20, nil) })
		if !err.HasError() || !strings.Contains(err.Error(), "gate") || !strings.Contains(err.Error(), "promql.histogram") {
			t.Fatalf("SetWeight = %q, want an error naming gate.promql.histogram", err.Error())
		}
		if w := weights(f.vs(t), 1); w[1] != 0 {
			t.Errorf("canary at %d with a refused gate, want 0", w[1])
		}
	})
	t.Run("slow Prometheus", func(t *testing.T) {
		f := newTRFixture(t, hostVS())
		ro := trRollout(gate(slow.URL, `h{<<.Selector>>}`))
		mustOK(t, "SetWeight", within(t, "SetWeight", func() types.RpcError { return f.plugin.SetWeight(ro, 60, nil) })) // 0 → 20, no gate yet
		f.clock.Add(2 * time.Second)
		start := time.Now()
		err := within(t, "SetWeight", func() types.RpcError { return f.plugin.SetWeight(ro, 60, nil) })
		if took := time.Since(start); took > answerWithin+5*time.Second {
			t.Errorf("SetWeight with a slow gate answered after %s", took)
		}
		mustOK(t, "SetWeight", err)
		if w := weights(f.vs(t), 1); w[1] != 20 {
			t.Errorf("canary at %d, want 20: the ramp holds while the gate has no verdict", w[1])
		}
		v, verr := f.plugin.VerifyWeight(ro, 60, nil)
		if verr.HasError() || v != types.NotVerified {
			t.Errorf("VerifyWeight = %v %v, want NotVerified", v, verr)
		}
	})
}
