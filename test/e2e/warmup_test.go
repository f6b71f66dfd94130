package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestLabWarmupStep has the real Argo Rollouts controller run danki's
// danki/warmup step plugin (the danki binary, started over go-plugin) against
// a really cold JVM canary pod before it gets any weight: the step must
// succeed with the first window's p99 far above the last, and only then may
// the rollout reach setWeight 50.
func TestLabWarmupStep(t *testing.T) {
	l := startLab(t)
	ctx := l.ctx
	lab := filepath.Join(l.root, "examples", "lab")
	l.apply(t, filepath.Join(lab, "10-services.yaml"), filepath.Join(lab, "20-gateway.yaml"),
		filepath.Join(lab, "danki-warmup", "30-rollout.yaml"))
	rollouts := l.argo.ArgoprojV1alpha1().Rollouts("default")
	l.waitHealthy(t, 2)

	t.Log("image → danki.dev/sample-app:v2")
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"danki.dev/sample-app:v2"}]`
	if _, err := rollouts.Patch(ctx, "app", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set image v2: %v", err)
	}
	var warm *v1alpha1.StepPluginStatus
	waitFor(t, ctx, 6*time.Minute, "danki/warmup step finished", func() (bool, string) {
		ro, err := rollouts.Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ro.Status.Abort {
			t.Fatalf("rollout aborted: %s", ro.Status.Message)
		}
		for i, s := range ro.Status.Canary.StepPluginStatuses {
			if s.Name == "danki/warmup" && s.Operation == v1alpha1.StepPluginOperationRun {
				if s.Phase == v1alpha1.StepPluginPhaseSuccessful || s.Phase == v1alpha1.StepPluginPhaseFailed {
					warm = &ro.Status.Canary.StepPluginStatuses[i]
					return true, ""
				}
				// While warming, the canary has no weight: users never see it cold.
				if w := ro.Status.Canary.Weights; w != nil && w.Canary.Weight != 0 {
					t.Fatalf("canary weight %d while danki/warmup is still %s", w.Canary.Weight, s.Phase)
				}
				return false, fmt.Sprintf("warm-up %s: %s", s.Phase, s.Status)
			}
		}
		return false, fmt.Sprintf("phase %s, step %v: %s", ro.Status.Phase, ptrVal(ro.Status.CurrentStepIndex), ro.Status.Message)
	})
	if warm.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("danki/warmup ended %s: %s", warm.Phase, warm.Message)
	}
	var status struct {
		Requests  int
		Converged int
		FirstP99  string
		LastP99   string
		P99Trend  []string `json:"p99Trend"`
		Message   string
	}
	if err := json.Unmarshal(warm.Status, &status); err != nil {
		t.Fatalf("danki/warmup status %s: %v", warm.Status, err)
	}
	t.Logf("warm-up: %s; p99 by window: %s", status.Message, strings.Join(status.P99Trend, " → "))
	first, err1 := time.ParseDuration(status.FirstP99)
	last, err2 := time.ParseDuration(status.LastP99)
	if err1 != nil || err2 != nil || status.Converged != 1 || status.Requests < 500 {
		t.Fatalf("danki/warmup status %s: want 1 converged pod, ≥ 500 requests (minRequests), first and last p99", warm.Status)
	}
	// The pod really was cold: its first window's p99 is well above its last
	// (measured here: 214 ms → 6 ms).
	if first < 3*last {
		t.Errorf("first window p99 %s is not ≥ 3× the last window's %s: the canary was not cold, or the warm-up did not measure it", first, last)
	}

	waitFor(t, ctx, 3*time.Minute, "Rollout paused at setWeight 50 after the warm-up", func() (bool, string) {
		ro, err := rollouts.Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		w := ro.Status.Canary.Weights
		return ro.Status.Phase == v1alpha1.RolloutPhasePaused && w != nil && w.Canary.Weight == 50,
			fmt.Sprintf("phase %s, step %v", ro.Status.Phase, ptrVal(ro.Status.CurrentStepIndex))
	})
}
