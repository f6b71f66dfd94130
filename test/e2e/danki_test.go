package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/scenario"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// userQPS is the steady user traffic through the gateway during the test.
const userQPS = 80

// TestLabDankiRollout is danki end to end: the real Argo Rollouts
// controller runs all three danki plugins (the danki binary over go-plugin)
// on the lab's cold-starting JVM app behind a real Istio gateway, with
// Prometheus, while users send steady traffic. One lab, one Rollout
// (lab/manifests/danki), several versions rolled out in turn:
//
//   - a good version: warmed until converged at weight 0, ramped in
//     increments (Envoy's split follows each), analysed, promoted;
//   - a good version aborted mid-ramp, its danki.dev/ramp annotation
//     corrupted first: the abort never reads it, all users back on stable
//     at once (the analysis failure below aborts with the state intact);
//   - Prometheus stopped mid-ramp: the gate has no verdict, the weight never
//     rises, an event names the outage, after maxHold the weight goes back
//     to the last good one; Prometheus back: the rollout completes;
//   - a version the gate catches: back-off, then abort with an event;
//   - a version the analysis catches: AnalysisRun Failed, rollout aborted;
//   - a warm-up aborted: the load stops within a second;
//   - the step plugin process killed mid-warm-up: the rollout carries on;
//   - a warm-up that never converges: aborted before any user weight;
//   - the capacity check (#17): a good version passes and records its knee
//     on the Rollout; a version with the sample app's capacity knob fails
//     against that knee at weight 0; the same version without the check
//     passes warm-up and latency at user load (the knob does not show there).
func TestLabDankiRollout(t *testing.T) {
	l := startLab(t)
	dir := filepath.Join(l.root, "lab", "manifests")
	l.apply(t, filepath.Join(dir, "10-services.yaml"), filepath.Join(dir, "20-gateway.yaml"), filepath.Join(dir, "danki"))
	l.waitHealthy(t, "app", 2)
	waitFor(t, l.ctx, 2*time.Minute, "the gateway answers", func() (bool, string) {
		_, err := oneRequest(l.ctx, http.DefaultClient, 0)
		return err == nil, fmt.Sprint(err)
	})

	users, err := traffic.StartTraffic(l.ctx, traffic.TrafficConfig{URL: gatewayURL, QPS: userQPS, Connections: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r := users.Stop()
		t.Logf("user traffic: %d requests at %.0f of %.0f qps asked, %d failed", r.Requests, r.AchievedQPS, r.AskedQPS, r.Errors)
	})
	d := &dankiLab{lab: l, watch: watchTraffic(t, l.ctx, l.istio), start: time.Now()}
	d.warmup, d.env = exampleConfig(t, l)

	if t.Run("good version: warmed, ramped, analysed, promoted", d.goodVersion) {
		t.Run("danki's metrics in the lab's Prometheus, and the dashboard's queries", d.metricsAfterGoodVersion)
	}
	t.Run("abort mid-ramp with a corrupt ramp annotation: all users on stable at once", d.abortMidRamp)
	t.Run("Prometheus down mid-ramp: bounded hold, back to the last good weight, then completes", d.prometheusOutage)
	t.Run("slower version: rejected by the warm-up, no user request on it", d.slowerRejected)
	t.Run("slow version: the ramp's gate backs off, then aborts", d.gateBreach)
	t.Run("slow version: the analysis fails it and aborts", d.analysisFails)
	t.Run("abort during warm-up stops the load", d.abortWarmup)
	t.Run("step plugin killed mid-warm-up: the rollout carries on", d.pluginRestart)
	t.Run("warm-up that never converges: aborted before any weight", d.neverConverges)
	t.Run("STRICT: plaintext to a pod refused; mtls: off fails at once, naming PeerAuthentication", d.strictRefusesPlaintext)
	t.Run("capacity: a good version passes the check and records its knee", d.capacityGood)
	t.Run("capacity: a version with a lock (MAX_CONCURRENCY=1) fails the check at weight 0", d.capacityKnob)
	t.Run("capacity: the same version without the check passes warm-up and latency at user load", d.capacityKnobUnchecked)
	t.Run("danki's metrics counted the rejections, aborts and failures", d.metricsAfterFailures)
}

type dankiLab struct {
	*lab
	watch   *trafficWatch
	warmup  map[string]any  // the example's danki/warmup config
	env     []corev1.EnvVar // the example's app container environment
	version int
	start   time.Time // before the first rollout: the window of danki's metrics
}

// exampleConfig reads the danki/warmup step's config and the app
// container's environment from the Rollout as lab/manifests/danki has it.
func exampleConfig(t *testing.T, l *lab) (map[string]any, []corev1.EnvVar) {
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(l.ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	step := ro.Spec.Strategy.Canary.Steps[warmupStep].Plugin
	if step == nil || step.Name != "danki/warmup" {
		t.Fatalf("step %d of lab/manifests/danki is not danki/warmup", warmupStep)
	}
	var cfg map[string]any
	if err := json.Unmarshal(step.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, ro.Spec.Template.Spec.Containers[0].Env
}

// Step indexes in lab/manifests/danki/30-rollout.yaml.
const (
	warmupStep  = 1
	setWeight20 = 2
)

// deploy rolls out the next version (image tag v2, v3, …) with the sample
// app's environment (SLOW_MS, SLOW_PERCENT) and the warm-up config
// overridden by warm, and returns the version and when it started.
func (d *dankiLab) deploy(t *testing.T, env map[string]string, warm map[string]any) (string, time.Time) {
	t.Helper()
	d.version++
	version := fmt.Sprintf("v%d", d.version+1)
	cfg := map[string]any{}
	for k, v := range d.warmup {
		cfg[k] = v
	}
	for k, v := range warm {
		cfg[k] = v
	}
	// The example's own environment stays (e.g. the mesh identities the
	// sample app treats as warm-up); env adds to or overrides it.
	envList := []map[string]string{}
	for _, e := range d.env {
		if _, over := env[e.Name]; !over {
			envList = append(envList, map[string]string{"name": e.Name, "value": e.Value})
		}
	}
	for k, v := range env {
		envList = append(envList, map[string]string{"name": k, "value": v})
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "danki.dev/sample-app:" + version},
		{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": envList},
		{"op": "replace", "path": fmt.Sprintf("/spec/strategy/canary/steps/%d/plugin/config", warmupStep), "value": cfg},
	})
	t.Logf("rolling out %s (env %v, warm-up overrides %v)", version, env, warm)
	start := time.Now()
	if _, err := d.argo.ArgoprojV1alpha1().Rollouts("default").Patch(d.ctx, "app", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("roll out %s: %v", version, err)
	}
	// Wait until the controller has taken the new revision.
	d.waitRollout(t, "default", "app", time.Minute, version+" is the canary", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.ObservedGeneration == strconv.FormatInt(ro.Generation, 10) && canaryImage(ro) == version && ro.Status.CurrentPodHash != ro.Status.StableRS,
			fmt.Sprintf("phase %s, %s", ro.Status.Phase, ro.Status.Message)
	})
	return version, start
}

func canaryImage(ro *v1alpha1.Rollout) string {
	_, tag, _ := strings.Cut(ro.Spec.Template.Spec.Containers[0].Image, ":")
	return tag
}

func describe(ro *v1alpha1.Rollout) string {
	w := "-"
	if ws := ro.Status.Canary.Weights; ws != nil {
		w = fmt.Sprint(ws.Canary.Weight)
	}
	return fmt.Sprintf("phase %s, step %v, canary weight %s: %s", ro.Status.Phase, ptrVal(ro.Status.CurrentStepIndex), w, ro.Status.Message)
}

// warmupState is the danki/warmup Run status of the rollout's current
// canary, nil until the step has run for it.
type warmupState struct {
	Phase      v1alpha1.StepPluginPhase `json:"-"` // the step's phase and message
	Message    string                   `json:"-"`
	CanaryHash string                   `json:"canaryHash"`
	Requests   int                      `json:"requests"`
	Converged  int                      `json:"converged"`
	Restarts   int                      `json:"restarts"`
	FirstP99   string                   `json:"firstP99"`
	LastP99    string                   `json:"lastP99"`
	P99Trend   []string                 `json:"p99Trend"`
	Summary    string                   `json:"message"`
}

func warmupStatus(ro *v1alpha1.Rollout) *warmupState {
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Name != "danki/warmup" || s.Operation != v1alpha1.StepPluginOperationRun {
			continue
		}
		var st warmupState
		if len(s.Status) > 0 {
			_ = json.Unmarshal(s.Status, &st)
		}
		if st.CanaryHash != "" && st.CanaryHash != ro.Status.CurrentPodHash {
			continue
		}
		st.Phase, st.Message = s.Phase, s.Message
		return &st
	}
	return nil
}

// awaitWarmup waits for the warm-up step to end and checks that the canary
// had no user weight meanwhile.
func (d *dankiLab) awaitWarmup(t *testing.T, limit time.Duration) *warmupState {
	t.Helper()
	var st *warmupState
	d.waitRollout(t, "default", "app", limit, "danki/warmup finished", func(ro *v1alpha1.Rollout) (bool, string) {
		st = warmupStatus(ro)
		if st != nil && (st.Phase == v1alpha1.StepPluginPhaseSuccessful || st.Phase == v1alpha1.StepPluginPhaseFailed) {
			return true, ""
		}
		// Still warming: no user may reach the canary. (The VirtualService,
		// not the Rollout's status, which shows the weight Argo asked for.)
		if p, err := lookAtTraffic(d.ctx, d.istio); err == nil && p.canaryWeight != 0 {
			// Read again: the step may have finished since ro was read.
			now, err := d.argo.ArgoprojV1alpha1().Rollouts("default").Get(d.ctx, "app", metav1.GetOptions{})
			if err == nil {
				if st = warmupStatus(now); st != nil && st.Phase == v1alpha1.StepPluginPhaseSuccessful {
					return true, ""
				}
			}
			t.Fatalf("canary weight %d on the VirtualService before the warm-up finished: %s", p.canaryWeight, describe(ro))
		}
		if st == nil {
			return false, describe(ro)
		}
		return false, fmt.Sprintf("warm-up %s, %d requests: %s", st.Phase, st.Requests, st.Summary)
	})
	t.Logf("warm-up %s: %s; p99 by window: %s", st.Phase, st.Message, strings.Join(st.P99Trend, " → "))
	return st
}

func (d *dankiLab) goodVersion(t *testing.T) {
	_, start := d.deploy(t, nil, nil)
	st := d.awaitWarmup(t, 6*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("warm-up of a good version ended %s: %s", st.Phase, st.Message)
	}
	first, err1 := time.ParseDuration(st.FirstP99)
	last, err2 := time.ParseDuration(st.LastP99)
	// The lab example sets no stopping-rule fields: the defaults' earliest
	// stop applies to each of the two pods.
	defaults := warmup.Config{}.WithDefaults()
	minStop := int(defaults.MinStop())
	if err1 != nil || err2 != nil || st.Converged != 2 || st.Requests < 2*minStop {
		t.Fatalf("warm-up status %+v: want 2 converged pods and ≥ %d requests each (the stopping rule's minimum)", st, minStop)
	}
	// With sidecars the load went over Istio mTLS: the step names danki's
	// identity (the plugin's ServiceAccount argo-rollouts/danki, the lab's
	// plugin args) and the SPIFFE ID the pods proved.
	if d.meshed() {
		for _, id := range []string{"spiffe://cluster.local/ns/argo-rollouts/sa/danki", "spiffe://cluster.local/ns/default/sa/default"} {
			if !strings.Contains(st.Message, id) {
				t.Errorf("warm-up message %q does not name %s: the load did not go over Istio mTLS as danki", st.Message, id)
			}
		}
	}
	// The pods really were cold: the first window's p99 well above the last.
	if first < 3*last {
		t.Errorf("first window p99 %s is not ≥ 3× the last window's %s: the canary was not cold, or the warm-up did not measure it", first, last)
	}

	ro := d.waitRollout(t, "default", "app", 8*time.Minute, "the good version promoted (Healthy, stable = canary)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("the good version was aborted: %s; events: %s", describe(ro), d.events(t, ""))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash, describe(ro)
	})

	// The promotion's 100 → 0 lands around the moment Argo reports Healthy:
	// wait for it (an eventual state), never read it at one instant.
	seen := d.settledWeights(t, start, 0, 30*time.Second, "after the promotion, canary weight 0 on the VirtualService (all users on the new stable)")
	st2 := steps(d.watch.since(start))
	t.Logf("canary weights on the VirtualService: %s", fmtWeights(seen))
	logSplit(t, st2)
	// The ramp climbed the rungs (10, 20 | 30, 45, 60 | 80, 100), never
	// jumping more than one rung, then the promotion moved everyone to the
	// new stable (canary weight 0).
	var rise []int32
	for i, w := range seen {
		if i == len(seen)-1 && w == 0 {
			break
		}
		if len(rise) > 0 && w-rise[len(rise)-1] > 20 {
			t.Errorf("the canary weight jumped %d → %d: want ramp increments of at most one rung", rise[len(rise)-1], w)
		}
		rise = append(rise, w)
	}
	for _, want := range []int32{10, 20, 30, 60, 100} {
		if !slices.Contains(rise, want) {
			t.Errorf("the ramp never held canary weight %d%% (weights %s)", want, fmtWeights(seen))
		}
	}
	d.checkAnalysis(t, ro.Status.CurrentPodHash, v1alpha1.AnalysisPhaseSuccessful)
}

// checkAnalysis finds the danki/latency AnalysisRun of the canary and
// checks its phase.
func (d *dankiLab) checkAnalysis(t *testing.T, hash string, want v1alpha1.AnalysisPhase) {
	t.Helper()
	runs, err := d.argo.ArgoprojV1alpha1().AnalysisRuns("default").List(d.ctx, metav1.ListOptions{LabelSelector: "rollouts-pod-template-hash=" + hash})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 1 {
		t.Fatalf("%d AnalysisRuns for canary %s, want 1", len(runs.Items), hash)
	}
	ar := runs.Items[0]
	for _, m := range ar.Status.MetricResults {
		for _, ms := range m.Measurements {
			t.Logf("AnalysisRun %s, metric %s: %s %s", ar.Name, m.Name, ms.Phase, ms.Metadata["summary"])
		}
	}
	if ar.Status.Phase != want {
		t.Fatalf("AnalysisRun %s is %s (%s), want %s", ar.Name, ar.Status.Phase, ar.Status.Message, want)
	}
}

// abortMidRamp aborts a ramp whose danki.dev/ramp annotation was first
// corrupted, as a half-written one would be: one reconcile puts every user
// on stable, whatever the annotation holds, and clears it.
func (d *dankiLab) abortMidRamp(t *testing.T) {
	// A short warm-up: this version is aborted right after its first rung.
	_, start := d.deploy(t, nil, map[string]any{"minRequests": 600})
	d.awaitWarmup(t, 6*time.Minute)
	d.watchSees(t, start, 3*time.Minute, "the ramp gives the canary users")
	d.corruptRampState(t)
	took := d.abortUntilZero(t)
	t.Logf("abort with a corrupt ramp annotation → canary weight 0 on the VirtualService in %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the abort took %s to put all users on stable: want at once (one reconcile, whatever the ramp annotation holds), not ramped", took)
	}
	seen := d.settledWeights(t, start, 0, 10*time.Second, "the traffic watch sees canary weight 0")
	t.Logf("canary weights: %s", fmtWeights(seen))
	if n := len(seen); n < 3 || seen[n-2] == 0 {
		t.Errorf("canary weights %s: want a straight drop from the ramp's weight to 0", fmtWeights(seen))
	}
	waitFor(t, d.ctx, 30*time.Second, "the abort cleared the ramp annotation", func() (bool, string) {
		raw, _ := d.rampState(t)
		return raw == "", "annotation " + raw
	})
	// Envoy follows: after istiod's push no user request reaches the canary.
	time.Sleep(2 * time.Second)
	before, _ := lookAtTraffic(d.ctx, d.istio)
	time.Sleep(3 * time.Second)
	after, _ := lookAtTraffic(d.ctx, d.istio)
	if after.canary != before.canary || after.stable-before.stable < 100 {
		t.Errorf("after the abort Envoy sent %d requests to the canary and %d to stable in 3 s: want 0 and all", after.canary-before.canary, after.stable-before.stable)
	}
	d.waitRollout(t, "default", "app", time.Minute, "the rollout is Degraded (aborted)", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Phase == v1alpha1.RolloutPhaseDegraded && ro.Status.Abort, describe(ro)
	})
}

func abortRollout(t *testing.T, l *lab) time.Time {
	t.Helper()
	at := time.Now()
	// What `kubectl argo rollouts abort` does.
	if _, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Patch(l.ctx, "app", types.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	t.Log("rollout aborted (status.abort)")
	return at
}

// events lists the Warning events on the Rollout (with the given reason, or
// all), oldest first.
func (d *dankiLab) events(t *testing.T, reason string) string {
	t.Helper()
	sel := "involvedObject.name=app,type=Warning"
	if reason != "" {
		sel += ",reason=" + reason
	}
	evs, err := d.kube.CoreV1().Events("default").List(d.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "\n  %s %s: %s", e.LastTimestamp.Format(time.TimeOnly), e.Reason, e.Message)
	}
	return b.String()
}

func (d *dankiLab) slowerRejected(t *testing.T) {
	// 5 % of requests take a second, the warm-up as the example configures
	// it: the version settles far above stable and the warm-up rejects it
	// before any user request reaches it (counted at Envoy: the canary
	// Service's cluster; the warm-up goes to pod IPs directly).
	// The count starts once Envoy has the weight-0 route too: the
	// VirtualService shows 0 up to half a second before istiod's push
	// reaches Envoy, and the previous rollout's last requests to the canary
	// cluster (its pods, now stable) must not count against this version.
	var before trafficPoint
	waitFor(t, d.ctx, 30*time.Second, "canary weight 0 before the rollout, Envoy's canary counter still for "+settleTime.String(), func() (bool, string) {
		p, err := lookAtTraffic(d.ctx, d.istio)
		if err != nil || p.canaryWeight != 0 {
			before = trafficPoint{}
			return false, fmt.Sprintf("canary weight %d %v", p.canaryWeight, err)
		}
		if before.at.IsZero() || p.canary != before.canary {
			before = p
			return false, fmt.Sprintf("canary weight 0, Envoy's canary counter at %d", p.canary)
		}
		return p.at.Sub(before.at) >= settleTime, fmt.Sprintf("canary weight 0, Envoy's canary counter at %d for %s", p.canary, p.at.Sub(before.at).Round(100*time.Millisecond))
	})
	_, start := d.deploy(t, map[string]string{"SLOW_MS": "1000", "SLOW_PERCENT": "5"}, nil)
	st := d.awaitWarmup(t, 6*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseFailed || !strings.Contains(st.Message, "a slower version, rejected") || !strings.Contains(st.Message, "× stable's") {
		t.Fatalf("warm-up of a version 5%% of whose requests take a second ended %s: %s", st.Phase, st.Message)
	}
	t.Logf("warm-up: %s", st.Message)
	d.abortedAtWeightZero(t, start, "the rejected version")
	after, err := lookAtTraffic(d.ctx, d.istio)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("user requests Envoy sent to the canary cluster during the rollout: %d", after.canary-before.canary)
	if after.canary != before.canary {
		t.Errorf("%d user requests reached the rejected version", after.canary-before.canary)
	}
}

func (d *dankiLab) gateBreach(t *testing.T) {
	// 5 % of requests take a second: with the warm-up's rejection off, it
	// converges (the version is steadily bad), and the gate (p99 ≤ 500ms)
	// fails at the first rung.
	_, start := d.deploy(t, map[string]string{"SLOW_MS": "1000", "SLOW_PERCENT": "5"}, map[string]any{"rejectSlowerVersion": false})
	if st := d.awaitWarmup(t, 6*time.Minute); st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("warm-up ended %s: %s", st.Phase, st.Message)
	}
	d.waitRollout(t, "default", "app", 5*time.Minute, "the ramp's gate aborts the rollout", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, describe(ro)
	})
	seen := d.settledWeights(t, start, 0, 30*time.Second, "canary weight 0")
	t.Logf("canary weights: %s", fmtWeights(seen))
	// Up a rung, a breach: back off to the last good weight, a smaller move,
	// breach again: aborted — typically 0 → 10 → 0 → 5 → 0. The gate judges
	// ~100 canary requests at 10 %: with 5 % of them slow, a window with
	// fewer than two slow ones (~4 % of windows) passes the rung, so the
	// ramp may climb one more before the breaches; it never passes the
	// step's setWeight 20, and it must back off before the abort.
	backedOff := false
	for i := 1; i < len(seen)-1; i++ {
		backedOff = backedOff || seen[i] < seen[i-1]
	}
	if len(seen) < 4 || seen[1] != 10 || slices.Max(seen) > 20 || !backedOff {
		t.Errorf("canary weights %s: want 0 → 10 (→ 20) → a back-off → (smaller move) → 0", fmtWeights(seen))
	}
	ev := d.events(t, "DankiRampFailed")
	t.Logf("events:%s", ev)
	if !regexp.MustCompile(`aborted the rollout: ramp failed: .*gate breach 2/2 at \d+%: Fail: p99 \S+ > 500ms SLO`).MatchString(ev) {
		t.Errorf("no DankiRampFailed event naming the p99 breach; events:%s", ev)
	}
	// The operator hears of it: the chart's alert on an abort (no for:).
	alertFires(t, d.lab, "DankiRampAborted", time.Minute)
}

func (d *dankiLab) analysisFails(t *testing.T) {
	// 10 % of requests take 200 ms: p99 (~235 ms, interpolated in Envoy's
	// 100–250 ms bucket) far under the gate's 500 ms even on a busy machine
	// (300 ms once got past 500 ms there), far above the analysis' 150 ms.
	d.deploy(t, map[string]string{"SLOW_MS": "200", "SLOW_PERCENT": "10"}, map[string]any{"rejectSlowerVersion": false})
	if st := d.awaitWarmup(t, 6*time.Minute); st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("warm-up ended %s: %s", st.Phase, st.Message)
	}
	ro := d.waitRollout(t, "default", "app", 5*time.Minute, "the analysis aborts the rollout", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, describe(ro)
	})
	// The analysis step aborted it (the gate, p99 ≤ 500ms, let it through).
	if !strings.Contains(ro.Status.Message, `Step-based analysis phase error/failed: Metric "tail-latency" assessed Failed`) ||
		!strings.Contains(ro.Status.Message, "> 150ms SLO") {
		t.Errorf("rollout message %q: want the failed tail-latency metric and its breach", ro.Status.Message)
	}
	d.checkAnalysis(t, ro.Status.CurrentPodHash, v1alpha1.AnalysisPhaseFailed)
	waitFor(t, d.ctx, 30*time.Second, "canary weight 0", func() (bool, string) {
		p, err := lookAtTraffic(d.ctx, d.istio)
		return err == nil && p.canaryWeight == 0, fmt.Sprintf("canary weight %d %v", p.canaryWeight, err)
	})
}

func (d *dankiLab) abortWarmup(t *testing.T) {
	// A warm-up that would run for minutes.
	d.deploy(t, nil, map[string]any{"minRequests": 100000, "maxRequests": 200000})
	ro := d.waitRollout(t, "default", "app", 3*time.Minute, "danki/warmup running", func(ro *v1alpha1.Rollout) (bool, string) {
		st := warmupStatus(ro)
		return st != nil && st.Phase == v1alpha1.StepPluginPhaseRunning, describe(ro)
	})
	var n0 int64
	waitFor(t, d.ctx, 2*time.Minute, "warm-up load on the canary pods", func() (bool, string) {
		n, err := d.servedRequests("default", ro.Status.CurrentPodHash, nil)
		n0 = n
		return err == nil && n > 500, fmt.Sprintf("%d requests %v", n, err)
	})
	abortedAt := abortRollout(t, d.lab)
	// Watch the canary pods' request counters (only warm-up requests reach
	// them: their weight is 0) until they stay still for 3 s.
	last, lastChange := n0, abortedAt
	for time.Since(lastChange) < 3*time.Second {
		n, err := d.servedRequests("default", ro.Status.CurrentPodHash, nil)
		if err != nil {
			t.Fatalf("read the canary pods' request counters: %v", err)
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	stoppedAfter := lastChange.Sub(abortedAt)
	t.Logf("abort → warm-up load stopped after %s (last canary request counted %s after the abort; %d warm-up requests in all)",
		stoppedAfter.Round(time.Millisecond), stoppedAfter.Round(time.Millisecond), last)
	if stoppedAfter > time.Second {
		t.Errorf("the warm-up load went on %s after the abort: want under a second", stoppedAfter.Round(time.Millisecond))
	}
}

func (d *dankiLab) pluginRestart(t *testing.T) {
	d.deploy(t, nil, nil)
	ro := d.waitRollout(t, "default", "app", 3*time.Minute, "danki/warmup running", func(ro *v1alpha1.Rollout) (bool, string) {
		st := warmupStatus(ro)
		return st != nil && st.Phase == v1alpha1.StepPluginPhaseRunning, describe(ro)
	})
	// Kill it early in the warm-up (minRequests is 1,500 per pod).
	waitFor(t, d.ctx, 2*time.Minute, "warm-up load on the canary pods", func() (bool, string) {
		n, err := d.servedRequests("default", ro.Status.CurrentPodHash, nil)
		return err == nil && n > 300, fmt.Sprintf("%d requests %v", n, err)
	})
	pid := stepPluginPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the danki/warmup plugin process %d: %v", pid, err)
	}
	t.Logf("killed the danki/warmup plugin process %d mid-warm-up", pid)
	st := d.awaitWarmup(t, 6*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful || st.Restarts < 1 {
		t.Fatalf("warm-up after the plugin restart: %s, %d restarts: %s", st.Phase, st.Restarts, st.Message)
	}
	if pid2 := stepPluginPID(t); pid2 == pid {
		t.Fatalf("the danki/warmup plugin process is still %d", pid)
	}
	d.waitRollout(t, "default", "app", 3*time.Minute, "the rollout went on to setWeight 20", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("aborted: %s", describe(ro))
		}
		i := ro.Status.CurrentStepIndex
		return i != nil && *i > setWeight20, describe(ro)
	})
}

// stepPluginPID finds the controller's danki/warmup plugin process (Argo
// copies each plugin to plugin-bin/<name>).
func stepPluginPID(t *testing.T) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		exe, err := os.Readlink(p)
		if err == nil && strings.HasSuffix(exe, "/plugin-bin/danki/warmup") {
			pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
			return pid
		}
	}
	t.Fatal("no danki/warmup plugin process (plugin-bin/danki/warmup) is running")
	return 0
}

func (d *dankiLab) neverConverges(t *testing.T) {
	// Slow in 10 % of requests, compared with stable: the canary's p99 never
	// comes within 1.5× of stable's, so the warm-up fails at its cap.
	_, start := d.deploy(t, map[string]string{"SLOW_MS": "300", "SLOW_PERCENT": "10"},
		map[string]any{"compareToStable": true, "stableRatio": 1.5, "minRequests": 1000, "maxRequests": 2000})
	st := d.awaitWarmup(t, 6*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseFailed || !strings.Contains(st.Message, "p99") {
		t.Fatalf("warm-up of a version that never gets near stable ended %s: %s", st.Phase, st.Message)
	}
	d.abortedAtWeightZero(t, start, "a canary that never warmed up")
}

// strictRefusesPlaintext: with STRICT sidecars, danki's mTLS cannot be
// bypassed. A plaintext request to a pod's app port is refused by its
// sidecar, and a warm-up told `mtls: off` fails at once (not at its health
// timeout) with a message naming PeerAuthentication STRICT and the mtls
// setting; the rollout aborts at weight 0.
func (d *dankiLab) strictRefusesPlaintext(t *testing.T) {
	if d.mesh != scenario.MeshStrict {
		t.Skipf("LAB_MESH=%s: no STRICT sidecar to refuse plaintext", d.mesh)
	}
	pods := runningPods(t, d.lab, "app=sample-app")
	if len(pods) == 0 {
		t.Fatal("no running sample-app pod")
	}
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	for _, p := range pods {
		resp, body, err := send(d.ctx, plain, http.MethodGet, "http://"+p.Status.PodIP+":8080/", "", nil)
		if err == nil {
			t.Errorf("plaintext GET to pod %s's app port 8080 answered %d %.100s: STRICT must refuse it", p.Name, resp.StatusCode, body)
			continue
		}
		t.Logf("plaintext GET to pod %s:8080 refused: %v", p.Name, err)
	}

	_, start := d.deploy(t, nil, map[string]any{"mtls": "off"})
	st := d.awaitWarmup(t, 3*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseFailed {
		t.Fatalf("warm-up with mtls: off against STRICT pods ended %s: %s", st.Phase, st.Message)
	}
	for _, want := range []string{"STRICT", "PeerAuthentication", "mtls"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("warm-up failure %q does not name %s", st.Message, want)
		}
	}
	if strings.Contains(st.Message, "healthTimeout") {
		t.Errorf("warm-up failure %q waited out healthTimeout instead of giving up at the reset", st.Message)
	}
	d.abortedAtWeightZero(t, start, "a canary danki could not reach")
}

// abortedAtWeightZero waits for the rollout started at start to be
// aborted, and checks that its canary (what) never had a user weight. The
// weights before the first 0 belong to the previous canary (the one this
// version replaced mid-rollout); from then on they are this one's.
func (d *dankiLab) abortedAtWeightZero(t *testing.T, start time.Time, what string) {
	t.Helper()
	d.waitRollout(t, "default", "app", time.Minute, "the rollout aborted", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, describe(ro)
	})
	seen := d.settledWeights(t, start, 0, 30*time.Second, "canary weight 0")
	first0 := slices.Index(seen, 0)
	if first0 < 0 || slices.Max(seen[first0:]) != 0 {
		t.Errorf("canary weights %s: %s got users", fmtWeights(seen), what)
	}
}

// settledWeights waits until the traffic watch has seen the VirtualService
// at want (an eventual state: the last move may land after the Rollout's
// status says it is done) and returns the distinct canary weights seen since
// start.
func (d *dankiLab) settledWeights(t *testing.T, start time.Time, want int32, limit time.Duration, what string) []int32 {
	t.Helper()
	var seen []int32
	waitFor(t, d.ctx, limit, what, func() (bool, string) {
		seen = d.watch.weightsSince(start)
		return len(seen) > 0 && seen[len(seen)-1] == want, "canary weights " + fmtWeights(seen)
	})
	return seen
}

// abortUntilZero aborts the rollout and returns how long the
// VirtualService took to show canary weight 0 (polled until 30 s).
func (d *dankiLab) abortUntilZero(t *testing.T) time.Duration {
	t.Helper()
	abortedAt := abortRollout(t, d.lab)
	var zeroAt time.Time
	waitFor(t, d.ctx, 30*time.Second, "canary weight 0 on the VirtualService", func() (bool, string) {
		p, err := lookAtTraffic(d.ctx, d.istio)
		if err == nil && p.canaryWeight == 0 {
			zeroAt = p.at
			return true, ""
		}
		return false, fmt.Sprintf("canary weight %d %v", p.canaryWeight, err)
	})
	return zeroAt.Sub(abortedAt)
}

// watchSees waits until the traffic watch has recorded a canary weight
// above 0 since start. A phase that aborts at the first rung waits for the
// watch itself, not for its own look at the VirtualService: a rung the abort
// ends within a second may be gone before the phase looks, and the phase
// could not tell a straight drop from no rung at all.
func (d *dankiLab) watchSees(t *testing.T, start time.Time, limit time.Duration, what string) {
	t.Helper()
	waitFor(t, d.ctx, limit, what, func() (bool, string) {
		seen := d.watch.weightsSince(start)
		return slices.ContainsFunc(seen, func(w int32) bool { return w > 0 }), "canary weights " + fmtWeights(seen)
	})
}

// waitCanaryWeight polls the VirtualService every 100 ms (waitFor's 1 s is
// too coarse to catch the ramp's first rung) until cond holds for its canary
// weight, and returns that weight.
func (d *dankiLab) waitCanaryWeight(t *testing.T, limit time.Duration, what string, cond func(int32) bool) int32 {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		p, err := lookAtTraffic(d.ctx, d.istio)
		if err == nil && cond(p.canaryWeight) {
			return p.canaryWeight
		}
		if time.Now().After(deadline) || d.ctx.Err() != nil {
			t.Fatalf("%s: not reached after %s; canary weight %d %v", what, limit, p.canaryWeight, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rampState reads the danki.dev/ramp annotation on the lab's VirtualService.
func (d *dankiLab) rampState(t *testing.T) (raw string, st struct {
	Weight   int32 `json:"weight"`
	LastGood int32 `json:"lastGood"`
}) {
	t.Helper()
	vs, err := d.istio.NetworkingV1().VirtualServices("default").Get(d.ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw = vs.Annotations["danki.dev/ramp"]
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("ramp annotation %q: %v", raw, err)
		}
	}
	return raw, st
}

// corruptRampState writes the ramp annotation as a half-written one would
// read.
func (d *dankiLab) corruptRampState(t *testing.T) {
	t.Helper()
	const corrupt = `{"target":20,"weight":`
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vs, err := d.istio.NetworkingV1().VirtualServices("default").Get(d.ctx, "app", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if vs.Annotations == nil {
			vs.Annotations = map[string]string{}
		}
		vs.Annotations["danki.dev/ramp"] = corrupt
		_, err = d.istio.NetworkingV1().VirtualServices("default").Update(d.ctx, vs, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("corrupt the ramp annotation: %v", err)
	}
	t.Logf("wrote the ramp annotation %s", corrupt)
}

// outageMaxHold is the phase's ramp.maxHold: short, so the phase is.
const outageMaxHold = 20 * time.Second

func (d *dankiLab) prometheusOutage(t *testing.T) {
	// This phase's Rollout: a short maxHold, and one breach more than the
	// example's 2 (the outage counts one; a slow first answer after the
	// restart must not abort the good version).
	restore := d.patchRamp(t, map[string]any{"maxHold": outageMaxHold.String(), "maxBreaches": 3})
	defer restore()
	_, start := d.deploy(t, nil, nil)
	if st := d.awaitWarmup(t, 6*time.Minute); st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("warm-up ended %s: %s", st.Phase, st.Message)
	}
	// The first rung needs no verdict (0 % is known good); the gate judges
	// it from the next call on: stop Prometheus at once.
	d.waitCanaryWeight(t, 3*time.Minute, "the ramp's first rung", func(w int32) bool { return w > 0 })
	stoppedAt := d.stopPrometheus(t)
	down := true
	defer func() {
		if down { // a failed phase must not leave the next ones without Prometheus
			d.startPrometheus(t)
		}
	}()
	// A verdict computed just before the stop may still land: the state 2 s
	// after the stop is the one the outage holds.
	time.Sleep(2 * time.Second)
	_, held := d.rampState(t)
	t.Logf("Prometheus stopped; the ramp is at %d%% (last good %d%%)", held.Weight, held.LastGood)
	if held.Weight == held.LastGood {
		t.Fatalf("the gate passed %d%% before Prometheus stopped: the phase needs a weight it has not judged yet", held.Weight)
	}
	ev := ""
	waitFor(t, d.ctx, 40*time.Second, "a DankiGateNoVerdict event naming the outage", func() (bool, string) {
		ev = d.events(t, "DankiGateNoVerdict")
		return outageEvent.MatchString(ev), "events:" + ev
	})
	t.Logf("events:%s", ev)
	var backAt time.Time
	waitFor(t, d.ctx, outageMaxHold+40*time.Second, fmt.Sprintf("back at the last good weight %d%% after maxHold %s", held.LastGood, outageMaxHold), func() (bool, string) {
		p, err := lookAtTraffic(d.ctx, d.istio)
		if err == nil && p.canaryWeight == held.LastGood {
			backAt = p.at
			return true, ""
		}
		return false, fmt.Sprintf("canary weight %d %v", p.canaryWeight, err)
	})
	// (The hold may have begun just before the stop, on a first
	// Inconclusive answer: the back-off time is logged, not asserted.)
	t.Logf("back at %d%% %s after the stop (maxHold %s)", held.LastGood, backAt.Sub(stoppedAt).Round(100*time.Millisecond), outageMaxHold)
	// Still down for one more interval: the ramp must not climb again on
	// no verdict.
	time.Sleep(12 * time.Second)
	during := d.watch.since(stoppedAt.Add(2 * time.Second))
	for _, p := range during {
		if p.canaryWeight > held.Weight {
			t.Errorf("while Prometheus was down the canary weight rose to %d%% (held at %d%%)", p.canaryWeight, held.Weight)
			break
		}
	}
	if last := during[len(during)-1]; last.canaryWeight != held.LastGood {
		t.Errorf("with Prometheus still down the canary weight is %d%%, want the last good %d%%", last.canaryWeight, held.LastGood)
	}
	if ev := d.events(t, "DankiGateNoVerdict"); !strings.Contains(ev, "no verdict for") {
		t.Errorf("no DankiGateNoVerdict event names the back-off after maxHold; events:%s", ev)
	}
	d.startPrometheus(t)
	down = false
	restartedAt := time.Now()
	ro := d.waitRollout(t, "default", "app", 8*time.Minute, "the version promoted after the outage (Healthy, stable = canary)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("aborted after the outage: %s; events: %s", describe(ro), d.events(t, ""))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash, describe(ro)
	})
	seen := d.settledWeights(t, start, 0, 30*time.Second, "after the promotion, canary weight 0 on the VirtualService")
	t.Logf("canary weights: %s (Prometheus down %s, promoted %s after its restart)", fmtWeights(seen),
		restartedAt.Sub(stoppedAt).Round(time.Second), time.Since(restartedAt).Round(time.Second))
	if !slices.Contains(d.watch.weightsSince(restartedAt), 100) {
		t.Errorf("after the restart the ramp never reached 100%% (weights %s)", fmtWeights(seen))
	}
	d.checkAnalysis(t, ro.Status.CurrentPodHash, v1alpha1.AnalysisPhaseSuccessful)
}

// outageEvent matches a danki/istio event naming Prometheus' outage (the
// connection the gate could not make).
var outageEvent = regexp.MustCompile(`DankiGateNoVerdict: danki/istio: .*no verdict.*(connection refused|127\.0\.0\.1:19090)`)

// patchRamp merges fields into the Rollout's danki/istio ramp config and
// returns a function that puts the original ramp config back.
func (d *dankiLab) patchRamp(t *testing.T, fields map[string]any) func() {
	t.Helper()
	ro, err := d.argo.ArgoprojV1alpha1().Rollouts("default").Get(d.ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(ro.Spec.Strategy.Canary.TrafficRouting.Plugins["danki/istio"], &cfg); err != nil {
		t.Fatal(err)
	}
	orig, _ := cfg["ramp"].(map[string]any)
	ramp := map[string]any{}
	for k, v := range orig {
		ramp[k] = v
	}
	for k, v := range fields {
		ramp[k] = v
	}
	set := func(value map[string]any) error {
		patch, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/strategy/canary/trafficRouting/plugins/danki~1istio/ramp", "value": value}})
		_, err := d.argo.ArgoprojV1alpha1().Rollouts("default").Patch(d.ctx, "app", types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := set(ramp); err != nil {
		t.Fatalf("set the ramp config %v: %v", ramp, err)
	}
	t.Logf("danki/istio ramp config for this phase: %v", ramp)
	return func() {
		if err := set(orig); err != nil {
			t.Errorf("restore the ramp config %v: %v", orig, err)
		}
	}
}

// stopPrometheus stops the lab's Prometheus the way lab/scripts/mesh.sh's stop does
// (TERM, then KILL), from the pid file its start wrote, and returns when it
// is gone.
func (d *dankiLab) stopPrometheus(t *testing.T) time.Time {
	t.Helper()
	cache, err := testenv.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cache, "lab", "run", "pids", "prometheus.pid"))
	if err != nil {
		t.Fatalf("the lab's Prometheus pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the lab's Prometheus pid file: %v", err)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) != "prometheus" {
		t.Fatalf("pid %d from prometheus.pid runs %q, not Prometheus", pid, exe)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop Prometheus (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil && !zombie(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Prometheus (pid %d) stopped", pid)
	return time.Now()
}

// startPrometheus starts the lab's Prometheus again the way the lab does
// (lab/scripts/mesh.sh's start_prometheus: same config, same data, ready check).
func (d *dankiLab) startPrometheus(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(d.root, "lab", "scripts", "mesh.sh"), "step", "start_prometheus")
	cmd.Dir = d.root
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("lab/scripts/mesh.sh step start_prometheus:\n%s", bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("start Prometheus again: %v", err)
	}
}

// capacityCheck is the warm-up's capacity block for the lab: a floor of
// 40 qps per pod (80 user qps ÷ 2 pods), short steps, the comparison with
// the stable revision's knee at its default (0.8×).
var capacityCheck = map[string]any{"capacity": map[string]any{
	"minQPS": 40, "startQPS": 40, "maxQPS": capacityMaxQPS, "hold": "3s", "refine": 1,
}}

// Both versions of the capacity phases wait 10 ms in every request (a
// downstream call: SLOW_MS, SLOW_PERCENT 100), so the sample app is not
// CPU-bound alone; the bad one waits inside a lock (MAX_CONCURRENCY=1: ~1 ÷
// 12 ms), the good one in parallel. Same latency at low load; a fraction of
// the capacity. (Without the wait, the lock changed nothing measurable: in
// the lab one CPU bounds both at ~210 qps.)
var (
	capacityGoodEnv = map[string]string{"SLOW_MS": "10", "SLOW_PERCENT": "100"}
	capacityKnobEnv = map[string]string{"SLOW_MS": "10", "SLOW_PERCENT": "100", "MAX_CONCURRENCY": "1"}
)

func (d *dankiLab) capacityGood(t *testing.T) {
	// 10 ms slower than the stable before it by design: no rejection here.
	good := map[string]any{"rejectSlowerVersion": false} // the example's pace: its knee is far above
	maps.Copy(good, capacityCheck)
	d.deploy(t, capacityGoodEnv, good)
	st := d.awaitWarmup(t, 8*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful || !strings.Contains(st.Message, "capacity: knee") || !strings.Contains(st.Message, "recorded for revision") {
		t.Fatalf("warm-up + capacity check of a good version ended %s: %s; want Successful with its knee recorded", st.Phase, st.Message)
	}
	ro := d.waitRollout(t, "default", "app", 8*time.Minute, "the good version promoted (Healthy, stable = canary)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("the good version was aborted: %s", describe(ro))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash, describe(ro)
	})
	history, err := capacity.ParseHistory(ro.Annotations[wellknown.CapacityKneesAnnotation])
	k, ok := history.Of(ro.Status.StableRS)
	if err != nil || !ok || k.QPS < 40 {
		t.Fatalf("annotation %s = %q (%v): want the new stable %s's knee, ≥ minQPS 40", wellknown.CapacityKneesAnnotation, ro.Annotations[wellknown.CapacityKneesAnnotation], err, ro.Status.StableRS)
	}
	t.Logf("knee recorded for %s: %.0f qps (capped: %v)", k.Revision, k.QPS, k.Capped)
}

func (d *dankiLab) capacityKnob(t *testing.T) {
	knob := map[string]any{"qps": capacityWarmQPS}
	maps.Copy(knob, capacityCheck)
	_, start := d.deploy(t, capacityKnobEnv, knob)
	st := d.awaitWarmup(t, 8*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseFailed || !strings.Contains(st.Message, "the stable revision") {
		t.Fatalf("capacity check of a version with MAX_CONCURRENCY=1 ended %s: %s; want Failed against the stable revision's knee", st.Phase, st.Message)
	}
	d.abortedAtWeightZero(t, start, "a version that failed the capacity check")
}

func (d *dankiLab) capacityKnobUnchecked(t *testing.T) {
	// The control of capacityKnob (~220 s): cut from make test when the
	// sidecars pushed it past its hour (issue #36); the knob's failure at
	// weight 0 is still checked above.
	if os.Getenv("DANKI_E2E_LONG") == "" {
		t.Skip("the capacity knob's control rollout runs with DANKI_E2E_LONG=1 (~4 min; not in make test)")
	}
	d.deploy(t, capacityKnobEnv, map[string]any{"qps": capacityWarmQPS})
	st := d.awaitWarmup(t, 6*time.Minute)
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("warm-up of the capacity-knob version without the check ended %s: %s", st.Phase, st.Message)
	}
	ro := d.waitRollout(t, "default", "app", 8*time.Minute, "the capacity-knob version promoted at user load (warm-up, gate and analysis passed)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("the capacity-knob version was aborted at user load: %s; events: %s", describe(ro), d.events(t, ""))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash, describe(ro)
	})
	d.checkAnalysis(t, ro.Status.CurrentPodHash, v1alpha1.AnalysisPhaseSuccessful)
}

// capacityMaxQPS caps the capacity check's ramp in the lab: above the good
// version's knee (211–253 qps measured, one CPU), so it is found, not
// capped. capacityWarmQPS is the warm-up's pace per pod in the capacity
// phases: the locked version's knee is ~60–80 qps (62.5 measured), and the
// example's 60 qps would queue it during the warm-up, which would then
// (rightly) reject it as slower than stable before the capacity check.
const (
	capacityMaxQPS  = 600
	capacityWarmQPS = 20
)
