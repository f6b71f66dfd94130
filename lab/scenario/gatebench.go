package scenario

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// GateWay is one of the three ways a new pod meets its users in the gate
// bench: a Deployment of lab/manifests/gate, reached through the lab gateway
// by its Host.
type GateWay struct {
	Name       string `json:"name"`
	Deployment string `json:"deployment"`
	Host       string `json:"host"`
	// Scale is the Deployment the scale-up event grows, to ScaleTo pods
	// (default: Deployment, to 4). The control grows another one.
	Scale   string `json:"scale,omitempty"`
	ScaleTo int32  `json:"scaleTo,omitempty"`
	// Manifest (relative to the repository) is applied for this way on top
	// of lab/manifests/gate; Events are the events it goes through (default
	// EventScaleUp and EventPodKill) when the run has them.
	Manifest string   `json:"manifest,omitempty"`
	Events   []string `json:"events,omitempty"`
	// HeldBack: the scaled Deployment's pods carry a readiness gate nobody
	// sets, so they are never Ready; the bench waits for their containers
	// instead (the control's).
	HeldBack bool `json:"heldBack,omitempty"`
}

// scaled is the Deployment the scale-up grows and to how many pods.
func (w GateWay) scaled() (string, int32) {
	name, n := w.Scale, w.ScaleTo
	if name == "" {
		name = w.Deployment
	}
	if n == 0 {
		n = 4
	}
	return name, n
}

// The three ways, side by side in one run (lab/manifests/gate).
var GateWays = []GateWay{
	{Name: "no warm-up", Deployment: "app-cold", Host: "cold.lab"},
	{Name: "Istio slow start", Deployment: "app-slowstart", Host: "slowstart.lab"},
	{Name: "danki warm gate", Deployment: "app-gated", Host: "gated.lab"},
}

// GateControl is the bench's control: the floor under any warm-up on the
// node. Its users are served by 2 pods like the others', but its "scale-up"
// starts two pods of the same template that the users' Service selects but
// a readiness gate nobody sets holds out of load balancing
// (lab/manifests/gatebench/start-only.yaml): the EndpointSlice gains two
// not-ready endpoints, as in a gated scale-up, and their JVMs start on the
// node and get no request at all, neither users' nor a warm-up's. What its
// users feel in the minute after is what a served scale-up's pod start
// costs them; a warm-up only adds to it.
var GateControl = GateWay{
	Name: "JVM start only (control)", Deployment: "app-startonly", Host: "startonly.lab",
	Scale: "app-startonly-extra", ScaleTo: 2, HeldBack: true,
	Manifest: "lab/manifests/gatebench/start-only.yaml", Events: []string{EventQuiet, EventScaleUp},
}

// deployments are the way's Deployments: the one serving its users, and the
// one its scale-up grows when that is another (the control's).
func (w GateWay) deployments() []string {
	if s, _ := w.scaled(); s != w.Deployment {
		return []string{w.Deployment, s}
	}
	return []string{w.Deployment}
}

// startReplicas is a Deployment of the way before any event: 2 serving its
// users, 0 for the control's extra one (until its scale-up).
func (w GateWay) startReplicas(deployment string) int32 {
	if deployment != w.Deployment {
		return 0
	}
	return 2
}

// AllGateWays are the three ways and the control: the full bench.
func AllGateWays() []GateWay { return append(slices.Clone(GateWays), GateControl) }

// events are the events the way goes through.
func (w GateWay) events() []string {
	if len(w.Events) > 0 {
		return w.Events
	}
	return []string{EventScaleUp, EventPodKill}
}

// The bench's phases: a steady state before each event and the minute
// after it.
const (
	PhaseSteady     = "steady"                   // 2 pods, before the scale-up
	PhaseScaleUp    = "scale-up"                 // the minute after 2 → 4
	PhaseSteady4    = "steady 4"                 // 4 pods, before the pod kill
	PhasePodKill    = "pod kill"                 // the minute after one pod per way was deleted
	PhaseQuietPrev  = "quiet before"             // the control: a minute, then…
	PhaseQuiet      = "quiet"                    // …the next, nothing happening in between
	EventScaleUp    = "scale 2 → 4"              // event (a)
	EventPodKill    = "pod killed"               // event (b)
	EventQuiet      = "nothing (a quiet minute)" // the control's first: the lab's noise floor
	gateGoalRatio   = 1.2                        // the goal: gate, scale-up ÷ steady, p99 and p99.9
	gateSettleReady = 2 * time.Second            // after pods are Ready: Envoy has their endpoints
	// gateSettleUndo follows the undoing of a scale-up, before the next
	// repeat's steady state: the deleted pods' last requests (the sample
	// app has no preStop drain: up to a 3 s timeout) and Envoy's endpoint
	// update must not fall into the minute the next event is divided by.
	gateSettleUndo = 15 * time.Second
	// gateReadyWithin bounds the wait for a way's pods Ready: the gate warms
	// one pod per node at a time, each within its annotation's deadline (3m
	// in lab/manifests/gate; longer in a gentler config), so two new pods may
	// take twice that.
	gateReadyWithin = 10 * time.Minute
)

// GateBenchConfig is one gate bench run.
type GateBenchConfig struct {
	// Common: Danki runs `danki gate`; QPS is per way (each host gets this
	// much), default 40; Settle (users alone on the fresh pods, which warms
	// them) default 90 s.
	Common
	// Steady: the measured steady state before each event (default After:
	// the same number of requests on both sides, so a p99.9 or max is not
	// compared with one from half the samples). After: the measured stretch
	// after each event.
	Steady, After time.Duration
	// GateLog is where the gate's log goes; GateMaxConcurrent, when > 0,
	// its --max-concurrent (warm-ups at once).
	GateLog           string
	GateMaxConcurrent int
	// Ways are the ways compared (default GateWays and GateControl); Events
	// the events run, in order, each by the ways that go through it
	// (default EventQuiet, EventScaleUp, EventPodKill; empty: none). make
	// demo's short version takes no warm-up, the gate and the control
	// through a scale-up only.
	Ways   []GateWay
	Events []string
	// NoiseMinutes, when > 0: before the events, that many consecutive
	// minutes with nothing happening, each ÷ the one before, per way (the
	// lab's noise: GateNoise).
	NoiseMinutes int
	// Repeat runs each event that many times per way (default 1), the ways
	// taking turns, so the machine's drift hits them alike. A scale-up is
	// undone (and its pods gone) before the next. A way's ratios pool its
	// repeats — every minute after ÷ every steady state before, as one
	// sample each — and EachRepeat lists the repeats' own: one event's
	// minute is a few thousand requests, too few for a p99.9 on a noisy
	// machine.
	Repeat int
}

func (c GateBenchConfig) withDefaults() GateBenchConfig {
	c.Common = c.Common.withDefaults(40, 90*time.Second)
	if c.After == 0 {
		c.After = time.Minute
	}
	if c.Steady == 0 {
		c.Steady = c.After
	}
	if len(c.Ways) == 0 {
		c.Ways = AllGateWays()
	}
	if c.Events == nil {
		c.Events = []string{EventQuiet, EventScaleUp, EventPodKill}
	}
	if c.Repeat < 1 {
		c.Repeat = 1
	}
	return c
}

// GateEvent is an event one way went through.
type GateEvent struct {
	Name string    `json:"name"`
	Way  string    `json:"way"`
	At   time.Time `json:"at"`
}

// GateRatio is one way's tail after an event ÷ its steady state before it.
type GateRatio struct {
	Event string  `json:"event"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// GatePod is a pod created by an event: when it became Ready, and for the
// gated way what the gate's condition said.
type GatePod struct {
	Name  string `json:"name"`
	Event string `json:"event"`
	// EventAt is when that event happened (repeats share its name).
	EventAt time.Time `json:"eventAt"`
	// Ready: the pod became Ready; ReadyAfter is from the event to its Ready
	// condition (API server time, 1 s resolution).
	Ready      bool          `json:"ready"`
	ReadyAfter time.Duration `json:"readyAfter"`
	// Started: its containers' readiness probes passed (ContainersReady),
	// StartedAfter from the event (1 s resolution): the JVM started; a
	// gated pod warms from there to ReadyAfter.
	Started      bool          `json:"started"`
	StartedAfter time.Duration `json:"startedAfter"`
	// Warm is the danki.dev/warm condition's message (gated pods).
	Warm string `json:"warm,omitempty"`
}

// GateWayResult is what users of one way saw.
type GateWayResult struct {
	GateWay
	Events []GateEvent `json:"events"`
	// Phases are the way's steady states and minutes after, one per name:
	// with repeats, all of that name pooled. Ratios divide them.
	Phases []traffic.PhaseStats `json:"phases"`
	Ratios []GateRatio          `json:"ratios"`
	// EachRepeat is every event's own ratio, in order (only with repeats).
	EachRepeat []GateRatio `json:"eachRepeat,omitempty"`
	// Tails and Slowest say when in the minutes after the slow requests
	// came: counts per 10 s over the steady p99.9, and each event's slowest.
	Tails   []GateTail        `json:"tails,omitempty"`
	Slowest []GateSlowRequest `json:"slowest,omitempty"`
	// CPU is the machine's mean CPU busy share per phase name (0..1), when
	// sampled.
	CPU  map[string]float64 `json:"machineCPUBusy,omitempty"`
	Pods []GatePod          `json:"pods"`
	// Traffic is the way's user traffic as a whole (samples not in JSON).
	Traffic traffic.Result `json:"traffic"`
}

// GateBenchResult is the whole run.
type GateBenchResult struct {
	QPS float64 `json:"qpsPerWay"`
	// Mesh is the lab's LAB_MESH (Common.Mesh).
	Mesh string `json:"mesh,omitempty"`
	// Events are all ways' events in the order they happened.
	Events []GateEvent     `json:"events"`
	Ways   []GateWayResult `json:"ways"`
	// Envoy is the slow-start way's load balancing as Envoy holds it: proof
	// istiod turned the DestinationRule into slow start.
	Envoy string `json:"envoySlowStart"`
	// Goal says whether the gate met the goal after the scale-up.
	Goal string `json:"goal"`
	// Noise is each way's quiet minutes (GateBenchConfig.NoiseMinutes).
	Noise []GateNoise `json:"noise,omitempty"`
	// WarmUps counts the gate's warm-ups per pod (its log's "warming pod"
	// lines): more than one is a retry after a failed warm-up, or a warm-up
	// of a pod that was already warm (Rewarmed).
	WarmUps map[string]int `json:"gateWarmUpsPerPod"`
	// Rewarmed are the pods warmed again after the gate had found them warm
	// ("pod warm"): for a pod that did not restart, the gate took a warm,
	// serving pod out of load balancing.
	Rewarmed []string `json:"gateRewarmedPods,omitempty"`
	// From and To bound the chart.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// gateBench is the bench's handle on the lab.
type gateBench struct {
	cfg  GateBenchConfig
	lab  *lab
	kube kubernetes.Interface
	// want is each Deployment's replica count as the bench last set it.
	want map[string]int32
}

// GateBench runs the warm gate bench in the running lab: `danki gate` with
// its webhook, lab/manifests/gate's Deployments under steady user traffic per
// host, then, one way at a time, (a) each scaled 2 → 4 and (b) one pod of
// each deleted, each event between a measured steady state and a measured
// minute.
func GateBench(ctx context.Context, cfg GateBenchConfig) (res *GateBenchResult, err error) {
	cfg = cfg.withDefaults()
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig %s (is the lab up? make lab-up): %w", cfg.Kubeconfig, err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	b := &gateBench{cfg: cfg, kube: kube, lab: &lab{cfg: Config{Common: Common{Kubeconfig: cfg.Kubeconfig, EnvoyAdminURL: cfg.EnvoyAdminURL, Log: cfg.Log}}, kube: kube}, want: map[string]int32{}}
	log := cfg.Log

	log.Info("starting danki gate out of cluster", "danki", cfg.Danki, "log", cfg.GateLog)
	gp, err := StartGate(ctx, kube, GateOptions{Danki: cfg.Danki, Kubeconfig: cfg.Kubeconfig, Root: cfg.Root, LogPath: cfg.GateLog, MaxConcurrent: cfg.GateMaxConcurrent, Mesh: cfg.Mesh,
		MetricsAddress: LabGateMetricsAddress})
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := gp.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	log.Info("danki gate running, webhook registered", "port", gp.Port, "caBundle", filepath.Join(gp.CertDir, "ca.crt"))

	ex := filepath.Join(cfg.Root, "lab", "manifests")
	manifests := []string{"-f", filepath.Join(ex, "gate")}
	for _, w := range cfg.Ways {
		for _, name := range w.deployments() {
			b.want[name] = w.startReplicas(name)
		}
		if w.Manifest != "" {
			manifests = append(manifests, "-f", filepath.Join(cfg.Root, w.Manifest))
		}
	}
	if err := b.lab.kubectl(ctx, append([]string{"apply", "-f", filepath.Join(ex, "20-gateway.yaml")}, manifests...)...); err != nil {
		return nil, err
	}
	defer func() {
		// Leave the lab as found: the gate's Deployments go (the gate is
		// stopped right after and could not warm their pods any more).
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if derr := b.lab.kubectl(dctx, append(append([]string{"delete"}, manifests...), "--ignore-not-found", "--wait=false")...); derr != nil {
			log.Warn("could not remove the gate bench's Deployments", "err", derr)
		}
	}()
	if err := b.awaitReady(ctx, cfg.Ways, gateReadyWithin); err != nil {
		return nil, err
	}
	for _, w := range cfg.Ways {
		if err := awaitHost(ctx, cfg.GatewayURL, w.Host); err != nil {
			return nil, err
		}
	}
	cpu, err := StartCPUSampler(ctx)
	if err != nil {
		log.Warn("no machine CPU figures in the report", "err", err)
	}
	res = &GateBenchResult{QPS: cfg.QPS, Mesh: cfg.Mesh}
	if slices.ContainsFunc(cfg.Ways, func(w GateWay) bool { return w.Deployment == "app-slowstart" }) {
		res.Envoy = b.envoyCluster(ctx, "outbound|8080||app-slowstart.default.svc.cluster.local")
	}

	users := make([]*traffic.Traffic, len(cfg.Ways))
	defer func() {
		for _, u := range users {
			if u != nil {
				u.Stop()
			}
		}
	}()
	for i, w := range cfg.Ways {
		if users[i], err = traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: cfg.GatewayURL, QPS: cfg.QPS, Headers: map[string]string{"Host": w.Host}}); err != nil {
			return nil, err
		}
	}
	log.Info("users: steady traffic to every way's host", "ways", len(cfg.Ways), "qpsPerHost", cfg.QPS, "settle", cfg.Settle, "steady", cfg.Steady)
	if err := sleep(ctx, cfg.Settle); err != nil {
		return nil, err
	}
	var quiet []traffic.Phase
	if cfg.NoiseMinutes > 0 {
		log.Info("the lab's noise: quiet minutes, nothing happening but the users", "minutes", cfg.NoiseMinutes)
		quiet = noisePhases(time.Now(), cfg.NoiseMinutes, time.Minute)
		if err := sleep(ctx, time.Duration(cfg.NoiseMinutes)*time.Minute); err != nil {
			return nil, err
		}
	}

	// One way at a time: each way's event, its minute, its new pods Ready,
	// then the next way's steady state and event. At once, six JVMs would
	// start on the lab's two cores and every way's users would feel the
	// others' cold starts — a node no real scheduler would build; a way's
	// own new pods share the machine with its users as they would a node.
	for _, kind := range cfg.Events {
		for rep := 1; rep <= cfg.Repeat; rep++ {
			for _, w := range cfg.Ways {
				if !slices.Contains(w.events(), kind) {
					continue
				}
				if rep > 1 && kind == EventScaleUp {
					if err := b.scaleBack(ctx, w); err != nil {
						return nil, err
					}
				}
				ev, err := b.event(ctx, kind, w)
				if err != nil {
					return nil, err
				}
				if cfg.Repeat > 1 {
					log.Info("event done", "event", kind, "way", w.Name, "repeat", rep, "of", cfg.Repeat)
				}
				res.Events = append(res.Events, ev)
			}
		}
	}
	for i, w := range cfg.Ways {
		tr := users[i].Stop()
		users[i] = nil
		events := wayEvents(res.Events, w.Name)
		pods, err := b.newPods(ctx, w, events)
		if err != nil {
			return nil, err
		}
		if len(quiet) > 0 {
			res.Noise = append(res.Noise, gateNoise(w.Name, traffic.Summarize(tr.Samples, quiet)))
		}
		phases := gatePhases(events, cfg.Steady, cfg.After)
		if all := append(slices.Clone(quiet), phases...); len(all) > 0 {
			if res.From.IsZero() || all[0].From.Before(res.From) {
				res.From = all[0].From
			}
			if last := all[len(all)-1].To; last.After(res.To) {
				res.To = last
			}
		}
		pooled := traffic.SummarizeByName(tr.Samples, phases)
		wr := GateWayResult{GateWay: w, Events: events, Phases: pooled, Ratios: gateRatios(pooled), Pods: pods, Traffic: tr,
			Tails: gateTails(events, tr.Samples, pooled, cfg.After), Slowest: slowestAfter(events, tr.Samples, cfg.After)}
		if cfg.Repeat > 1 {
			wr.EachRepeat = eachRatio(events, traffic.Summarize(tr.Samples, phases))
		}
		if cpu != nil {
			wr.CPU = cpu.Busy(phases)
		}
		res.Ways = append(res.Ways, wr)
	}
	res.Goal = gateGoal(res.Ways)
	if raw, rerr := os.ReadFile(cfg.GateLog); rerr == nil {
		res.WarmUps, res.Rewarmed = gateWarmUps(string(raw))
	}
	if exited, xerr := gp.Exited(); exited {
		return res, fmt.Errorf("danki gate exited during the bench: %v (log %s)", xerr, cfg.GateLog)
	}
	return res, nil
}

// event runs one way's event: its steady state, the event (a scale-up to
// 4 or the deletion of its oldest pod), the measured minute, then waits for
// its pods Ready (the gated way's: warmed) so the next way's steady state
// is not its warm-up.
func (b *gateBench) event(ctx context.Context, kind string, w GateWay) (GateEvent, error) {
	cfg := b.cfg
	if err := sleep(ctx, cfg.Steady); err != nil {
		return GateEvent{}, err
	}
	ev := GateEvent{Name: kind, Way: w.Name, At: time.Now()}
	switch kind {
	case EventScaleUp:
		name, n := w.scaled()
		cfg.Log.Info("event: scale up", "way", w.Name, "deployment", name, "replicas", n)
		if err := b.lab.kubectl(ctx, "scale", "deployment", name, "--replicas", fmt.Sprint(n)); err != nil {
			return ev, err
		}
		b.want[name] = n
	case EventPodKill:
		victim, err := b.oldestPod(ctx, w.Deployment) // warm, long in service
		if err != nil {
			return ev, err
		}
		cfg.Log.Info("event: delete a pod", "way", w.Name, "pod", victim)
		if err := b.kube.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			return ev, fmt.Errorf("delete pod %s: %w", victim, err)
		}
	case EventQuiet:
		cfg.Log.Info("event: nothing (the next minute ÷ the one before: the lab's noise)", "way", w.Name)
	default:
		return ev, fmt.Errorf("unknown gate bench event %q (want %q, %q or %q)", kind, EventScaleUp, EventPodKill, EventQuiet)
	}
	if err := sleep(ctx, time.Until(ev.At.Add(cfg.After))); err != nil {
		return ev, err
	}
	if err := b.awaitReady(ctx, []GateWay{w}, gateReadyWithin); err != nil {
		return ev, err
	}
	return ev, sleep(ctx, gateSettleReady)
}

// scaleBack undoes a way's scale-up before it is repeated: the scaled
// Deployment back to its start (the control's extra to 0), its pods gone.
func (b *gateBench) scaleBack(ctx context.Context, w GateWay) error {
	name, _ := w.scaled()
	n := w.startReplicas(name)
	b.cfg.Log.Info("undo the scale-up before the next repeat", "way", w.Name, "deployment", name, "replicas", n)
	if err := b.lab.kubectl(ctx, "scale", "deployment", name, "--replicas", fmt.Sprint(n)); err != nil {
		return err
	}
	b.want[name] = n
	if err := b.awaitReady(ctx, []GateWay{w}, gateReadyWithin); err != nil {
		return err
	}
	return sleep(ctx, gateSettleUndo)
}

// wayEvents are one way's events.
func wayEvents(events []GateEvent, way string) []GateEvent {
	var out []GateEvent
	for _, e := range events {
		if e.Way == way {
			out = append(out, e)
		}
	}
	return out
}

// gatePhases are the measured stretches of one way: the steady state before
// each of its events and the after-minute following it.
func gatePhases(events []GateEvent, steady, after time.Duration) []traffic.Phase {
	var out []traffic.Phase
	for _, e := range events {
		p := phasesOf(e.Name)
		out = append(out, traffic.Phase{Name: p.before, From: e.At.Add(-steady), To: e.At}, traffic.Phase{Name: p.after, From: e.At, To: e.At.Add(after)})
	}
	return out
}

// gateRatios divides each event's minute by the steady state right before
// it: p99, p99.9 and max. A ratio whose steady value is 0 is left 0.
func gateRatios(phases []traffic.PhaseStats) []GateRatio {
	get := func(name string) *traffic.PhaseStats {
		for i := range phases {
			if phases[i].Name == name && phases[i].Count > 0 {
				return &phases[i]
			}
		}
		return nil
	}
	var out []GateRatio
	for _, p := range eventPhases {
		after, before := get(p.after), get(p.before)
		if after == nil || before == nil {
			continue
		}
		out = append(out, phaseRatio(p.event, *after, *before))
	}
	return out
}

// eventPhase names an event's phases: the steady state measured before it
// and the minute after it.
type eventPhase struct{ event, before, after string }

// eventPhases are the events' phases.
var eventPhases = []eventPhase{
	{EventQuiet, PhaseQuietPrev, PhaseQuiet},
	{EventScaleUp, PhaseSteady, PhaseScaleUp},
	{EventPodKill, PhaseSteady4, PhasePodKill},
}

// phasesOf is an event's phases; an event of no other kind is measured as
// a scale-up.
func phasesOf(event string) eventPhase {
	i := slices.IndexFunc(eventPhases, func(p eventPhase) bool { return p.event == event })
	if i < 0 {
		i = slices.IndexFunc(eventPhases, func(p eventPhase) bool { return p.event == EventScaleUp })
	}
	return eventPhases[i]
}

// eachRatio is every event's own ratio: gatePhases' stats come in pairs,
// the steady state before and the minute after each event.
func eachRatio(events []GateEvent, stats []traffic.PhaseStats) []GateRatio {
	var out []GateRatio
	for i, e := range events {
		if 2*i+1 >= len(stats) {
			break
		}
		before, after := stats[2*i], stats[2*i+1]
		if before.Count == 0 || after.Count == 0 {
			continue
		}
		out = append(out, phaseRatio(e.Name, after, before))
	}
	return out
}

// phaseRatio divides after's p99, p99.9 and max by before's; a ratio whose
// before is 0 is left 0.
func phaseRatio(event string, after, before traffic.PhaseStats) GateRatio {
	div := func(a, b time.Duration) float64 {
		if b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	return GateRatio{Event: event, P99: div(after.P99, before.P99), P999: div(after.P999, before.P999), Max: div(after.Max, before.Max)}
}

// gateGoal judges the goal: with the gate, the minute after a
// scale-up within 1.2× the steady state at p99 and p99.9. With the control
// in the run it adds the control's ratios: the floor under any warm-up.
func gateGoal(ways []GateWayResult) string {
	scaleUp := func(deployment string) (GateRatio, bool) {
		for _, w := range ways {
			if w.Deployment == deployment {
				return findRatio(w.Ratios, EventScaleUp)
			}
		}
		return GateRatio{}, false
	}
	r, ok := scaleUp("app-gated")
	if !ok {
		return "goal: not measured (no gated scale-up phase)"
	}
	verdict := "met"
	if r.P99 > gateGoalRatio || r.P999 > gateGoalRatio {
		verdict = "NOT met"
	}
	goal := fmt.Sprintf("goal (gate, minute after the scale-up ≤ %.1f× steady at p99 and p99.9): %s — p99 %.2f×, p99.9 %.2f×", gateGoalRatio, verdict, r.P99, r.P999)
	if c, ok := scaleUp(GateControl.Deployment); ok {
		goal += fmt.Sprintf("; the control (two JVMs starting, no request to them): p99 %.2f×, p99.9 %.2f×", c.P99, c.P999)
	}
	for _, w := range ways {
		if q, ok := findRatio(w.Ratios, EventQuiet); ok {
			goal += fmt.Sprintf("; a quiet minute ÷ the one before (nothing happening: the lab's noise): p99 %.2f×, p99.9 %.2f×", q.P99, q.P999)
		}
	}
	return goal
}

// awaitReady waits until each way's Deployments have as many Ready
// replicas as the bench last set and no other pods (a deleted pod gone); a
// held-back Deployment's pods (GateWay.HeldBack) as many with their
// containers ready.
func (b *gateBench) awaitReady(ctx context.Context, ways []GateWay, limit time.Duration) error {
	held := map[string]bool{}
	var names []string
	for _, w := range ways {
		names = append(names, w.deployments()...)
		if s, _ := w.scaled(); w.HeldBack {
			held[s] = true
		}
	}
	return wait(ctx, limit, strings.Join(names, ", ")+" with all pods Ready", func() (bool, error) {
		for _, name := range names {
			n := b.want[name]
			d, err := b.kube.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ready := d.Status.ReadyReplicas
			// The Deployment's counts leave terminating pods out: wait
			// until they are gone too (their JVMs stopped).
			pods, err := b.pods(ctx, name)
			if err != nil {
				return false, err
			}
			if held[name] {
				ready = int32(len(slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool {
					return p.DeletionTimestamp != nil || !podConditionTrue(&p, corev1.ContainersReady)
				})))
			}
			if ready != n || d.Status.Replicas != n || d.Status.UpdatedReplicas != n {
				return false, fmt.Errorf("%s: %d/%d ready, want %d", name, ready, d.Status.Replicas, n)
			}
			if len(pods) != int(n) {
				return false, fmt.Errorf("%s: %d pods, want %d (a deleted pod still terminating)", name, len(pods), n)
			}
		}
		return true, nil
	})
}

func podConditionTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// awaitHost waits until the gateway routes Host to a pod that answers 200.
func awaitHost(ctx context.Context, gateway, host string) error {
	return wait(ctx, time.Minute, "the gateway to route "+host, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway, nil)
		if err != nil {
			return false, err
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: HTTP %s", host, resp.Status)
	})
}

func (b *gateBench) pods(ctx context.Context, deployment string) ([]corev1.Pod, error) {
	l, err := b.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + deployment})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", deployment, err)
	}
	return l.Items, nil
}

func (b *gateBench) oldestPod(ctx context.Context, deployment string) (string, error) {
	pods, err := b.pods(ctx, deployment)
	if err != nil {
		return "", err
	}
	pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	if len(pods) == 0 {
		return "", fmt.Errorf("%s has no pod to delete", deployment)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	return pods[0].Name, nil
}

// newPods lists the way's pods created by the events (the control's: its
// extra Deployment's), with when each became Ready after its event.
func (b *gateBench) newPods(ctx context.Context, w GateWay, events []GateEvent) ([]GatePod, error) {
	var pods []corev1.Pod
	for _, name := range w.deployments() {
		p, err := b.pods(ctx, name)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p...)
	}
	return gatePods(pods, events), nil
}

// gatePods assigns each pod to the last event at or before its creation
// (API server times are whole seconds: an event's own pods may carry the
// second it happened in) and measures its Ready delay from that event.
func gatePods(pods []corev1.Pod, events []GateEvent) []GatePod {
	var out []GatePod
	for _, p := range pods {
		created := p.CreationTimestamp.Time
		ev := -1
		for i, e := range events {
			if !created.Before(e.At.Truncate(time.Second)) {
				ev = i
			}
		}
		if ev < 0 {
			continue
		}
		gp := GatePod{Name: p.Name, Event: events[ev].Name, EventAt: events[ev].At}
		for _, c := range p.Status.Conditions {
			switch {
			case c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue:
				gp.Ready, gp.ReadyAfter = true, max(c.LastTransitionTime.Sub(events[ev].At), 0)
			case c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue:
				gp.Started, gp.StartedAfter = true, max(c.LastTransitionTime.Sub(events[ev].At), 0)
			case c.Type == wellknown.WarmCondition:
				gp.Warm = c.Message
			}
		}
		out = append(out, gp)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].EventAt.Equal(out[j].EventAt) {
			return out[i].EventAt.Before(out[j].EventAt)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// envoyCluster describes a cluster's load balancing in Envoy's config (see
// slowStartConfig), waiting up to 30 s for the slow start to appear.
func (b *gateBench) envoyCluster(ctx context.Context, cluster string) string {
	var desc string
	err := wait(ctx, 30*time.Second, "slow start in Envoy's config of "+cluster, func() (bool, error) {
		dump, err := b.lab.envoyGet(ctx, "/config_dump?resource=dynamic_active_clusters")
		if err != nil {
			return false, err
		}
		d, ok, err := slowStartConfig(dump, cluster)
		desc = d
		return ok, err
	})
	if err != nil {
		b.cfg.Log.Warn("no slow start in Envoy for the slow-start way", "cluster", cluster, "envoy", desc, "err", err)
		return "NO slow start: " + desc
	}
	return cluster + ": " + desc
}

// readyAfterList renders the Ready delays of an event's pods, e.g.
// "14 s, 15 s".
func readyAfterList(pods []GatePod, event string) string {
	var parts []string
	for _, p := range pods {
		if p.Event != event {
			continue
		}
		if !p.Ready {
			parts = append(parts, "not Ready")
			continue
		}
		parts = append(parts, fmt.Sprintf("%.0f s", p.ReadyAfter.Seconds()))
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// gateWarmUps counts the warm-ups the gate started per pod, from its log
// (slog text: msg="warming pod" pod=NAMESPACE/NAME), and lists the pods it
// warmed again after it had found them warm (msg="pod warm"), in the order
// seen. A warm-up after a failed one is a retry: counted, not listed.
func gateWarmUps(log string) (started map[string]int, rewarmed []string) {
	started = map[string]int{}
	warm := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		starting := strings.Contains(line, `msg="warming pod"`)
		if !starting && !strings.Contains(line, `msg="pod warm"`) {
			continue
		}
		pod := ""
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "pod="); ok {
				pod = strings.TrimPrefix(v, "default/")
				break
			}
		}
		switch {
		case pod == "":
		case !starting:
			warm[pod] = true
		default:
			started[pod]++
			if warm[pod] && !slices.Contains(rewarmed, pod) {
				rewarmed = append(rewarmed, pod)
			}
		}
	}
	return started, rewarmed
}
