package scenario

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The control is danki's Rollout with one difference: where danki warms
// the new pods, it pauses as long (whole seconds, rounded up), before the
// first setWeight, so its pause is the hold the users are measured over.
func TestControlRollout(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "manifests", "danki", "30-rollout.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := controlRollout(raw, 94200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var ctl v1alpha1.Rollout
	if err := json.Unmarshal(js, &ctl); err != nil {
		t.Fatalf("the control is no Rollout: %v\n%s", err, js)
	}
	danki := readExample(t, "danki")
	steps := danki.Spec.Strategy.Canary.Steps
	warm := slices.IndexFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.Plugin != nil && s.Plugin.Name == "danki/warmup" })
	if warm < 0 {
		t.Fatal("danki's Rollout has no danki/warmup step")
	}
	got := ctl.Spec.Strategy.Canary.Steps
	if len(got) != len(steps) {
		t.Fatalf("control has %d steps, danki %d", len(got), len(steps))
	}
	if p := got[warm].Pause; p == nil || p.Duration == nil || *p.Duration != intstr.FromString("95s") || got[warm].Plugin != nil {
		t.Fatalf("control step %d = %+v, want pause 95s in place of the warm-up", warm, got[warm])
	}
	for i := range steps {
		if isHoldStep(got, int32(i)) != (i == warm) || isHoldStep(steps, int32(i)) != (i == warm) {
			t.Errorf("step %d: hold in control %t, in danki %t; want only step %d", i, isHoldStep(got, int32(i)), isHoldStep(steps, int32(i)), warm)
		}
	}
	ctl.Spec.Strategy.Canary.Steps[warm] = steps[warm]
	if !equality.Semantic.DeepEqual(ctl.Spec, danki.Spec) || ctl.Name != danki.Name {
		t.Errorf("control differs from danki beyond the warm-up step:\n%+v\n%+v", ctl.Spec, danki.Spec)
	}
	if _, err := controlRollout(raw, 0); err == nil {
		t.Error("a pause of 0 accepted")
	}
	if _, err := controlRollout([]byte("spec: {strategy: {canary: {steps: [{setWeight: 20}]}}}"), time.Second); err == nil {
		t.Error("a Rollout without danki/warmup accepted")
	}
}

// A pause after a setWeight holds users on the canary, not the new pods at
// weight 0: not a hold step (the baseline's pauses).
func TestIsHoldStep(t *testing.T) {
	w := int32(20)
	steps := []v1alpha1.CanaryStep{{SetCanaryScale: &v1alpha1.SetCanaryScale{}}, {Pause: &v1alpha1.RolloutPause{}}, {SetWeight: &w}, {Pause: &v1alpha1.RolloutPause{}}}
	for i, want := range []bool{false, true, false, false} {
		if got := isHoldStep(steps, int32(i)); got != want {
			t.Errorf("step %d: hold %t, want %t", i, got, want)
		}
	}
	if isHoldStep(steps, -1) || isHoldStep(steps, 4) {
		t.Error("an index outside the steps is a hold step")
	}
	var r Run
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r.noteStep(steps, -1, 0, t0)
	r.noteStep(steps, 0, 1, t0.Add(2*time.Second))
	r.noteStep(steps, 1, 2, t0.Add(62*time.Second))
	r.noteStep(steps, 2, 3, t0.Add(70*time.Second))
	if r.HoldDuration() != time.Minute || r.WarmupDuration() != 0 {
		t.Errorf("hold %s, warm-up %s; want 1m0s and none", r.HoldDuration(), r.WarmupDuration())
	}
}

// The bench's two Spring rollouts differ in the warm-up alone: the fixed
// count is what its name says (exactly 100 requests per pod, no
// convergence, no stable load), danki's is ../spring/'s config as it is,
// and each warms both canary pods before any user weight.
func TestSpringBenchExamples(t *testing.T) {
	warmup := func(ro v1alpha1.Rollout) (int, json.RawMessage) {
		steps := ro.Spec.Strategy.Canary.Steps
		i := slices.IndexFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.Plugin != nil && s.Plugin.Name == "danki/warmup" })
		if i < 0 {
			t.Fatalf("Rollout %s: no danki/warmup step", ro.Name)
		}
		return i, steps[i].Plugin.Config
	}
	fixed, danki, spring := readExample(t, "spring-fixed100"), readExample(t, "spring-danki"), readExample(t, "spring")
	for _, ro := range []v1alpha1.Rollout{fixed, danki} {
		i, _ := warmup(ro)
		steps := ro.Spec.Strategy.Canary.Steps
		weight := slices.IndexFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.SetWeight != nil })
		if i != 1 || steps[0].SetCanaryScale == nil || steps[0].SetCanaryScale.Replicas == nil || *steps[0].SetCanaryScale.Replicas != *ro.Spec.Replicas || weight < i {
			t.Errorf("%s: steps %+v: want setCanaryScale to all %d replicas, then the warm-up, before any setWeight", ro.Name, steps, *ro.Spec.Replicas)
		}
		if slices.ContainsFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.Analysis != nil }) {
			t.Errorf("%s: an analysis step (source: load warms the canary too)", ro.Name)
		}
	}
	_, springCfg := warmup(spring)
	_, dankiCfg := warmup(danki)
	if !equality.Semantic.DeepEqual(jsonValue(t, springCfg), jsonValue(t, dankiCfg)) {
		t.Errorf("spring-danki's warm-up %s differs from lab/manifests/spring's %s", dankiCfg, springCfg)
	}
	i, fixedCfg := warmup(fixed)
	c, err := warmupstep.ParseStepConfig(fixedCfg, policy.Local())
	if err != nil {
		t.Fatalf("danki/warmup refuses the fixed count's config: %v", err)
	}
	if want, _ := c.WantsStable(); c.Converging() || c.MaxRequests != 100 || want {
		t.Errorf("converging %t, maxRequests %d, loads stable %t; want a fixed count of 100 and no stable load", c.Converging(), c.MaxRequests, want)
	}
	fixed.Spec.Strategy.Canary.Steps[i] = danki.Spec.Strategy.Canary.Steps[i]
	if !equality.Semantic.DeepEqual(fixed.Spec, danki.Spec) {
		t.Errorf("spring-fixed100 differs from spring-danki beyond the warm-up:\n%+v\n%+v", fixed.Spec, danki.Spec)
	}
	// The rest of the Rollout is lab/manifests/spring's.
	if !equality.Semantic.DeepEqual(danki.Spec.Template, spring.Spec.Template) || !equality.Semantic.DeepEqual(danki.Spec.Strategy.Canary.TrafficRouting, spring.Spec.Strategy.Canary.TrafficRouting) {
		t.Error("spring-danki's pod template or traffic routing differs from lab/manifests/spring's")
	}
}

func jsonValue(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
