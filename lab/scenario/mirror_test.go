package scenario

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// A mirror-only warm-up succeeds with no per-pod synthetic counts: its
// mirrored requests come from the step's message, wherever they stand in
// it (afterSynthetic appends the mirror's summary to the synthetic one),
// and a message that grew more text still parses.
func TestWarmupSummaryMirror(t *testing.T) {
	ro := func(message, status string) *v1alpha1.Rollout {
		return &v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{CurrentPodHash: "abc", Canary: v1alpha1.CanaryStatus{
			StepPluginStatuses: []v1alpha1.StepPluginStatus{{Name: "danki/warmup", Operation: v1alpha1.StepPluginOperationRun,
				Phase: v1alpha1.StepPluginPhaseSuccessful, Message: message, Status: json.RawMessage(status)}},
		}}}
	}
	const only = "converged on mirrored traffic after 1480 mirrored requests in 12 windows (mirror at 100%): p99 250ms in window 1, 9.5ms in window 12; p50 40ms → 3.1ms"
	for _, c := range []struct {
		name, message, status string
		perPod, mirrored      int
	}{
		{"mirror only", only, `{"runID":"r","canaryHash":"abc","phase":"converged"}`, 0, 1480},
		{"mirror only, more said", only + "; canary requests: 1502 mirrored, 0 from users", `{"runID":"r","canaryHash":"abc"}`, 0, 1480},
		{"after synthetic", "warm-up converged: 2/2 targets warm after 2400 requests (12 windows of 100 per target) in 48s; " + only,
			`{"runID":"r","canaryHash":"abc","converged":2,"requests":2400,"pods":[{"name":"a"},{"name":"b"}]}`, 1200, 1480},
		// "after 2400 requests" is the synthetic count, not a mirrored one.
		{"synthetic", "warm-up converged: 2/2 targets warm after 2400 requests (12 windows of 100 per target) in 48s",
			`{"runID":"r","canaryHash":"abc","converged":2,"requests":2400}`, 1200, 0},
		{"previous rollout's", only, `{"runID":"r","canaryHash":"old"}`, 0, 0},
		{"no count at all", "converged on mirrored traffic", `{"runID":"r","canaryHash":"abc"}`, 0, 0},
	} {
		w := warmupSummary(ro(c.message, c.status))
		if w.perPod != c.perPod || w.mirrored != c.mirrored || (c.perPod+c.mirrored > 0) != (w.message == c.message) {
			t.Errorf("%s: %+v; want %d per pod, %d mirrored", c.name, w, c.perPod, c.mirrored)
		}
	}
}

// The warm-up's length runs from the step index reaching danki/warmup to
// it moving on, also when the warm-up is the last step (promotion moves the
// index past it); a rollout without the step has none.
func TestNoteStep(t *testing.T) {
	read := func(dir string) []v1alpha1.CanaryStep {
		return readExample(t, dir).Spec.Strategy.Canary.Steps
	}
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	follow := func(steps []v1alpha1.CanaryStep, at []time.Duration) Run {
		var r Run
		last := int32(-1)
		for i, d := range at {
			r.noteStep(steps, last, int32(i), t0.Add(d))
			last = int32(i)
		}
		return r
	}
	// lab/manifests/danki: setCanaryScale, danki/warmup, setWeight 20, …
	steps := read("danki")
	if steps[1].Plugin == nil || steps[1].Plugin.Name != "danki/warmup" {
		t.Fatalf("lab/manifests/danki's step 1 is not danki/warmup: %+v", steps[1])
	}
	at := []time.Duration{0, time.Second, 53 * time.Second, 70 * time.Second, 2 * time.Minute}
	if r := follow(steps, at[:len(steps)]); r.WarmupDuration() != 52*time.Second || !r.WarmupStart.Equal(t0.Add(time.Second)) {
		t.Errorf("danki: warm-up %s from %s, want 52s from %s", r.WarmupDuration(), r.WarmupStart, t0.Add(time.Second))
	}
	if r := follow(read("baseline"), []time.Duration{0, time.Second, 2 * time.Second}); r.WarmupDuration() != 0 || !r.WarmupStart.IsZero() {
		t.Errorf("baseline: warm-up %s from %s, want none", r.WarmupDuration(), r.WarmupStart)
	}
	// Still warming: no length yet.
	if r := follow(steps, at[:2]); r.WarmupDuration() != 0 {
		t.Errorf("a warm-up that has not ended has length %s", r.WarmupDuration())
	}
	// The warm-up as the last step: promotion moves the index to len(steps).
	last := steps[:2]
	r := follow(last, at[:2])
	r.noteStep(last, 1, 2, t0.Add(40*time.Second))
	if r.WarmupDuration() != 39*time.Second {
		t.Errorf("warm-up as the last step: %s, want 39s", r.WarmupDuration())
	}
}

// With --mirror the contender table shows danki (mirror) next to danki
// with each warm-up's length and source, and the ratios compare it with
// danki like the other contenders, warm-up time included.
func TestMirrorReport(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	phases := func(before, during, after latency.Summary) []traffic.PhaseStats {
		return []traffic.PhaseStats{{Name: "before", Summary: before}, {Name: "during", Summary: during}, {Name: "after", Summary: after}}
	}
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	res := &Result{
		Scenarios: []traffic.Scenario{
			{Name: Baseline, RolloutDuration: 60 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5)}, latency.Summary{Count: 100, P99: ms(400), P999: ms(900), Max: ms(1200)}, latency.Summary{Count: 100, P999: ms(60), Max: ms(200)})},
			{Name: DankiMirror, RolloutDuration: 180 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5)}, latency.Summary{Count: 100, P99: ms(12), P999: ms(40), Max: ms(60)}, latency.Summary{Count: 100, P999: ms(10), Max: ms(20)})},
			{Name: Danki, RolloutDuration: 150 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5)}, latency.Summary{Count: 100, P99: ms(8), P999: ms(20), Max: ms(30)}, latency.Summary{Count: 100, P999: ms(10), Max: ms(10)})},
		},
		Runs: []Run{
			{Scenario: Baseline},
			{Scenario: DankiMirror, WarmupMirrored: 1480, WarmupStart: t0, WarmupEnd: t0.Add(75 * time.Second)},
			{Scenario: Danki, WarmupRequests: 2000, WarmupStart: t0, WarmupEnd: t0.Add(50 * time.Second)},
		},
	}
	got := map[string]float64{}
	for _, r := range ratios(res) {
		got[r.Name] = r.Value
	}
	for name, w := range map[string]float64{
		"danki (mirror) ÷ danki, p99 during rollout":   1.5,
		"danki (mirror) ÷ danki, p99.9 during rollout": 2,
		"danki (mirror) ÷ danki, max during rollout":   2,
		"danki (mirror) ÷ danki, max after rollout":    2,
		"danki (mirror) ÷ danki, rollout time":         1.2,
		"danki (mirror) ÷ danki, warm-up time":         1.5,
		"baseline ÷ danki, p99 during rollout":         50,
	} {
		if g, ok := got[name]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %t), want %v", name, g, ok, w)
		}
	}
	if _, ok := got["baseline ÷ danki, warm-up time"]; ok {
		t.Error("the baseline has no warm-up, yet a warm-up time ratio")
	}
	res.Ratios = ratios(res)
	var b strings.Builder
	if err := WriteReport(&b, traffic.Markdown, res); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| rollout | time | warm-up | before p99 |",
		"| baseline | 1m0s | – | 5.00ms |",
		"| danki (mirror) | 3m0s | 1m15s, 1480 mirrored | 5.00ms | 0.000ms | 12.0ms | 40.0ms | 60.0ms |",
		"| danki | 2m30s | 50s, 2000/pod | 5.00ms |",
	} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("report lacks %q:\n%s", row, b.String())
		}
	}
}

// lab/manifests/mirror is lab/manifests/danki but for the warm-up's source:
// mirrored GETs only (the lab's users send nothing else), no synthetic
// load, read from the same Envoy histograms in the same Prometheus as the
// ramp's gate; danki/warmup and its mirror block accept the config.
func TestMirrorExample(t *testing.T) {
	dk, mr := readExample(t, "danki"), readExample(t, "mirror")
	warmStep := func(ro v1alpha1.Rollout) int {
		return slices.IndexFunc(ro.Spec.Strategy.Canary.Steps, func(s v1alpha1.CanaryStep) bool {
			return s.Plugin != nil && s.Plugin.Name == "danki/warmup"
		})
	}
	i, j := warmStep(dk), warmStep(mr)
	if i < 0 || i != j {
		t.Fatalf("danki/warmup at step %d in danki, %d in mirror: want the same step", i, j)
	}
	raw := mr.Spec.Strategy.Canary.Steps[j].Plugin.Config
	if _, err := warmupstep.ParseStepConfig(raw, policy.Local()); err != nil {
		t.Fatalf("danki/warmup refuses the mirror example: %v", err)
	}
	var step map[string]json.RawMessage
	if err := json.Unmarshal(raw, &step); err != nil {
		t.Fatal(err)
	}
	for _, synthetic := range []string{"requests", "qps", "connections", "urls"} {
		if _, ok := step[synthetic]; ok {
			t.Errorf("the mirror-only warm-up sets %s (synthetic load)", synthetic)
		}
	}
	mc, err := mirror.Parse(step["mirror"])
	if err != nil {
		t.Fatalf("mirror block: %v", err)
	}
	if mc.Mode != mirror.ModeOnly || mc.AllowSideEffects || !slices.Equal(mc.Methods, []string{"GET"}) {
		t.Errorf("mirror mode %q, allowSideEffects %t, methods %v; want only, false, [GET]", mc.Mode, mc.AllowSideEffects, mc.Methods)
	}
	var router struct {
		Gate struct {
			Source     string `json:"source"`
			Prometheus struct {
				Address string `json:"address"`
			} `json:"prometheus"`
			Envoy struct {
				CanaryCluster string `json:"canaryCluster"`
			} `json:"envoy"`
		} `json:"gate"`
	}
	if err := json.Unmarshal(mr.Spec.Strategy.Canary.TrafficRouting.Plugins["danki/istio"], &router); err != nil {
		t.Fatal(err)
	}
	g := router.Gate
	if mc.Source != g.Source || mc.Prometheus == nil || mc.Prometheus.Address != g.Prometheus.Address || mc.Envoy == nil || mc.Envoy.CanaryCluster != g.Envoy.CanaryCluster {
		t.Errorf("mirror reads %s %+v %+v; the gate reads %+v", mc.Source, mc.Prometheus, mc.Envoy, g)
	}
	// Everything but the warm-up's config is danki's.
	mr.Spec.Strategy.Canary.Steps[j].Plugin.Config = dk.Spec.Strategy.Canary.Steps[i].Plugin.Config
	if !equality.Semantic.DeepEqual(mr.Spec, dk.Spec) {
		t.Errorf("mirror differs from danki beyond the warm-up's config:\n%+v\n%+v", mr.Spec, dk.Spec)
	}
}

// readExample reads lab/manifests/<dir>/30-rollout.yaml strictly.
func readExample(t *testing.T, dir string) v1alpha1.Rollout {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "lab", "manifests", dir, "30-rollout.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ro v1alpha1.Rollout
	if err := yaml.UnmarshalStrict(raw, &ro); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return ro
}
