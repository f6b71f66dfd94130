package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmupstep"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// AAConfig is an A/A run: the same version rolled out again and again with
// danki under steady user traffic, to count how often the warm-up (or the
// gate) turns a good version away (issue #14 §3).
type AAConfig struct {
	// Common: QPS default 80, Settle (users on the first v1 pods before
	// run 1) default 45 s.
	Common
	// Runs is how many rollouts of the same version.
	Runs int
	// Between is how long users have the new stable pods to themselves
	// between runs (after the old pods are gone).
	Between time.Duration
	// Timeout bounds one rollout.
	Timeout time.Duration
	// OnRun is called after each run with the result so far (to write
	// partial results: a 20-run A/A is long, and an interrupted one should
	// still say what it saw).
	OnRun func(*AAResult)
}

func (c AAConfig) withDefaults() AAConfig {
	c.Common = c.Common.withDefaults(80, 45*time.Second)
	if c.Runs == 0 {
		c.Runs = 20
	}
	if c.Between == 0 {
		c.Between = 5 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 6 * time.Minute
	}
	return c
}

// AA outcomes. Only promoted is a pass: anything else turned the same
// version away (or could not tell).
const (
	AAPromoted       = "promoted"
	AARejected       = "rejected by warm-up" // converged, but judged slower than stable
	AAWarmupFailed   = "warm-up failed"      // any other failed warm-up (deadline, errors)
	AAGateAborted    = "aborted by gate"     // danki/istio's gate breached maxBreaches times
	AAAborted        = "aborted"             // aborted for another reason
	AATimedOut       = "timed out"           // not finished within AAConfig.Timeout; aborted by the A/A
	aaRejectedPhrase = "a slower version, rejected"
)

// AARun is one rollout of the A/A.
type AARun struct {
	Index   int    `json:"index"`
	Version string `json:"version"`
	Outcome string `json:"outcome"`
	// Reason is the warm-up step's final message, or for a gate abort the
	// event that named the breach.
	Reason string `json:"reason,omitempty"`
	// WarmupPhase is the step's last phase as Argo recorded it.
	WarmupPhase string `json:"warmupPhase,omitempty"`
	// Pods warmed; RequestsPerPod the warm-up requests each got (the total
	// divided evenly); StopRatio RequestsPerPod ÷ MinStop (the stopping
	// rule's earliest stop, 600 with the defaults).
	Pods           int     `json:"pods"`
	RequestsPerPod int64   `json:"requestsPerPod"`
	MinStop        int64   `json:"minStop"`
	StopRatio      float64 `json:"stopRatio"`
	// CanaryP99 is the canary's plateau p99 the warm-up saw: the one the
	// rejection names when it rejected, else the median of the step
	// status's last six window p99s. StableP99 is stable's reference p99
	// (side by side). Limit is what the canary had to stay under:
	// max(rejectRatio × stable, stable + rejectFloor).
	CanaryP99 time.Duration `json:"canaryP99"`
	StableP99 time.Duration `json:"stableP99"`
	Limit     time.Duration `json:"limit"`
	// CanaryTrend is the step status's last window p99s, oldest first.
	CanaryTrend []string `json:"canaryTrend,omitempty"`
	// MaxWeight is the most users the canary had (percent).
	MaxWeight int32 `json:"maxWeight"`
	// LeftoverPods counts pods of neither the stable ReplicaSet nor the
	// new one when the run started (the previous run's did not go in
	// time): they share the CPU with this run's warm-up.
	LeftoverPods int `json:"leftoverPods,omitempty"`
	// LoadMean and LoadMax are the machine's 1-minute load average over
	// the run (sampled every poll; the lab shares its cores with whatever
	// else runs on the machine).
	LoadMean float64 `json:"loadMean"`
	LoadMax  float64 `json:"loadMax"`
	// UserRequests and UserErrors are the users' requests sent during the
	// run and how many failed (all Services, not only the canary's).
	UserRequests int           `json:"userRequests"`
	UserErrors   int           `json:"userErrors"`
	Start        time.Time     `json:"start"`
	Elapsed      time.Duration `json:"elapsed"`
	// Warmup is how long the step took, from the Rollout's step change
	// to its end as the A/A saw it (the step is polled every 15 s).
	Warmup time.Duration `json:"warmup"`
}

// AAResult is the A/A's runs and their tally.
type AAResult struct {
	// Steps is the canary steps every run used (JSON).
	Steps   string  `json:"steps"`
	Runs    []AARun `json:"runs"`
	Tally   AATally `json:"tally"`
	Start   time.Time
	Elapsed time.Duration `json:"elapsed"`
	// Traffic is the users' traffic over the whole A/A (set at the end).
	Traffic *traffic.Result `json:"traffic,omitempty"`
}

// AA rolls the sample app out cfg.Runs times as the same program under a
// new tag each time (aa-01, aa-02, …: a new ReplicaSet, same image and env)
// with lab/manifests/danki's warm-up and gate, under steady user traffic.
// The lab must be up. It returns what it measured so far also on error.
func AA(ctx context.Context, cfg AAConfig) (*AAResult, error) {
	cfg = cfg.withDefaults()
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig %s (is the lab up? make lab-up): %w", cfg.Kubeconfig, err)
	}
	l := &lab{cfg: Config{Common: Common{Root: cfg.Root, Kubeconfig: cfg.Kubeconfig, Log: cfg.Log}}.withDefaults(),
		kube: kubernetes.NewForConfigOrDie(rc), argo: argoclient.NewForConfigOrDie(rc), istio: istioclient.NewForConfigOrDie(rc)}
	ex := filepath.Join(cfg.Root, "lab", "manifests")
	manifest, steps, err := aaManifest(filepath.Join(ex, "danki", "30-rollout.yaml"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "danki-aa-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "30-rollout.yaml"), manifest, 0o644); err != nil {
		return nil, err
	}
	res := &AAResult{Steps: steps, Start: time.Now()}
	if err := l.kubectl(ctx, "apply", "-f", filepath.Join(ex, "10-services.yaml"), "-f", filepath.Join(ex, "20-gateway.yaml")); err != nil {
		return nil, err
	}
	// A fresh Rollout at v1 with the A/A's steps (the Rollout of whatever
	// ran before is replaced).
	if err := l.install(ctx, mainApp, dir); err != nil {
		return nil, err
	}
	cfg.Log.Info("users: steady traffic through the gateway", "url", cfg.GatewayURL, "qps", cfg.QPS)
	users, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: cfg.GatewayURL, QPS: cfg.QPS})
	if err != nil {
		return nil, err
	}
	defer func() {
		if users != nil {
			t := users.Stop()
			res.Traffic = &t
			countUsers(res.Runs, t.Samples)
		}
	}()
	cfg.Log.Info("users warm the v1 pods", "for", cfg.Settle)
	if err := sleep(ctx, cfg.Settle); err != nil {
		return res, err
	}
	for i := 1; i <= cfg.Runs; i++ {
		run, err := l.aaRun(ctx, cfg, i)
		if err != nil {
			return res, fmt.Errorf("A/A run %d: %w", i, err)
		}
		res.Runs = append(res.Runs, *run)
		res.Tally = Tally(res.Runs)
		res.Elapsed = time.Since(res.Start)
		cfg.Log.Info("A/A run done", "run", i, "outcome", run.Outcome, "requestsPerPod", run.RequestsPerPod,
			"canaryP99", run.CanaryP99, "stableP99", run.StableP99, "took", run.Elapsed.Round(time.Second), "rejected", res.Tally.Rejected)
		if cfg.OnRun != nil {
			cfg.OnRun(res)
		}
		// The next run's stable pods are this run's winners (or the old
		// stable after an abort): wait for the others to go, then let users
		// have them alone for a moment, as between real rollouts.
		if err := l.awaitTwoPods(ctx); err != nil {
			if ctx.Err() != nil {
				return res, err
			}
			// Counted in the next run (LeftoverPods), not fatal: one stuck
			// pod should not end a long A/A.
			cfg.Log.Warn("old pods still there; going on", "err", err)
		}
		if err := sleep(ctx, cfg.Between); err != nil {
			return res, err
		}
	}
	t := users.Stop()
	users = nil
	res.Traffic = &t
	countUsers(res.Runs, t.Samples)
	res.Elapsed = time.Since(res.Start)
	return res, nil
}

// countUsers sets each run's users' requests and failures from the
// traffic's samples (ordered by start).
func countUsers(runs []AARun, samples []traffic.Sample) {
	for i := range runs {
		r := &runs[i]
		r.UserRequests, r.UserErrors = 0, 0
		for _, s := range samplesIn(samples, r.Start, r.Start.Add(r.Elapsed)) {
			r.UserRequests++
			if !s.OK() {
				r.UserErrors++
			}
		}
	}
}

// aaRun rolls out version aa-NN and follows it to its end.
func (l *lab) aaRun(ctx context.Context, cfg AAConfig, i int) (*AARun, error) {
	version := fmt.Sprintf("aa-%02d", i)
	log := cfg.Log.With("run", i, "version", version)
	run := &AARun{Index: i, Version: version, Start: time.Now()}
	// Only the tag changes: same program, same env, a new ReplicaSet.
	patch, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "danki.dev/sample-app:" + version},
	})
	run.LeftoverPods = l.leftoverPods(ctx)
	if run.LeftoverPods > 0 {
		log.Warn("old pods still running as the run starts", "pods", run.LeftoverPods)
	}
	log.Info("rolling out the same version under a new tag")
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Patch(ctx, "app", types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("set image %s: %w", version, err)
	}
	generation := ro.Generation
	deadline := run.Start.Add(cfg.Timeout)
	var (
		st                *warmupstep.Status
		phase, msg        string
		warmStart, warmed time.Time
		minStop           int64
		load              loadStats
	)
	defer func() { run.LoadMean, run.LoadMax = load.mean(), load.max }()
	for {
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return nil, err
		}
		now := time.Now()
		load.sample()
		if w, err := l.canaryWeight(ctx, mainApp); err == nil {
			run.MaxWeight = max(run.MaxWeight, w)
		}
		ro, err = l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			continue
		}
		if ro.Generation < generation || ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
			continue
		}
		if minStop == 0 {
			minStop = warmupMinStop(ro)
		}
		if s, p, m := warmupStepStatus(ro); p != "" {
			if warmStart.IsZero() {
				warmStart = now
			}
			if s != nil {
				st = s
			}
			phase, msg = p, m
			if warmed.IsZero() && (p == string(v1alpha1.StepPluginPhaseSuccessful) || p == string(v1alpha1.StepPluginPhaseFailed)) {
				warmed = now
				log.Info("warm-up ended", "phase", p, "message", m)
			}
		}
		aborted := ro.Status.Abort
		promoted := ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash
		if !aborted && !promoted && now.After(deadline) {
			log.Warn("rollout not finished in time: aborting it", "timeout", cfg.Timeout, "message", ro.Status.Message)
			if err := l.abortRollout(ctx); err != nil {
				return nil, err
			}
		}
		if !aborted && !promoted && !now.After(deadline) {
			continue
		}
		run.Elapsed = now.Sub(run.Start)
		if !warmed.IsZero() {
			run.Warmup = warmed.Sub(warmStart)
		}
		gate := ""
		if aborted {
			gate = l.gateBreach(ctx, run.Start)
		}
		run.Outcome, run.Reason = classifyAA(promoted, aborted, phase, msg, gate)
		if !promoted && !aborted {
			run.Outcome, run.Reason = AATimedOut, fmt.Sprintf("not finished after %s (warm-up %s: %s)", cfg.Timeout, phase, msg)
		}
		run.WarmupPhase = phase
		fillWarmupFigures(run, st, msg, minStop, warmupRejectLimits(ro))
		return run, nil
	}
}

// classifyAA names a run's outcome from how it ended, the warm-up step's
// final phase and message, and the gate's breach event (if any).
func classifyAA(promoted, aborted bool, phase, msg, gateBreach string) (outcome, reason string) {
	failed := phase == string(v1alpha1.StepPluginPhaseFailed)
	switch {
	case promoted && !aborted:
		return AAPromoted, msg
	case failed && containsFold(msg, aaRejectedPhrase):
		return AARejected, msg
	case failed:
		return AAWarmupFailed, msg
	case gateBreach != "":
		return AAGateAborted, gateBreach
	case aborted:
		return AAAborted, msg
	}
	return AATimedOut, msg
}

// fillWarmupFigures sets the run's warm-up figures from the step's last
// status and message: requests per pod, stop ÷ MinStop, and the canary's
// and stable's p99 as the warm-up judged them.
func fillWarmupFigures(run *AARun, st *warmupstep.Status, msg string, minStop int64, limit func(time.Duration) time.Duration) {
	run.MinStop = minStop
	if st == nil {
		return
	}
	run.Pods = max(len(st.Pods), st.Converged)
	if run.Pods > 0 {
		run.RequestsPerPod = st.Requests / int64(run.Pods)
	}
	if minStop > 0 {
		run.StopRatio = float64(run.RequestsPerPod) / float64(minStop)
	}
	run.CanaryTrend = st.Trend
	run.StableP99, _ = time.ParseDuration(st.StableP99)
	if c, s, ok := rejectedFigures(msg); ok {
		run.CanaryP99, run.StableP99 = c, s
	} else {
		run.CanaryP99 = medianDuration(st.Trend)
	}
	if run.StableP99 > 0 && limit != nil {
		run.Limit = limit(run.StableP99)
	}
}

// rejectedFigures reads the plateau and stable p99 a rejection names
// ("p99 settled at 1.00s (…), 132.0× stable's 7.60ms (rejectRatio …").
func rejectedFigures(msg string) (canary, stable time.Duration, ok bool) {
	m := rejectedRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, false
	}
	c, err1 := time.ParseDuration(m[1])
	s, err2 := time.ParseDuration(m[2])
	return c, s, err1 == nil && err2 == nil
}

// medianDuration is the median of durations written as Go durations
// (unparseable ones skipped); 0 for none.
func medianDuration(ds []string) time.Duration {
	var xs []time.Duration
	for _, s := range ds {
		if d, err := time.ParseDuration(s); err == nil {
			xs = append(xs, d)
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// warmupStepStatus returns the danki/warmup step's status for the current
// canary: its parsed status (nil before the plugin kept one), phase and
// message; phase "" when the step has not run for this canary yet.
func warmupStepStatus(ro *v1alpha1.Rollout) (*warmupstep.Status, string, string) {
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Name != "danki/warmup" || s.Operation != v1alpha1.StepPluginOperationRun {
			continue
		}
		st := warmupstep.ParseStatus(s.Status)
		if st != nil && st.CanaryHash != "" && st.CanaryHash != ro.Status.CurrentPodHash {
			continue // an earlier run's
		}
		return st, string(s.Phase), s.Message
	}
	return nil, "", ""
}

// labPluginPolicy is the policy the lab's danki plugin runs its tenants'
// configs under: the lab's plugin args (lab/scripts/mesh.sh) set no caps
// and no URL networks, so the strictest policy with the default caps. The
// lab reads a step config as the plugin does, not more widely.
var labPluginPolicy = policy.Policy{}

// warmupStepConfig is the Rollout's danki/warmup step config, decoded,
// defaulted and validated once, by the plugin's own parser
// (warmupstep.ParseStepConfig: strict, under labPluginPolicy).
func warmupStepConfig(ro *v1alpha1.Rollout) (warmupstep.StepConfig, bool) {
	for _, s := range ro.Spec.Strategy.Canary.Steps {
		if s.Plugin != nil && s.Plugin.Name == "danki/warmup" {
			c, err := warmupstep.ParseStepConfig(s.Plugin.Config, labPluginPolicy)
			return c, err == nil
		}
	}
	return warmupstep.StepConfig{}, false
}

// warmupMinStop is the step's earliest stop per pod (0 without the step).
func warmupMinStop(ro *v1alpha1.Rollout) int64 {
	c, ok := warmupStepConfig(ro)
	if !ok {
		return 0
	}
	return c.MinStop()
}

// warmupRejectLimits returns the limit a canary p99 must stay under given
// stable's: max(rejectRatio × stable, stable + rejectFloor), the step's
// rejection rule (pkg/warmup slowerThanStable) as a figure.
func warmupRejectLimits(ro *v1alpha1.Rollout) func(time.Duration) time.Duration {
	c, ok := warmupStepConfig(ro)
	if !ok {
		return nil
	}
	return func(stable time.Duration) time.Duration {
		return max(time.Duration(c.RejectRatio*float64(stable)), stable+c.RejectFloor.D())
	}
}

// gateBreach returns the message of the latest event in which danki/istio
// aborted the rollout since start, or "".
func (l *lab) gateBreach(ctx context.Context, since time.Time) string {
	evs, err := l.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=app,reason=" + shift.RampFailedReason})
	if err != nil {
		return ""
	}
	msg := ""
	var last time.Time
	for _, e := range evs.Items {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if !at.Before(since.Truncate(time.Second)) && !at.Before(last) {
			msg, last = e.Message, at
		}
	}
	return msg
}

// leftoverPods counts the app's pods that belong to no ReplicaSet the
// Rollout still needs: neither stable nor the current one.
func (l *lab) leftoverPods(ctx context.Context) int {
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		return 0
	}
	pods, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sample-app"})
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods.Items {
		if h := p.Labels[v1alpha1.DefaultRolloutUniqueLabelKey]; h != ro.Status.StableRS && h != ro.Status.CurrentPodHash {
			n++
		}
	}
	return n
}

// loadStats samples the machine's 1-minute load average.
type loadStats struct {
	sum, max float64
	n        int
}

func (s *loadStats) sample() {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return
	}
	if v, err := strconv.ParseFloat(f[0], 64); err == nil {
		s.sum, s.n, s.max = s.sum+v, s.n+1, max(s.max, v)
	}
}

func (s *loadStats) mean() float64 {
	if s.n == 0 {
		return 0
	}
	return s.sum / float64(s.n)
}

// abortRollout aborts the Rollout as `kubectl argo rollouts abort` does.
func (l *lab) abortRollout(ctx context.Context) error {
	_, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Patch(ctx, "app", types.MergePatchType,
		[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("abort the rollout: %w", err)
	}
	return nil
}

// awaitTwoPods waits until only the Rollout's two stable pods are left (the
// old ReplicaSet scales down 30 s after a promotion, an aborted canary's
// too): the next run's warm-up then shares the CPU with what a real
// rollout would, not with a leftover pair of JVMs.
func (l *lab) awaitTwoPods(ctx context.Context) error {
	return wait(ctx, 3*time.Minute, "only the 2 stable pods left", func() (bool, error) {
		ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sample-app"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 2 {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Labels[v1alpha1.DefaultRolloutUniqueLabelKey] != ro.Status.StableRS {
				return false, nil
			}
		}
		return true, nil
	})
}

// aaManifest turns lab/manifests/danki's Rollout into the A/A's and returns
// it as YAML, with the A/A's canary steps as JSON for the report: steps
// [setCanaryScale 2, the example's danki/warmup step verbatim, setWeight 20,
// pause 5s] (no analysis: the A/A is about the warm-up), and danki/istio
// rungs [20, 100] (two gated moves instead of seven: the gate still judges
// the canary at 20 % and at 100 %). Everything else is the example's.
func aaManifest(rolloutFile string) ([]byte, string, error) {
	raw, err := os.ReadFile(rolloutFile)
	if err != nil {
		return nil, "", fmt.Errorf("read the danki example: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, "", fmt.Errorf("parse %s: %w", rolloutFile, err)
	}
	canary, err := mapAt(doc, "spec", "strategy", "canary")
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", rolloutFile, err)
	}
	steps, _ := canary["steps"].([]any)
	var warm any
	for _, s := range steps {
		if p, err := mapAt(s, "plugin"); err == nil && p["name"] == "danki/warmup" {
			warm = s
		}
	}
	if warm == nil {
		return nil, "", fmt.Errorf("%s has no danki/warmup step", rolloutFile)
	}
	aa := []any{
		map[string]any{"setCanaryScale": map[string]any{"replicas": 2}},
		warm,
		map[string]any{"setWeight": 20},
		map[string]any{"pause": map[string]any{"duration": "5s"}},
	}
	canary["steps"] = aa
	ramp, err := mapAt(canary, "trafficRouting", "plugins", "danki/istio", "ramp")
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", rolloutFile, err)
	}
	ramp["weights"] = []any{20, 100}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, "", err
	}
	js, err := json.Marshal(aa)
	return out, string(js), err
}

// mapAt walks nested maps by key.
func mapAt(v any, keys ...string) (map[string]any, error) {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no %q (not a map)", k)
		}
		if v, ok = m[k]; !ok {
			return nil, fmt.Errorf("no %q", k)
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%v is not a map", keys)
	}
	return m, nil
}

// rejectedRE reads the figures out of a rejection's message (pkg/warmup's
// slowerThanStable writes it with latency.Format, which Go parses).
var rejectedRE = regexp.MustCompile(`p99 settled at (\S+) .*?stable's (\S+) \(`)

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// AATally counts the A/A's outcomes. Rejected counts every run that turned
// the good version away: by the warm-up's rejection, a failed warm-up, the
// gate, another abort or a time-out.
type AATally struct {
	Runs     int `json:"runs"`
	Promoted int `json:"promoted"`
	Rejected int `json:"rejected"`
	// ByOutcome splits Rejected (and Promoted) by outcome.
	ByOutcome map[string]int `json:"byOutcome"`
	// Medians and worst over the runs whose warm-up ended with figures.
	MedianStopRatio float64       `json:"medianStopRatio"`
	MaxStopRatio    float64       `json:"maxStopRatio"`
	MedianElapsed   time.Duration `json:"medianElapsed"`
	MaxElapsed      time.Duration `json:"maxElapsed"`
	// MaxCanaryToLimit is the closest any run came to a rejection: its
	// canary p99 ÷ the limit it had to stay under (≥ 1 is a rejection),
	// over the runs whose warm-up ended in the rule's verdict (converged or
	// rejected).
	MaxCanaryToLimit float64 `json:"maxCanaryToLimit"`
}

// Tally counts outcomes and summarises the runs.
func Tally(runs []AARun) AATally {
	t := AATally{Runs: len(runs), ByOutcome: map[string]int{}}
	var stops []float64
	var elapsed []time.Duration
	for _, r := range runs {
		t.ByOutcome[r.Outcome]++
		if r.Outcome == AAPromoted {
			t.Promoted++
		} else {
			t.Rejected++
		}
		if r.StopRatio > 0 {
			stops = append(stops, r.StopRatio)
		}
		elapsed = append(elapsed, r.Elapsed)
		// Only where the rule judged a plateau: a warm-up that failed for
		// another reason (unreachable pod, deadline) has no plateau.
		judged := r.Outcome == AARejected || r.WarmupPhase == string(v1alpha1.StepPluginPhaseSuccessful)
		if judged && r.Limit > 0 && r.CanaryP99 > 0 {
			t.MaxCanaryToLimit = max(t.MaxCanaryToLimit, float64(r.CanaryP99)/float64(r.Limit))
		}
	}
	if len(stops) > 0 {
		slices.Sort(stops)
		t.MedianStopRatio, t.MaxStopRatio = median(stops), stops[len(stops)-1]
	}
	if len(elapsed) > 0 {
		slices.Sort(elapsed)
		t.MedianElapsed, t.MaxElapsed = elapsed[len(elapsed)/2], elapsed[len(elapsed)-1]
		if len(elapsed)%2 == 0 {
			t.MedianElapsed = (elapsed[len(elapsed)/2-1] + elapsed[len(elapsed)/2]) / 2
		}
	}
	return t
}

// median of sorted xs (not empty).
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Summary is the A/A's one-line verdict.
func (r *AAResult) Summary() string {
	t := r.Tally
	verdict := "goal met: none rejected"
	if t.Rejected > 0 {
		verdict = "goal NOT met"
	}
	s := fmt.Sprintf("A/A: %d of %d rollouts of the same version rejected (%s)", t.Rejected, t.Runs, verdict)
	if t.Rejected > 0 {
		var parts []string
		for _, o := range []string{AARejected, AAWarmupFailed, AAGateAborted, AAAborted, AATimedOut} {
			if n := t.ByOutcome[o]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, o))
			}
		}
		s += ": " + strings.Join(parts, ", ")
	}
	return s + fmt.Sprintf("; warm-up stop ÷ minStop median %.2f (max %.2f); canary p99 ÷ rejection limit at most %.2f (runs the rule judged); %s per rollout (median, max %s)",
		t.MedianStopRatio, t.MaxStopRatio, t.MaxCanaryToLimit, t.MedianElapsed.Round(time.Second), t.MaxElapsed.Round(time.Second))
}

// WriteAAReport writes the runs as a Markdown table, then the summary line
// and every non-promoted run's reason in full.
func WriteAAReport(w io.Writer, r *AAResult) error {
	var b strings.Builder
	b.WriteString("| run | version | outcome | warm-up req/pod | stop ÷ minStop | canary p99 | stable p99 | limit | canary ÷ stable | max weight | warm-up | elapsed | load 1m mean/max | users failed |\n")
	b.WriteString("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range r.Runs {
		ratio := "—"
		if run.StableP99 > 0 && run.CanaryP99 > 0 {
			ratio = fmt.Sprintf("%.2f", float64(run.CanaryP99)/float64(run.StableP99))
		}
		users := "—"
		if run.UserRequests > 0 {
			users = fmt.Sprintf("%d of %d", run.UserErrors, run.UserRequests)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %.2f | %s | %s | %s | %s | %d%% | %s | %s | %.1f/%.1f | %s |\n", run.Index, run.Version, run.Outcome,
			run.RequestsPerPod, run.StopRatio, fmtLatency(run.CanaryP99), fmtLatency(run.StableP99), fmtLatency(run.Limit), ratio,
			run.MaxWeight, run.Warmup.Round(time.Second), run.Elapsed.Round(time.Second), run.LoadMean, run.LoadMax, users)
	}
	b.WriteString("\n" + r.Summary() + "\n")
	for _, run := range r.Runs {
		if run.Outcome != AAPromoted {
			fmt.Fprintf(&b, "\n- run %d (%s), %s: %s\n", run.Index, run.Version, run.Outcome, run.Reason)
		}
		if run.LeftoverPods > 0 {
			fmt.Fprintf(&b, "\n- run %d (%s) started with %d pod(s) of an earlier run still running\n", run.Index, run.Version, run.LeftoverPods)
		}
	}
	if t := r.Traffic; t != nil {
		fmt.Fprintf(&b, "\nusers: %d requests at %.1f of %.0f qps asked (%d failed), through %s, over %s\n",
			t.Requests, t.AchievedQPS, t.AskedQPS, t.Errors, t.URL, t.Duration.Round(time.Second))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtLatency(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return latency.Format(d)
}

// WriteAAResults writes aa.json and aa.md into dir and returns their paths.
func WriteAAResults(dir string, r *AAResult) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	jp := filepath.Join(dir, "aa.json")
	if err := os.WriteFile(jp, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	var md strings.Builder
	md.WriteString("# danki A/A: the same version rolled out again and again, none may be rejected\n\n")
	fmt.Fprintf(&md, "Each run: a new tag of the same sample app (same image, same env), lab/manifests/danki's warm-up config unchanged, canary steps %s, danki/istio rungs [20, 100], under steady user traffic. Started %s, %s so far.\n\n",
		r.Steps, r.Start.UTC().Format(time.RFC3339), r.Elapsed.Round(time.Second))
	if err := WriteAAReport(&md, r); err != nil {
		return nil, err
	}
	mp := filepath.Join(dir, "aa.md")
	if err := os.WriteFile(mp, []byte(md.String()), 0o644); err != nil {
		return nil, err
	}
	return []string{mp, jp}, nil
}
