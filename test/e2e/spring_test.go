package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/traffic"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The Spring Boot lab example (lab/manifests/spring).
const (
	springRollout = "app-spring"
	springHost    = "spring.lab"
	springCanary  = "app-spring-canary"
	// springWarmStable is how many requests warm the two stable pods before
	// the rollout (≈ 6,000 each: issue 37 measured a Spring service's
	// windows reaching their plateau after 3,600–11,000 requests) at
	// springWarmQPS through the gateway; the users then stay at
	// springUserQPS.
	springWarmStable = 12000
	springWarmQPS    = 200
	springUserQPS    = 40
)

// TestLabSpringRollout is issue 37's lab end to end: the real Argo Rollouts
// controller rolls the Spring Boot sample app (examples/sample-app-spring,
// a JVM per pod that gets faster in JIT steps) v1 → v2 with danki/warmup at
// its defaults. The canary has no user weight until the warm-up ends; the
// warm-up converges against the stable pods loaded side by side (not on a
// flat stretch between two JIT steps: the stop comes after at least the
// rule's minimum, with the first window's p99 well above the last) and
// reads the JVM's own JIT signal from Spring's actuator; then
// danki/latency source: load finds the warm canary's p50 within 1.5 ×
// stable's, and the canary is ramped to 50 % and promoted.
func TestLabSpringRollout(t *testing.T) {
	var up bool
	t.Cleanup(func() {
		if up {
			assertNoJVM(t, "sample-app-spring.jar")
		}
	})
	l := startLab(t)
	up = true
	dir := filepath.Join(l.root, "lab", "manifests")
	l.apply(t, filepath.Join(dir, "20-gateway.yaml"), filepath.Join(dir, "spring"))
	rollouts := l.argo.ArgoprojV1alpha1().Rollouts("default")
	l.waitHealthy(t, springRollout, 2)

	// Stable is warm before the rollout, as a service that has served
	// users for a while is: the warm-up's reference is the warm answer.
	t.Logf("warming the two stable pods: %d requests at %d/s through the gateway (Host %s)", springWarmStable, springWarmQPS, springHost)
	headers := map[string]string{"Host": springHost}
	warm, err := traffic.StartTraffic(l.ctx, traffic.TrafficConfig{URL: gatewayURL, QPS: springWarmQPS, Connections: 8, Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-time.After(time.Duration(springWarmStable/springWarmQPS) * time.Second):
	case <-l.ctx.Done():
	}
	r := warm.Stop()
	t.Logf("stable warm-up through the gateway: %d requests (%.0f/s), %d errors", r.Requests, r.AchievedQPS, r.Errors)
	if float64(r.Errors) > 0.01*float64(r.Requests) || r.Requests < springWarmStable/2 {
		t.Fatalf("warming stable through the gateway: %d requests, %d errors: the Spring app or its route does not serve", r.Requests, r.Errors)
	}
	users, err := traffic.StartTraffic(l.ctx, traffic.TrafficConfig{URL: gatewayURL, QPS: springUserQPS, Connections: 4, Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		u := users.Stop()
		t.Logf("users during the test: %d requests, %d errors", u.Requests, u.Errors)
	})

	t.Log("image → danki.dev/sample-app-spring:v2")
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"danki.dev/sample-app-spring:v2"}]`
	if _, err := rollouts.Patch(l.ctx, springRollout, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set image v2: %v", err)
	}

	st, ro := l.awaitOneCanaryWarm(t, springRollout, springCanary, 8*time.Minute, "Spring")
	// Spring Boot's actuator serves the JIT's compile time where the
	// warm-up looks by default (/actuator/prometheus): the step read it.
	if !strings.Contains(st.Message, "JIT: used") {
		t.Errorf("the step's message does not say the JIT signal was used (Micrometer's jvm_compilation_time_ms_total at /actuator/prometheus): %s", st.Message)
	}
	hash := ro.Status.CurrentPodHash

	// Then the analysis (source: load, p50 ≤ 1.5 × stable's), the ramp to
	// 50 % and the promotion.
	l.waitRollout(t, "default", springRollout, 6*time.Minute, "the Spring canary promoted (Healthy, stable = canary)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("the good Spring version was aborted: %s", describe(ro))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == hash, describe(ro)
	})
	runs, err := l.argo.ArgoprojV1alpha1().AnalysisRuns("default").List(l.ctx, metav1.ListOptions{LabelSelector: "rollouts-pod-template-hash=" + hash})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 1 {
		t.Fatalf("%d AnalysisRuns for the Spring canary %s, want 1", len(runs.Items), hash)
	}
	run := &runs.Items[0]
	logRun(t, run)
	if run.Status.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("AnalysisRun %s is %s (%s): the warm good Spring version failed a p50 ratio SLO of 1.5", run.Name, run.Status.Phase, run.Status.Message)
	}
	if ms := loadMeasurement(run); ms == nil || !strings.Contains(strings.ToLower(ms.Metadata["summary"]+ms.Message+ms.Value), "p50") {
		t.Errorf("the measurement does not show the p50 it judged: %s", measurementLine(run))
	}
	if w, err := l.canaryWeight(springRollout, springCanary); err != nil || w != 0 {
		t.Errorf("after the promotion the canary weight is %d (%v): want 0, all users on the new stable", w, err)
	}
}
