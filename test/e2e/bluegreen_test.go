package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/traffic"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The BlueGreen example's names (lab/manifests/bluegreen).
const (
	bgRollout   = "app-bg"
	bgHost      = "bluegreen.lab"
	bgTemplate  = "danki-bluegreen-load"
	bgNamespace = "default"
)

// TestLabBlueGreenLoadAnalysis is issue #15 in the lab: Argo's native
// BlueGreen strategy (active and preview Services, no traffic router) with a
// prePromotionAnalysis whose danki/latency metric sends the load itself
// (source: load) to the preview pods, while users send steady traffic
// through the gateway to the active Service (Host bluegreen.lab):
//
//   - a good version is load-tested before the switch and promoted;
//   - a version 5 % of whose requests take a second more fails the
//     analysis, is aborted and never promoted, and Envoy counted 0 user
//     requests on its pods, which did get the analysis' marked load.
func TestLabBlueGreenLoadAnalysis(t *testing.T) {
	l := startLab(t)
	dir := filepath.Join(l.root, "lab", "manifests")
	l.apply(t, filepath.Join(dir, "20-gateway.yaml"), filepath.Join(dir, "bluegreen"))
	bg := &blueGreenLab{lab: l, active: "v1"}
	ro := bg.waitRollout(t, bgNamespace, bgRollout, 5*time.Minute, "Rollout app-bg Healthy with 2 available pods", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.AvailableReplicas == 2 && ro.Status.BlueGreen.ActiveSelector != "",
			describeBG(ro)
	})
	waitFor(t, l.ctx, 2*time.Minute, "the gateway answers Host "+bgHost+" from v1", func() (bool, string) {
		v, err := bgRequest(l.ctx, http.DefaultClient, 0)
		return err == nil && v == "v1", fmt.Sprintf("version %q, %v", v, err)
	})
	t.Logf("v1 active: ReplicaSet %s", ro.Status.BlueGreen.ActiveSelector)

	users, err := traffic.StartTraffic(l.ctx, traffic.TrafficConfig{URL: gatewayURL, QPS: userQPS, Connections: 8,
		Headers: map[string]string{"Host": bgHost}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r := users.Stop()
		t.Logf("user traffic (Host %s): %d requests at %.0f of %.0f qps asked, %d failed", bgHost, r.Requests, r.AchievedQPS, r.AskedQPS, r.Errors)
	})

	t.Run("good version: load-tested before the switch, promoted", bg.goodVersion)
	t.Run("slow version: fails the pre-promotion analysis, never promoted, no user request on it", bg.slowVersion)
}

type blueGreenLab struct {
	*lab
	version int
	// active is the version users are on (the active Service's pods).
	active string
}

func describeBG(ro *v1alpha1.Rollout) string {
	ar := "-"
	if s := ro.Status.BlueGreen.PrePromotionAnalysisRunStatus; s != nil {
		ar = fmt.Sprintf("%s %s", s.Name, s.Status)
	}
	return fmt.Sprintf("phase %s, active %s, preview %s, current %s, available %d, pre-promotion analysis %s: %s",
		ro.Status.Phase, ro.Status.BlueGreen.ActiveSelector, ro.Status.BlueGreen.PreviewSelector, ro.Status.CurrentPodHash,
		ro.Status.AvailableReplicas, ar, ro.Status.Message)
}

// deploy rolls out the next version (image tag v2, v3, …) with the sample
// app's environment (SLOW_MS, SLOW_PERCENT) and returns the new pods'
// pod-template-hash and the one users are on.
func (b *blueGreenLab) deploy(t *testing.T, env map[string]string) (newHash, oldHash string) {
	t.Helper()
	b.version++
	version := fmt.Sprintf("v%d", b.version+1)
	envList := []map[string]string{}
	for k, v := range env {
		envList = append(envList, map[string]string{"name": k, "value": v})
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "danki.dev/sample-app:" + version},
		{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": envList},
	})
	before, err := b.argo.ArgoprojV1alpha1().Rollouts(bgNamespace).Get(b.ctx, bgRollout, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldHash = before.Status.BlueGreen.ActiveSelector
	t.Logf("rolling out %s (env %v); users are on %s", version, env, oldHash)
	if _, err := b.argo.ArgoprojV1alpha1().Rollouts(bgNamespace).Patch(b.ctx, bgRollout, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("roll out %s: %v", version, err)
	}
	ro := b.waitRollout(t, bgNamespace, bgRollout, time.Minute, version+" is the new ReplicaSet", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.ObservedGeneration == strconv.FormatInt(ro.Generation, 10) && ro.Status.CurrentPodHash != oldHash && ro.Status.CurrentPodHash != "",
			describeBG(ro)
	})
	return ro.Status.CurrentPodHash, oldHash
}

// preview follows one new version from its deploy to the end of its
// pre-promotion analysis, checking on every look that users were still on
// the old pods while it ran.
type preview struct {
	newHash, oldHash string
	ips              map[string]bool // the new pods' IPs
	run              *v1alpha1.AnalysisRun
	// markedBefore is the new pods' "/" requests (their /metrics) at the
	// last look before the switch: with the active Service on the old pods
	// only the analysis' load can have reached them.
	markedBefore int64
}

// awaitAnalysis waits until the pre-promotion AnalysisRun of newHash has
// ended, looking at the rollout and the new pods every second.
func (b *blueGreenLab) awaitAnalysis(t *testing.T, limit time.Duration, newHash, oldHash string) *preview {
	t.Helper()
	p := &preview{newHash: newHash, oldHash: oldHash, ips: map[string]bool{}}
	waitFor(t, b.ctx, limit, "the pre-promotion AnalysisRun of "+newHash+" ended", func() (bool, string) {
		ro, err := b.argo.ArgoprojV1alpha1().Rollouts(bgNamespace).Get(b.ctx, bgRollout, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		run, err := b.prePromotionRun(newHash)
		if err != nil {
			return false, err.Error()
		}
		if active := ro.Status.BlueGreen.ActiveSelector; active != oldHash {
			if run == nil || run.Status.Phase != v1alpha1.AnalysisPhaseSuccessful {
				t.Fatalf("the active Service moved to %s before the pre-promotion analysis passed: %s", active, describeBG(ro))
			}
		} else if n, err := b.servedRequests(bgNamespace, newHash, p.ips); err == nil {
			p.markedBefore = n
		}
		p.run = run
		if run == nil {
			return false, describeBG(ro)
		}
		// (The new pods' request count is left out of the state: it changes
		// every second and waitFor logs every change.)
		return run.Status.Phase.Completed(), fmt.Sprintf("AnalysisRun %s %s %s", run.Name, run.Status.Phase, measurementLine(run))
	})
	logRun(t, p.run)
	return p
}

// prePromotionRun returns the pre-promotion AnalysisRun of the ReplicaSet
// with the given hash, or nil while there is none.
func (b *blueGreenLab) prePromotionRun(hash string) (*v1alpha1.AnalysisRun, error) {
	runs, err := b.argo.ArgoprojV1alpha1().AnalysisRuns(bgNamespace).List(b.ctx, metav1.ListOptions{
		LabelSelector: fmt.Sprintf("rollouts-pod-template-hash=%s,%s=%s", hash, v1alpha1.RolloutTypeLabel, v1alpha1.RolloutTypePrePromotionLabel)})
	if err != nil {
		return nil, err
	}
	switch len(runs.Items) {
	case 0:
		return nil, nil
	case 1:
		return &runs.Items[0], nil
	}
	return nil, fmt.Errorf("%d pre-promotion AnalysisRuns for %s, want 1", len(runs.Items), hash)
}

// loadMeasurement is the AnalysisRun's one measurement of the
// danki/latency load metric, nil before it was taken.
func loadMeasurement(run *v1alpha1.AnalysisRun) *v1alpha1.Measurement {
	for _, m := range run.Status.MetricResults {
		if len(m.Measurements) > 0 {
			return &m.Measurements[len(m.Measurements)-1]
		}
	}
	return nil
}

func measurementLine(run *v1alpha1.AnalysisRun) string {
	ms := loadMeasurement(run)
	if ms == nil {
		return "(no measurement yet)"
	}
	return fmt.Sprintf("(measurement %s: %s %s)", ms.Phase, ms.Message, ms.Metadata["summary"])
}

// logRun logs every figure of the AnalysisRun's measurements.
func logRun(t *testing.T, run *v1alpha1.AnalysisRun) {
	t.Helper()
	t.Logf("AnalysisRun %s: %s %s", run.Name, run.Status.Phase, run.Status.Message)
	for _, m := range run.Status.MetricResults {
		for _, ms := range m.Measurements {
			took := "-"
			if ms.StartedAt != nil && ms.FinishedAt != nil {
				took = ms.FinishedAt.Sub(ms.StartedAt.Time).Round(100 * time.Millisecond).String()
			}
			t.Logf("  metric %s: measurement %s in %s, message %q", m.Name, ms.Phase, took, ms.Message)
			keys := make([]string, 0, len(ms.Metadata))
			for k := range ms.Metadata {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				t.Logf("    %s: %s", k, ms.Metadata[k])
			}
			t.Logf("    value: %s", ms.Value)
		}
	}
}

func (b *blueGreenLab) goodVersion(t *testing.T) {
	newHash, oldHash := b.deploy(t, nil)
	version := fmt.Sprintf("v%d", b.version+1)
	p := b.awaitAnalysis(t, 5*time.Minute, newHash, oldHash)
	ms := loadMeasurement(p.run)
	if p.run.Status.Phase != v1alpha1.AnalysisPhaseSuccessful || ms == nil || ms.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("the pre-promotion analysis of a good version ended %s %s", p.run.Status.Phase, measurementLine(p.run))
	}
	checkFigures(t, ms)
	if n, _ := strconv.ParseInt(ms.Metadata["canaryCount"], 10, 64); n < measuredCount(t, b.lab) {
		t.Errorf("the measurement judged %s requests to the new pods: want the template's count, %d", ms.Metadata["canaryCount"], measuredCount(t, b.lab))
	}
	ro := b.waitRollout(t, bgNamespace, bgRollout, 2*time.Minute, "the good version promoted (active = "+newHash+", Healthy)", func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.Abort {
			t.Fatalf("the good version was aborted: %s", describeBG(ro))
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.BlueGreen.ActiveSelector == newHash && ro.Status.StableRS == newHash,
			describeBG(ro)
	})
	t.Logf("promoted: %s", describeBG(ro))
	b.active = version
	// The new pods got the analysis' load while users were on the old
	// ones: the measured requests at least.
	if p.markedBefore < measuredCount(t, b.lab) {
		t.Errorf("the new pods served %d requests before the switch: want at least the analysis' %d measured ones", p.markedBefore, measuredCount(t, b.lab))
	}
	// Users now reach the new version through the gateway, and Envoy counts
	// them on the new pods' IPs: the count the slow version's phase expects
	// to stay 0 does move when users are switched.
	waitFor(t, b.ctx, time.Minute, "users answered by "+version+" through the gateway", func() (bool, string) {
		v, err := bgRequest(b.ctx, http.DefaultClient, 1)
		return err == nil && v == version, fmt.Sprintf("version %q, %v", v, err)
	})
	var users int64
	waitFor(t, b.ctx, time.Minute, "Envoy counts user requests on the new pods' IPs", func() (bool, string) {
		n, where, err := envoyHostRequests(p.ips)
		users = n
		return err == nil && n > 0, fmt.Sprintf("%d requests %v %v", n, where, err)
	})
	t.Logf("good version %s: the analysis' load reached its pods before the switch (%d requests on them while users were on %s); after the switch Envoy counts %d user requests on them",
		newHash, p.markedBefore, oldHash, users)
}

func (b *blueGreenLab) slowVersion(t *testing.T) {
	// 5 % of requests take a second more: the median is fine, the p99 is
	// ≥ 1 s, far above the template's 150 ms (issue #15's bad version).
	newHash, oldHash := b.deploy(t, map[string]string{"SLOW_MS": "1000", "SLOW_PERCENT": "5"})
	p := b.awaitAnalysis(t, 5*time.Minute, newHash, oldHash)
	if p.run.Status.Phase != v1alpha1.AnalysisPhaseFailed {
		t.Fatalf("the pre-promotion analysis of a version 5%% of whose requests take +1 s ended %s %s", p.run.Status.Phase, measurementLine(p.run))
	}
	if ms := loadMeasurement(p.run); ms == nil || ms.Phase != v1alpha1.AnalysisPhaseFailed {
		t.Errorf("the load measurement did not fail: %s", measurementLine(p.run))
	} else {
		checkFigures(t, ms)
		// It failed on latency (p99, absolute or relative to stable), not
		// on errors or missing data.
		failed := failedChecks(t, ms)
		if len(failed) == 0 || slices.ContainsFunc(failed, func(c string) bool { return c != "p99" && c != "ratio:p99" }) {
			t.Errorf("failed checks %v: want p99 and/or ratio:p99 only (%s)", failed, ms.Message)
		}
	}
	ro := b.waitRollout(t, bgNamespace, bgRollout, time.Minute, "the rollout aborted (Degraded), users still on "+oldHash, func(ro *v1alpha1.Rollout) (bool, string) {
		if ro.Status.BlueGreen.ActiveSelector != oldHash {
			t.Fatalf("the active Service moved to %s after a failed pre-promotion analysis: %s", ro.Status.BlueGreen.ActiveSelector, describeBG(ro))
		}
		return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, describeBG(ro)
	})
	t.Logf("aborted: %s", describeBG(ro))
	// The new pods are still up (abortScaleDownDelaySeconds 30): count what
	// reached them, at the pods and at Envoy.
	marked, err := b.servedRequests(bgNamespace, newHash, p.ips)
	if err != nil {
		t.Fatalf("read the new pods' request counters: %v", err)
	}
	users, where, err := envoyHostRequests(p.ips)
	if err != nil {
		t.Fatalf("read Envoy's per-host counters: %v", err)
	}
	t.Logf("slow version %s (pods %v): %d requests at the pods (the analysis' load), %d user requests counted at Envoy on their IPs (clusters: %v)",
		newHash, sortedIPs(p.ips), marked, users, where)
	if len(p.ips) == 0 || marked == 0 {
		t.Errorf("the new pods %v served %d requests: the analysis never loaded them", sortedIPs(p.ips), marked)
	}
	if users != 0 {
		t.Errorf("Envoy sent %d user requests to the rejected version's pods", users)
	}
	// Users are still answered by the version they were on.
	for i := 0; i < 20; i++ {
		v, err := bgRequest(b.ctx, http.DefaultClient, i)
		if err != nil || v != b.active {
			t.Fatalf("user request %d after the abort answered %q (%v), want %s", i, v, err, b.active)
		}
	}
}

// checkFigures checks that a measurement reports its figures: a summary
// and the new pods' request count and p99.
func checkFigures(t *testing.T, ms *v1alpha1.Measurement) {
	t.Helper()
	if ms.Metadata["summary"] == "" && ms.Message == "" {
		t.Errorf("measurement %s has neither a message nor a summary", ms.Phase)
	}
	if ms.Metadata["canaryP99Ms"] == "" || ms.Metadata["canaryCount"] == "" {
		t.Errorf("measurement %s metadata %v: want canaryCount and canaryP99Ms", ms.Phase, ms.Metadata)
	}
}

// failedChecks lists the names of the checks a measurement's value
// (analysis.MeasuredValue as JSON) records as failed.
func failedChecks(t *testing.T, ms *v1alpha1.Measurement) []string {
	t.Helper()
	var v struct {
		Checks []struct{ Name, Result string }
	}
	if err := json.Unmarshal([]byte(ms.Value), &v); err != nil {
		t.Fatalf("measurement value %q: %v", ms.Value, err)
	}
	var failed []string
	for _, c := range v.Checks {
		if c.Result == "Fail" {
			failed = append(failed, c.Name)
		}
	}
	return failed
}

// measuredCount reads load.count from the example's AnalysisTemplate.
func measuredCount(t *testing.T, l *lab) int64 {
	t.Helper()
	at, err := l.argo.ArgoprojV1alpha1().AnalysisTemplates(bgNamespace).Get(l.ctx, bgTemplate, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Load struct {
			Count int64 `json:"count"`
		} `json:"load"`
	}
	p := at.Spec.Metrics[0].Provider.Plugin
	if err := json.Unmarshal(p["danki/latency"], &cfg); err != nil || cfg.Load.Count == 0 {
		t.Fatalf("load.count of AnalysisTemplate %s: %v (%s)", bgTemplate, err, p["danki/latency"])
	}
	return cfg.Load.Count
}

// envoyHostRequests sums the requests the gateway's Envoy sent to the given
// pod IPs, in any cluster, and says which clusters have them as hosts (with
// their counts). The analysis' load goes to pod IPs directly, not through
// Envoy: everything counted here is a user's request.
func envoyHostRequests(ips map[string]bool) (int64, []string, error) {
	counts, err := envoyHostCounts()
	if err != nil {
		return 0, nil, err
	}
	var total int64
	var where []string
	for _, c := range counts {
		if !ips[c.ip] {
			continue
		}
		total += c.n
		where = append(where, fmt.Sprintf("%s %s: %d", c.cluster, c.ip, c.n))
	}
	return total, where, nil
}

// bgRequest sends one GET through the gateway with Host bluegreen.lab and
// returns the version that answered.
func bgRequest(ctx context.Context, client *http.Client, i int) (string, error) {
	resp, body, err := send(ctx, client, http.MethodGet, gatewayURL+"?seed="+strconv.Itoa(i), bgHost, nil)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return versionOf(body)
}

func sortedIPs(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
