package scenario

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// The A/A tests the example's warm-up as users get it: its danki/warmup
// step goes into the A/A's Rollout verbatim, and only the steps and the
// ramp's rungs differ from the example.
func TestAAManifestKeepsTheExampleWarmup(t *testing.T) {
	file := filepath.Join("..", "..", "lab", "manifests", "danki", "30-rollout.yaml")
	manifest, steps, err := aaManifest(file)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ex, got v1alpha1.Rollout
	if err := yaml.UnmarshalStrict(raw, &ex); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(manifest, &got); err != nil {
		t.Fatalf("the A/A's Rollout does not parse strictly: %v\n%s", err, manifest)
	}
	var exWarm v1alpha1.CanaryStep
	for _, s := range ex.Spec.Strategy.Canary.Steps {
		if s.Plugin != nil && s.Plugin.Name == "danki/warmup" {
			exWarm = s
		}
	}
	st := got.Spec.Strategy.Canary.Steps
	if len(st) != 4 || st[0].SetCanaryScale == nil || *st[0].SetCanaryScale.Replicas != 2 ||
		st[2].SetWeight == nil || *st[2].SetWeight != 20 || st[3].Pause == nil || st[3].Pause.DurationSeconds() != 5 {
		t.Errorf("steps = %s, want [setCanaryScale 2, danki/warmup, setWeight 20, pause 5s]", steps)
	}
	if len(st) > 1 && !equality.Semantic.DeepEqual(st[1], exWarm) {
		t.Errorf("the A/A's warm-up step differs from the example's:\n got %+v\nwant %+v", st[1], exWarm)
	}
	// Everything but the steps and the rungs is the example's.
	var router map[string]any
	if err := json.Unmarshal(got.Spec.Strategy.Canary.TrafficRouting.Plugins["danki/istio"], &router); err != nil {
		t.Fatal(err)
	}
	if w, _ := json.Marshal(router["ramp"].(map[string]any)["weights"]); string(w) != "[20,100]" {
		t.Errorf("rungs = %s, want [20,100]", w)
	}
	var exRouter map[string]any
	if err := json.Unmarshal(ex.Spec.Strategy.Canary.TrafficRouting.Plugins["danki/istio"], &exRouter); err != nil {
		t.Fatal(err)
	}
	delete(router["ramp"].(map[string]any), "weights")
	delete(exRouter["ramp"].(map[string]any), "weights")
	if !equality.Semantic.DeepEqual(router, exRouter) {
		t.Errorf("danki/istio config beyond the rungs: got %v, want the example's %v", router, exRouter)
	}
	got.Spec.Strategy.Canary.Steps, ex.Spec.Strategy.Canary.Steps = nil, nil
	got.Spec.Strategy.Canary.TrafficRouting.Plugins, ex.Spec.Strategy.Canary.TrafficRouting.Plugins = nil, nil
	if !equality.Semantic.DeepEqual(got, ex) {
		t.Errorf("the A/A's Rollout differs from the example beyond the steps and rungs:\n%s", manifest)
	}
}

// A rejection message as pkg/warmup writes it (the step's "warm-up failed:
// <reason> (N requests)" around slowerThanStable's text).
const aaRejection = "warm-up failed: 10.0.0.7:8080 (app-7d9-x) p99 settled at 12.4ms (12.1ms the 5 windows before), 2.3× stable's 5.40ms (rejectRatio 2, rejectFloor 5ms), for 5 windows in a row: a slower version, rejected before any user request reached it (2400 requests)"

func TestClassifyAA(t *testing.T) {
	ok, failed := string(v1alpha1.StepPluginPhaseSuccessful), string(v1alpha1.StepPluginPhaseFailed)
	for _, c := range []struct {
		name              string
		promoted, aborted bool
		phase, msg, gate  string
		want              string
	}{
		{"promoted", true, false, ok, "warm-up converged: 2/2 targets warm", "", AAPromoted},
		{"rejected", false, true, failed, aaRejection, "", AARejected},
		{"warm-up deadline", false, true, failed, "warm-up failed: deadline 4m0s passed before every target converged", "", AAWarmupFailed},
		{"gate", false, true, ok, "warm-up converged", "danki/istio aborted the rollout: gate breached 2 times", AAGateAborted},
		{"other abort", false, true, ok, "warm-up converged", "", AAAborted},
		{"unfinished", false, false, "Running", "warming 2 pod(s)", "", AATimedOut},
	} {
		got, reason := classifyAA(c.promoted, c.aborted, c.phase, c.msg, c.gate)
		if got != c.want {
			t.Errorf("%s: outcome %q, want %q", c.name, got, c.want)
		}
		if c.want == AAGateAborted && reason != c.gate {
			t.Errorf("%s: reason %q, want the gate's event", c.name, reason)
		}
	}
}

func TestFillWarmupFigures(t *testing.T) {
	limit := func(s time.Duration) time.Duration { return max(2*s, s+5*time.Millisecond) }
	// Promoted: the canary p99 is the median of the status's last windows.
	st := &warmupstep.Status{Requests: 2900, Converged: 2, Pods: []warmupstep.PodProgress{{Name: "a"}, {Name: "b"}},
		StableP99: "6.1ms", Trend: []string{"5.9ms", "6.3ms", "5.2ms", "40ms", "6.1ms", "5.5ms"}}
	var run AARun
	fillWarmupFigures(&run, st, "warm-up converged", 1000, limit)
	if run.Pods != 2 || run.RequestsPerPod != 1450 || run.StopRatio != 1.45 {
		t.Errorf("pods %d, per pod %d, stop ratio %g; want 2, 1450, 1.45", run.Pods, run.RequestsPerPod, run.StopRatio)
	}
	if run.CanaryP99 != 6000*time.Microsecond || run.StableP99 != 6100*time.Microsecond || run.Limit != 12200*time.Microsecond {
		t.Errorf("canary %s, stable %s, limit %s; want 6ms (median), 6.1ms, 12.2ms", run.CanaryP99, run.StableP99, run.Limit)
	}
	// Rejected: the figures are the ones the rejection names.
	run = AARun{}
	fillWarmupFigures(&run, &warmupstep.Status{Requests: 4800, Pods: []warmupstep.PodProgress{{}, {}}, StableP99: "5ms", Trend: []string{"9ms"}}, aaRejection, 1000, limit)
	if run.CanaryP99 != 12400*time.Microsecond || run.StableP99 != 5400*time.Microsecond {
		t.Errorf("rejected: canary %s, stable %s; want 12.4ms and 5.4ms from the message", run.CanaryP99, run.StableP99)
	}
	// No status (the plugin kept none): no figures, no panic.
	run = AARun{}
	fillWarmupFigures(&run, nil, "", 1000, limit)
	if run.RequestsPerPod != 0 || run.MinStop != 1000 {
		t.Errorf("no status: %+v", run)
	}
}

func TestAATallyAndReport(t *testing.T) {
	runs := []AARun{
		{Index: 1, Version: "aa-01", Outcome: AAPromoted, WarmupPhase: "Successful", RequestsPerPod: 1400, StopRatio: 1.4, CanaryP99: 6 * time.Millisecond, StableP99: 5 * time.Millisecond, Limit: 10 * time.Millisecond, Elapsed: 80 * time.Second},
		{Index: 2, Version: "aa-02", Outcome: AARejected, Reason: aaRejection, RequestsPerPod: 2400, StopRatio: 2.4, CanaryP99: 12400 * time.Microsecond, StableP99: 5400 * time.Microsecond, Limit: 10800 * time.Microsecond, Elapsed: 60 * time.Second},
		{Index: 3, Version: "aa-03", Outcome: AAPromoted, WarmupPhase: "Successful", RequestsPerPod: 1000, StopRatio: 1.0, CanaryP99: 5 * time.Millisecond, StableP99: 5 * time.Millisecond, Limit: 10 * time.Millisecond, Elapsed: 100 * time.Second},
	}
	// A warm-up that failed on an unreachable pod: no plateau, not judged.
	runs = append(runs, AARun{Index: 4, Version: "aa-04", Outcome: AAWarmupFailed, WarmupPhase: "Failed", CanaryP99: 2800 * time.Millisecond, StableP99: 100 * time.Millisecond, Limit: 200 * time.Millisecond, Elapsed: 60 * time.Second})
	res := &AAResult{Runs: runs, Tally: Tally(runs)}
	tl := res.Tally
	if tl.Runs != 4 || tl.Promoted != 2 || tl.Rejected != 2 || tl.ByOutcome[AARejected] != 1 || tl.ByOutcome[AAWarmupFailed] != 1 {
		t.Errorf("tally %+v", tl)
	}
	if tl.MedianStopRatio != 1.4 || tl.MaxStopRatio != 2.4 || tl.MedianElapsed != 70*time.Second || tl.MaxElapsed != 100*time.Second {
		t.Errorf("tally figures %+v", tl)
	}
	if want := 12.4 / 10.8; tl.MaxCanaryToLimit < want-1e-9 || tl.MaxCanaryToLimit > want+1e-9 {
		t.Errorf("closest to the limit %g, want %g", tl.MaxCanaryToLimit, want)
	}
	if s := res.Summary(); !strings.HasPrefix(s, "A/A: 2 of 4 rollouts of the same version rejected (goal NOT met): 1 rejected by warm-up, 1 warm-up failed") {
		t.Errorf("summary %q", s)
	}
	var b strings.Builder
	if err := WriteAAReport(&b, res); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if n := strings.Count(md, "\n| "); n != 4 { // header separator starts "|---"
		t.Errorf("%d table rows after the header, want 4:\n%s", n, md)
	}
	for _, want := range []string{"| 2 | aa-02 | rejected by warm-up | 2400 | 2.40 | 12.4ms | 5.40ms | 10.8ms | 2.30 |", "- run 2 (aa-02), rejected by warm-up: " + aaRejection} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	clean := &AAResult{Runs: []AARun{runs[0]}, Tally: Tally(runs[:1])}
	if s := clean.Summary(); !strings.HasPrefix(s, "A/A: 0 of 1 rollouts of the same version rejected (goal met: none rejected)") {
		t.Errorf("summary %q", s)
	}
	dir := t.TempDir()
	paths, err := WriteAAResults(dir, res)
	if err != nil || len(paths) != 2 {
		t.Fatalf("WriteAAResults: %v %v", paths, err)
	}
	var back AAResult
	js, _ := os.ReadFile(filepath.Join(dir, "aa.json"))
	if err := json.Unmarshal(js, &back); err != nil || len(back.Runs) != 4 || back.Tally.Rejected != 2 {
		t.Errorf("aa.json does not read back: %v %+v", err, back.Tally)
	}
}

// Each run counts the users' requests that started within it, and the
// failed ones among them.
func TestCountUsers(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)
	var samples []traffic.Sample
	for i := range 100 { // one a second; every 10th fails
		code := 200
		if i%10 == 0 {
			code = -1
		}
		samples = append(samples, traffic.Sample{Start: t0.Add(time.Duration(i) * time.Second), Code: code})
	}
	runs := []AARun{{Start: t0.Add(5 * time.Second), Elapsed: 20 * time.Second}, {Start: t0.Add(90 * time.Second), Elapsed: time.Minute}}
	countUsers(runs, samples)
	if runs[0].UserRequests != 20 || runs[0].UserErrors != 2 { // 5..24: 10 and 20 failed
		t.Errorf("run 1: %d requests, %d failed; want 20, 2", runs[0].UserRequests, runs[0].UserErrors)
	}
	if runs[1].UserRequests != 10 || runs[1].UserErrors != 1 { // 90..99 (the traffic ended): 90 failed
		t.Errorf("run 2: %d requests, %d failed; want 10, 1", runs[1].UserRequests, runs[1].UserErrors)
	}
}
