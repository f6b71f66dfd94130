package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/warmupstep"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Config is one demo run.
type Config struct {
	// Common: QPS default 80, Settle (users on the freshly started v1 pods)
	// default 45 s.
	Common
	// Before and After are the measured steady stretches around each
	// rollout.
	Before, After time.Duration
	// Timeout bounds one rollout.
	Timeout time.Duration
	// Oracle also measures how long a fresh pod takes to stop improving
	// (make bench), to compare danki's adaptive warm-up length with.
	Oracle bool
	// Contenders also rolls out, between the baseline and danki and under
	// the same users, what users would pick instead of danki (make bench):
	// Istio's slow start and a fixed warm-up of 100 requests.
	Contenders bool
	// Mirror also rolls out, just before danki and under the same users,
	// danki warming the canary on mirrored user traffic instead of synthetic
	// load (lab/manifests/mirror, make bench): the two warm-up sources side
	// by side.
	Mirror bool
	// SkipBadVersion leaves out the bad version's rollout (make bench: it
	// yields no ratio, and make demo measures it).
	SkipBadVersion bool
	// Control also rolls out, right after danki and under the same users,
	// danki's Rollout with its warm-up step replaced by a pause as long as
	// danki's warm-up took (make bench): the new pods start and sit at
	// weight 0 with no warm-up traffic, so the users' latency on stable
	// during danki's warm-up is judged against that control, not against
	// the steady state alone.
	Control bool
	// Spring also rolls the Spring Boot sample app (a slow-warming JVM) v1
	// → v2 twice under its own users, after the sample app's rollouts:
	// with a fixed warm-up of 100 requests per pod
	// (lab/manifests/spring-fixed100) and with danki's default warm-up
	// (lab/manifests/spring-danki) (make bench).
	Spring bool
	// SpringQPS is the Spring app's steady user traffic (default 40, what
	// TestLabSpringRollout's users send on the lab's two shared cores).
	SpringQPS float64
}

// Defaults for Config fields left zero.
func (c Config) withDefaults() Config {
	c.Common = c.Common.withDefaults(80, 45*time.Second)
	if c.Before == 0 {
		c.Before = 30 * time.Second
	}
	if c.After == 0 {
		c.After = 30 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.SpringQPS == 0 {
		c.SpringQPS = 40
	}
	return c
}

// Result is what the demo measured.
type Result struct {
	// Mesh is the lab's LAB_MESH the users' requests went through: strict
	// or permissive is gateway → sidecar (mTLS) → app, none is gateway →
	// app.
	Mesh string `json:"mesh,omitempty"`
	// Scenarios: baseline, the contenders (Config.Contenders), danki with
	// mirrored traffic (Config.Mirror), danki, danki with a bad version
	// (unless Config.SkipBadVersion).
	Scenarios []traffic.Scenario `json:"scenarios"`
	// Runs has the per-rollout details behind each scenario.
	Runs []Run `json:"runs"`
	// Bad is nil when the demo left the bad version out (SkipBadVersion).
	Bad     *BadVersion    `json:"badVersion,omitempty"`
	Traffic traffic.Result `json:"traffic"`
	// SpringTraffic is the Spring app's users (Config.Spring): its own
	// host on the gateway, its own pace.
	SpringTraffic *traffic.Result `json:"springTraffic,omitempty"`
	// UserFailures and SpringUserFailures say where the users' failed
	// requests fell (Traffic.Errors, SpringTraffic.Errors).
	UserFailures       *UserFailures `json:"userFailures,omitempty"`
	SpringUserFailures *UserFailures `json:"springUserFailures,omitempty"`
	// SpringError is why the Spring app's rollouts are missing, when they
	// failed.
	SpringError string  `json:"springError,omitempty"`
	Oracle      *Oracle `json:"oracle,omitempty"`
	// Ratios are the headline figures, each measured within this run.
	Ratios []Ratio `json:"ratios"`
	// Samples is every user request (for charts); not in JSON.
	Samples []traffic.Sample `json:"-"`
	// Origins and Ends bound the chart panels (the measured phases), by
	// scenario.
	Origins, Ends []time.Time `json:"-"`
}

// Run is one rollout: when it started and ended, and the canary weights the
// VirtualService had on the way.
type Run struct {
	Scenario string           `json:"scenario"`
	Version  string           `json:"version"`
	Start    time.Time        `json:"start"`
	End      time.Time        `json:"end"`
	Outcome  string           `json:"outcome"` // promoted or aborted
	Weights  []WeightChange   `json:"weights"`
	Markers  []traffic.Marker `json:"markers"`
	// Warmup is danki/warmup's summary (danki scenarios).
	Warmup string `json:"warmup,omitempty"`
	// WarmupRequests is how many synthetic warm-up requests each canary pod
	// got.
	WarmupRequests int `json:"warmupRequests,omitempty"`
	// WarmupMirrored is how many mirrored user requests warmed the canary
	// (all its pods together: Envoy, not danki, spreads them over the pods).
	WarmupMirrored int `json:"warmupMirrored,omitempty"`
	// WarmupStart and WarmupEnd bound the danki/warmup step: from the step
	// index reaching it to the index moving on (zero without the step).
	WarmupStart time.Time `json:"warmupStart,omitzero"`
	WarmupEnd   time.Time `json:"warmupEnd,omitzero"`
	// HoldStart and HoldEnd bound the stretch the new pods sat at weight 0
	// before the first setWeight: danki/warmup's step, or the pause that
	// stands in for it in the control (isHoldStep). Hold is what the users
	// saw meanwhile, all of them on stable.
	HoldStart time.Time        `json:"holdStart,omitzero"`
	HoldEnd   time.Time        `json:"holdEnd,omitzero"`
	Hold      *latency.Summary `json:"hold,omitempty"`
	// WarmupQPS and WarmupConnections are the warm-up's pace per pod.
	WarmupQPS         float64 `json:"warmupQPS,omitempty"`
	WarmupConnections int     `json:"warmupConnections,omitempty"`
	// Envoy is the gateway's load-balancing config for the Rollout's two
	// clusters as Envoy holds it (config_dump), for the slow-start scenario:
	// proof that istiod turned the DestinationRule into slow start.
	Envoy string `json:"envoy,omitempty"`
}

// WarmupDuration is how long the danki/warmup step ran; 0 when the rollout
// had none (or it was not seen to end).
func (r Run) WarmupDuration() time.Duration {
	if r.WarmupStart.IsZero() || r.WarmupEnd.Before(r.WarmupStart) {
		return 0
	}
	return r.WarmupEnd.Sub(r.WarmupStart)
}

// HoldDuration is how long the new pods sat at weight 0 in the hold step; 0
// when the rollout had none (or it was not seen to end).
func (r Run) HoldDuration() time.Duration {
	if r.HoldStart.IsZero() || r.HoldEnd.Before(r.HoldStart) {
		return 0
	}
	return r.HoldEnd.Sub(r.HoldStart)
}

// WeightChange is the canary weight on the VirtualService from At on.
type WeightChange struct {
	At     time.Time `json:"at"`
	Weight int32     `json:"weight"`
}

// BadVersion is how danki handled a version with injected slowness.
type BadVersion struct {
	Version string `json:"version"`
	// Slowness is the injected fault, e.g. "5% of requests +1000ms".
	Slowness string `json:"slowness"`
	Aborted  bool   `json:"aborted"`
	// Detection is from the first user weight on the bad canary to the abort;
	// SincePatch from the image change to the abort.
	Detection  time.Duration `json:"detection"`
	SincePatch time.Duration `json:"sincePatch"`
	// MaxWeight is the most users the bad canary ever had (percent).
	MaxWeight   int32 `json:"maxWeight"`
	FinalWeight int32 `json:"finalWeight"`
	// UserRequests is how many users' requests Envoy sent to the bad
	// version (its canary cluster) before and after the abort.
	UserRequests int64  `json:"userRequests"`
	Reason       string `json:"reason"`
}

// target is the Rollout a scenario rolls out: the sample app's or the
// Spring app's, with the names the lab/manifests give them.
type target struct {
	rollout, image, selector string
	// virtualService and canaryHost find the canary's weight.
	virtualService, canaryHost string
}

var (
	mainApp   = target{rollout: "app", image: "danki.dev/sample-app", selector: "app=sample-app", virtualService: "app", canaryHost: "app-canary"}
	springApp = target{rollout: "app-spring", image: "danki.dev/sample-app-spring", selector: "app=sample-app-spring", virtualService: "app-spring", canaryHost: "app-spring-canary"}
)

// lab is the demo's handle on the lab.
type lab struct {
	cfg   Config
	kube  kubernetes.Interface
	argo  argoclient.Interface
	istio istioclient.Interface
	// reinstalls are the stretches in which the lab swapped an app's
	// Rollout between scenarios (installFiles; Name: the Rollout): its
	// pods deleted, none serving until the new ones are Healthy.
	reinstalls []traffic.Phase
}

// Demo runs baseline and danki rollouts of v2 (with the contenders between
// them when asked for) and a bad v3 under steady user traffic. The lab must
// be up.
func Demo(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig %s (is the lab up? make lab-up): %w", cfg.Kubeconfig, err)
	}
	l := &lab{cfg: cfg, kube: kubernetes.NewForConfigOrDie(rc), argo: argoclient.NewForConfigOrDie(rc), istio: istioclient.NewForConfigOrDie(rc)}
	ex := filepath.Join(cfg.Root, "lab", "manifests")
	if err := l.kubectl(ctx, "apply", "-f", filepath.Join(ex, "10-services.yaml"), "-f", filepath.Join(ex, "20-gateway.yaml")); err != nil {
		return nil, err
	}
	// Users arrive once the gateway answers and stay for the whole traffic.
	if err := l.install(ctx, mainApp, filepath.Join(ex, "baseline")); err != nil {
		return nil, err
	}
	cfg.Log.Info("users: steady traffic through the gateway", "url", cfg.GatewayURL, "qps", cfg.QPS)
	users, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: cfg.GatewayURL, QPS: cfg.QPS})
	if err != nil {
		return nil, err
	}
	res := &Result{Mesh: cfg.Mesh}
	var phases [][]traffic.Phase
	defer func() {
		if users != nil {
			users.Stop()
		}
	}()
	for i, sc := range cfg.scenarios() {
		if i > 0 {
			if err := l.install(ctx, mainApp, filepath.Join(ex, sc.dir), sc.with...); err != nil {
				return nil, err
			}
		}
		var lb string
		if sc.name == SlowStart {
			// Measured, not assumed: what istiod made of the DestinationRule.
			lb = l.envoySlowStart(ctx)
		}
		cfg.Log.Info("users warm the v1 pods (not measured)", "scenario", sc.name, "for", cfg.Settle)
		if err := sleep(ctx, cfg.Settle+cfg.Before); err != nil {
			return nil, err
		}
		run, err := l.rollout(ctx, mainApp, sc.name, "v2", nil)
		if err != nil {
			return nil, err
		}
		if run.Outcome != "promoted" {
			return nil, fmt.Errorf("%s: the good version was %s, not promoted: see `kubectl describe rollout app`", sc.name, run.Outcome)
		}
		run.Envoy = lb
		if err := sleep(ctx, cfg.After); err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
		phases = append(phases, cfg.phases(run))
	}

	if cfg.Control {
		danki, ok := res.run(Danki)
		if !ok || danki.WarmupDuration() <= 0 {
			return nil, errors.New("control: danki's rollout has no measured warm-up to match the pause to")
		}
		run, err := l.control(ctx, ex, danki.WarmupDuration())
		if err != nil {
			return nil, err
		}
		if err := sleep(ctx, cfg.After); err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
		phases = append(phases, cfg.phases(run))
		if !cfg.SkipBadVersion {
			// The bad version is rolled out over danki's Rollout.
			if err := l.install(ctx, mainApp, filepath.Join(ex, "danki")); err != nil {
				return nil, err
			}
		}
	}

	if !cfg.SkipBadVersion {
		// A bad version, with danki: 5 % of requests take an extra second.
		bad, run, err := l.badVersion(ctx)
		if err != nil {
			return nil, err
		}
		res.Bad = bad
		if err := sleep(ctx, cfg.After); err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *run)
		phases = append(phases, cfg.phases(run))
	}

	res.Traffic = users.Stop()
	users = nil
	res.Samples = res.Traffic.Samples
	res.UserFailures = userFailuresOf(res.Traffic.Samples, phases, l.reinstallsOf(mainApp))
	if cfg.Spring {
		runs, ph, t, err := l.spring(ctx, ex)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			// The sample app's rollouts were measured: keep them, and say
			// why Spring's are missing.
			cfg.Log.Error("the Spring app's rollouts failed; the results leave them out", "err", err)
			res.SpringError = err.Error()
		} else {
			res.Runs = append(res.Runs, runs...)
			phases = append(phases, ph...)
			res.SpringTraffic = &t
			res.Samples = append(res.Samples, t.Samples...)
			res.SpringUserFailures = userFailuresOf(t.Samples, ph, l.reinstallsOf(springApp))
		}
	}
	for i := range res.Runs {
		r := &res.Runs[i]
		if d := r.HoldDuration(); d > 0 {
			st := traffic.Summarize(res.Samples, []traffic.Phase{{Name: "hold", From: r.HoldStart, To: r.HoldEnd}})[0].Summary
			r.Hold = &st
		}
	}
	for i, r := range res.Runs {
		name := r.Scenario
		res.Scenarios = append(res.Scenarios, traffic.Scenario{
			Name:            name,
			Phases:          traffic.Summarize(res.Samples, phases[i]),
			RolloutDuration: r.End.Sub(r.Start),
			Markers:         r.Markers,
		})
		res.Origins = append(res.Origins, phases[i][0].From)
		res.Ends = append(res.Ends, phases[i][len(phases[i])-1].To)
	}
	if cfg.Oracle {
		cfg.Log.Info("oracle: a fresh pod loaded at the warm-up's pace until well past warm (5,000 requests)")
		danki, ok := res.run(Danki)
		if !ok {
			return nil, errors.New("oracle: no danki rollout to take the warm-up's pace from")
		}
		if res.Oracle, err = MeasureOracle(ctx, cfg.Kubeconfig, 5000, danki.WarmupQPS, danki.WarmupConnections); err != nil {
			return nil, fmt.Errorf("oracle: %w", err)
		}
	}
	res.Ratios = ratios(res)
	return res, nil
}

// Scenario names, as the table, chart and ratios show them.
const (
	Baseline  = "baseline"
	SlowStart = "Istio slow start"
	Fixed100  = "fixed warm-up 100"
	Danki     = "danki"
	// DankiMirror is danki warming on mirrored user traffic; "danki" alone
	// warms with synthetic load.
	DankiMirror = "danki (mirror)"
	BadDanki    = "danki, bad version"
	// Control is danki's Rollout with a pause instead of the warm-up: the
	// new pods get no warm-up traffic (Config.Control).
	Control = "control (no warm-up)"
	// The Spring app's rollouts (Config.Spring).
	SpringFixed100 = "Spring: fixed warm-up 100"
	SpringDanki    = "Spring: danki"
)

// contenders are the scenarios besides danki that the ratios compare with
// it (contender ÷ danki), in the order they are rolled out.
var contenders = []string{Baseline, SlowStart, Fixed100, DankiMirror}

// scenario is one rollout of the good version: its name, its directory
// under lab/manifests, and other files there it needs (with).
type scenario struct {
	name, dir string
	with      []string
}

// scenarios lists the good-version rollouts in order: the baseline, the
// contenders when asked for, danki with mirrored traffic when asked for
// (next to danki, to compare the warm-up sources), danki last (the bad
// version needs its Rollout).
func (c Config) scenarios() []scenario {
	s := []scenario{{name: Baseline, dir: "baseline"}}
	if c.Contenders {
		s = append(s, scenario{name: SlowStart, dir: "slowstart"}, scenario{name: Fixed100, dir: "fixed100"})
	}
	if c.Mirror {
		// Its analysis step uses danki's AnalysisTemplate.
		s = append(s, scenario{name: DankiMirror, dir: "mirror", with: []string{filepath.Join("danki", "40-analysis.yaml")}})
	}
	return append(s, scenario{name: Danki, dir: "danki"})
}

// run returns the rollout of the named scenario.
func (r *Result) run(name string) (Run, bool) {
	for _, run := range r.Runs {
		if run.Scenario == name {
			return run, true
		}
	}
	return Run{}, false
}

// phases are the measured stretches around a rollout: the steady state
// before it, the rollout itself, and the steady state after it.
func (c Config) phases(run *Run) []traffic.Phase {
	return []traffic.Phase{
		{Name: "before", From: run.Start.Add(-c.Before), To: run.Start},
		{Name: "during", From: run.Start, To: run.End},
		{Name: "after", From: run.End, To: run.End.Add(c.After)},
	}
}

// install replaces the Rollout with the one in dir (v1), with the files
// with (relative to dir's parent) applied first, and waits until it is
// Healthy (installFiles).
func (l *lab) install(ctx context.Context, app target, dir string, with ...string) error {
	var files []string
	for _, f := range with {
		files = append(files, filepath.Join(filepath.Dir(dir), f))
	}
	return l.installFiles(ctx, app, "lab/manifests/"+filepath.Base(dir), append(files, dir)...)
}

// installFiles replaces app's Rollout with the one in files (applied in
// order; name says what they are, for the log) and waits until it is
// Healthy with 2 pods. The stretch is noted in l.reinstalls: users' requests
// in it find no pod (failures the report tells apart: userFailures).
func (l *lab) installFiles(ctx context.Context, app target, name string, files ...string) error {
	l.cfg.Log.Info("installing "+name, "rollout", app.rollout)
	from := time.Now()
	defer func() {
		l.reinstalls = append(l.reinstalls, traffic.Phase{Name: app.rollout, From: from, To: time.Now()})
	}()
	if err := l.kubectl(ctx, "delete", "rollout", app.rollout, "--ignore-not-found", "--wait"); err != nil {
		return err
	}
	// A scenario's other objects (the slow start's DestinationRules) carry
	// this label: none may outlive it into the next scenario.
	if err := l.kubectl(ctx, "delete", "destinationrules.networking.istio.io", "-n", "default", "-l", "danki.dev/lab-scenario", "--ignore-not-found", "--wait"); err != nil {
		return err
	}
	if err := wait(ctx, 2*time.Minute, "the old pods to go", func() (bool, error) {
		pods, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: app.selector})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		return err
	}
	args := []string{"apply"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	if err := l.kubectl(ctx, args...); err != nil {
		return err
	}
	return wait(ctx, 3*time.Minute, "Rollout "+app.rollout+" Healthy with 2 pods", func() (bool, error) {
		ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, app.rollout, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.AvailableReplicas == 2, nil
	})
}

// rollout sets the image to version (with env) and follows the rollout to
// its end (promoted or aborted), noting steps and weights.
func (l *lab) rollout(ctx context.Context, app target, scenario, version string, env map[string]string) (*Run, error) {
	log := l.cfg.Log.With("scenario", scenario, "version", version)
	envList := []map[string]string{}
	for k, v := range env {
		envList = append(envList, map[string]string{"name": k, "value": v})
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": app.image + ":" + version},
		{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": envList},
	})
	run := &Run{Scenario: scenario, Version: version, Start: time.Now()}
	log.Info("rolling out")
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Patch(ctx, app.rollout, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("set image %s: %w", version, err)
	}
	generation := ro.Generation
	lastStep, lastWeight := int32(-1), int32(-1)
	deadline := time.Now().Add(l.cfg.Timeout)
	for {
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return nil, err
		}
		now := time.Now()
		if now.After(deadline) {
			// The run so far goes back too: the control only needs its hold.
			run.End, run.Outcome = now, "unfinished"
			return run, fmt.Errorf("%s: rollout of %s not finished after %s", scenario, version, l.cfg.Timeout)
		}
		ro, err = l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, app.rollout, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if w, err := l.canaryWeight(ctx, app); err == nil && w != lastWeight {
			run.Weights = append(run.Weights, WeightChange{At: now, Weight: w})
			if lastWeight >= 0 {
				log.Info("canary weight", "percent", w)
				// The chart marks what users felt: every weight change.
				run.Markers = append(run.Markers, traffic.Marker{At: now, Label: fmt.Sprintf("%d%%", w)})
			}
			lastWeight = w
		}
		// Judge only what the controller has seen of the current spec (the
		// generation can move on after the patch: Argo writes spec too).
		if ro.Generation < generation || ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
			continue
		}
		if i := ro.Status.CurrentStepIndex; i != nil && *i != lastStep {
			steps := ro.Spec.Strategy.Canary.Steps
			run.noteStep(steps, lastStep, *i, now)
			if int(*i) < len(steps) {
				step := steps[*i]
				label := stepLabel(step)
				// Weight steps show as weight changes; pauses need no line.
				if step.Plugin != nil || step.Analysis != nil {
					run.Markers = append(run.Markers, traffic.Marker{At: now, Label: label})
				}
				log.Info("step", "index", *i, "step", label)
			}
			lastStep = *i
		}
		if run.Warmup == "" {
			if w := warmupSummary(ro); w.message != "" {
				run.Warmup, run.WarmupRequests, run.WarmupMirrored = w.message, w.perPod, w.mirrored
				run.WarmupQPS, run.WarmupConnections = warmupConfigPace(ro)
				log.Info("warm-up finished", "summary", w.message)
			}
		}
		switch {
		case ro.Status.Abort:
			run.End, run.Outcome = now, "aborted"
			run.Markers = append(run.Markers, traffic.Marker{At: now, Label: "abort"})
			log.Warn("aborted", "message", ro.Status.Message)
			return run, nil
		case ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.StableRS == ro.Status.CurrentPodHash:
			run.End, run.Outcome = now, "promoted"
			run.Markers = append(run.Markers, traffic.Marker{At: now, Label: "promoted"})
			log.Info("promoted", "took", now.Sub(run.Start).Round(time.Second))
			return run, nil
		}
	}
}

// badVersion rolls out v3 with 5 % of requests a second slower, with danki.
func (l *lab) badVersion(ctx context.Context) (*BadVersion, *Run, error) {
	bad := &BadVersion{Version: "v3", Slowness: "5% of requests +1000ms"}
	before, err := l.canaryRequests(ctx)
	if err != nil {
		return nil, nil, err
	}
	run, err := l.rollout(ctx, mainApp, BadDanki, "v3", map[string]string{"SLOW_MS": "1000", "SLOW_PERCENT": "5"})
	if err != nil {
		return nil, nil, err
	}
	bad.Aborted = run.Outcome == "aborted"
	bad.SincePatch = run.End.Sub(run.Start)
	for _, w := range run.Weights {
		if w.Weight > 0 && bad.Detection == 0 {
			bad.Detection = run.End.Sub(w.At)
		}
		bad.MaxWeight = max(bad.MaxWeight, w.Weight)
	}
	if !bad.Aborted {
		return bad, run, fmt.Errorf("the bad version was %s, not aborted", run.Outcome)
	}
	// The abort puts every user back on stable at once.
	if err := wait(ctx, 30*time.Second, "canary weight 0", func() (bool, error) {
		w, err := l.canaryWeight(ctx, mainApp)
		bad.FinalWeight = w
		return err == nil && w == 0, err
	}); err != nil {
		return bad, run, err
	}
	after, err := l.canaryRequests(ctx)
	if err != nil {
		return bad, run, err
	}
	bad.UserRequests = after - before
	evs, err := l.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=app,reason=DankiRampFailed"})
	if err == nil && len(evs.Items) > 0 {
		bad.Reason = evs.Items[len(evs.Items)-1].Message
	} else if ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(ctx, "app", metav1.GetOptions{}); err == nil {
		bad.Reason = ro.Status.Message
	}
	return bad, run, nil
}

// canaryUpstreamTotal is Envoy's count of requests it sent to the canary
// Service's cluster: users' requests (the warm-up goes to pod IPs directly).
var canaryUpstreamTotal = regexp.MustCompile(`(?m)^cluster\.outbound\|8080\|\|app-canary\.default\.svc\.cluster\.local;?\.upstream_rq_total: (\d+)$`)

// canaryRequests reads canaryUpstreamTotal from Envoy's admin API (0 before
// the cluster has seen a request).
func (l *lab) canaryRequests(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cfg.EnvoyAdminURL+"/stats?filter=upstream_rq_total", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read Envoy's request counters: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("read Envoy's request counters: %w", err)
	}
	m := canaryUpstreamTotal.FindSubmatch(body)
	if m == nil {
		return 0, nil
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

func (l *lab) canaryWeight(ctx context.Context, app target) (int32, error) {
	vs, err := l.istio.NetworkingV1().VirtualServices("default").Get(ctx, app.virtualService, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for _, r := range vs.Spec.Http {
		for _, d := range r.Route {
			if d.Destination.Host == app.canaryHost || strings.HasPrefix(d.Destination.Host, app.canaryHost+".") {
				return d.Weight, nil
			}
		}
	}
	return 0, fmt.Errorf("VirtualService default/%s has no %s destination", app.virtualService, app.canaryHost)
}

func stepLabel(s v1alpha1.CanaryStep) string {
	switch {
	case s.SetWeight != nil:
		return fmt.Sprintf("setWeight %d", *s.SetWeight)
	case s.Pause != nil:
		if s.Pause.Duration != nil {
			return "pause " + s.Pause.Duration.String()
		}
		return "pause"
	case s.Plugin != nil:
		return s.Plugin.Name
	case s.Analysis != nil:
		return "analysis"
	case s.SetCanaryScale != nil:
		return "setCanaryScale"
	}
	return "step"
}

// noteStep notes the danki/warmup step's start and end as the rollout's
// step index moves from one step to the next at now: the warm-up's length
// runs from the index reaching its step to the index moving on (to the next
// step, or past the last at promotion). Only the first warm-up step counts.
//
// The hold (HoldStart, HoldEnd) is noted the same way for the first hold
// step (isHoldStep): danki's warm-up, or the control's pause in its place.
func (r *Run) noteStep(steps []v1alpha1.CanaryStep, from, to int32, now time.Time) {
	if isWarmupStep(steps, from) && !r.WarmupStart.IsZero() && r.WarmupEnd.IsZero() {
		r.WarmupEnd = now
	}
	if isWarmupStep(steps, to) && r.WarmupStart.IsZero() {
		r.WarmupStart = now
	}
	if isHoldStep(steps, from) && !r.HoldStart.IsZero() && r.HoldEnd.IsZero() {
		r.HoldEnd = now
	}
	if isHoldStep(steps, to) && r.HoldStart.IsZero() {
		r.HoldStart = now
	}
}

// isHoldStep says whether step i of steps holds the new pods at weight 0:
// danki/warmup, or a pause before any setWeight (the control's stand-in for
// the warm-up; a pause after a setWeight holds users on the canary).
func isHoldStep(steps []v1alpha1.CanaryStep, i int32) bool {
	if isWarmupStep(steps, i) {
		return true
	}
	if i < 0 || int(i) >= len(steps) || steps[i].Pause == nil {
		return false
	}
	return !slices.ContainsFunc(steps[:i], func(s v1alpha1.CanaryStep) bool { return s.SetWeight != nil })
}

// isWarmupStep says whether step i of steps is danki/warmup.
func isWarmupStep(steps []v1alpha1.CanaryStep, i int32) bool {
	return i >= 0 && int(i) < len(steps) && steps[i].Plugin != nil && steps[i].Plugin.Name == "danki/warmup"
}

// warmupDone is what a finished danki/warmup step reports.
type warmupDone struct {
	message string
	// perPod is the synthetic requests per canary pod; mirrored the
	// mirrored user requests over all canary pods (either may be 0).
	perPod, mirrored int
}

// mirroredRequests finds the mirror source's count in the step's message
// ("converged on mirrored traffic after 1500 mirrored requests in …"),
// wherever the message puts it (mode afterSynthetic appends it to the
// synthetic summary).
var mirroredRequests = regexp.MustCompile(`after (\d+) mirrored requests`)

// warmupSummary returns danki/warmup's message and requests once the step
// succeeded for the current canary: synthetic requests per pod from its
// status, mirrored requests from its message (a mirror-only warm-up has no
// per-pod counts).
func warmupSummary(ro *v1alpha1.Rollout) warmupDone {
	for _, s := range ro.Status.Canary.StepPluginStatuses {
		if s.Name != "danki/warmup" || s.Operation != v1alpha1.StepPluginOperationRun || s.Phase != v1alpha1.StepPluginPhaseSuccessful {
			continue
		}
		var st warmupstep.Status
		if json.Unmarshal(s.Status, &st) != nil || st.CanaryHash != ro.Status.CurrentPodHash {
			continue
		}
		w := warmupDone{message: s.Message}
		if m := mirroredRequests.FindStringSubmatch(s.Message); m != nil {
			w.mirrored, _ = strconv.Atoi(m[1]) // \d+: only an absurd length fails
		}
		// A fixed count (untilConverged: false) succeeds with no pod
		// converged: count the pods it warmed.
		if pods := max(len(st.Pods), st.Converged); pods > 0 {
			w.perPod = int(st.Requests) / pods
		}
		if w.perPod == 0 && w.mirrored == 0 {
			continue
		}
		return w
	}
	return warmupDone{}
}

// warmupConfigPace reads qps and connections from the danki/warmup step
// (warmupStepConfig: the plugin's parser, its defaults), pkg/warmup's
// defaults without one.
func warmupConfigPace(ro *v1alpha1.Rollout) (float64, int) {
	if c, ok := warmupStepConfig(ro); ok {
		return c.QPS, c.Connections
	}
	return warmup.DefaultQPS, warmup.DefaultConnections
}

func (l *lab) kubectl(ctx context.Context, args ...string) error {
	return kubectl(ctx, l.cfg.Kubeconfig, args...)
}

// kubectl runs kubectl with args against the cluster of kubeconfig; its
// error carries kubectl's output.
func kubectl(ctx context.Context, kubeconfig string, args ...string) error {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func wait(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not after %s (last error: %v)", what, limit, last)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WriteResults writes results.json, results.md, latency.svg and
// latency.png into dir and returns their paths.
func WriteResults(dir string, res *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "results.json")
	if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	var md strings.Builder
	md.WriteString("# danki demo: what users saw during the rollout\n\n")
	if err := WriteReport(&md, traffic.Markdown, res); err != nil {
		return nil, err
	}
	p = filepath.Join(dir, "results.md")
	if err := os.WriteFile(p, []byte(md.String()), 0o644); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	var panels []traffic.ChartPanel
	for i, sc := range res.Scenarios {
		to := res.Ends[i]
		var samples []traffic.Sample
		for _, s := range res.Samples {
			if !s.Start.Before(res.Origins[i]) && s.Start.Before(to) {
				samples = append(samples, s)
			}
		}
		panels = append(panels, traffic.ChartPanel{Name: sc.Name, Samples: samples, Markers: sc.Markers, Start: res.Origins[i]})
	}
	for _, ext := range []string{"svg", "png"} {
		p := filepath.Join(dir, "latency."+ext)
		if err := traffic.SaveChart(p, panels); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
