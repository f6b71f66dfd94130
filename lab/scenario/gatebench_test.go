package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/gate"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// samplesAt makes one sample per 10 ms in [from, from+d) with latency lat,
// and one slow sample of slow at from+d/2 (if slow > 0).
func samplesAt(from time.Time, d, lat, slow time.Duration) []traffic.Sample {
	var out []traffic.Sample
	for t := time.Duration(0); t < d; t += 10 * time.Millisecond {
		out = append(out, traffic.Sample{Start: from.Add(t), Latency: lat, Code: 200})
	}
	if slow > 0 {
		out = append(out, traffic.Sample{Start: from.Add(d / 2), Latency: slow, Code: 200})
	}
	return out
}

func TestGateRatiosDivideEachEventByTheSteadyStateBeforeIt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	up, kill := t0.Add(30*time.Second), t0.Add(2*time.Minute)
	var s []traffic.Sample
	s = append(s, samplesAt(t0, 30*time.Second, 10*time.Millisecond, 0)...)                       // steady: 10 ms
	s = append(s, samplesAt(up, time.Minute, 10*time.Millisecond, 400*time.Millisecond)...)       // one cold request
	s = append(s, samplesAt(kill.Add(-30*time.Second), 30*time.Second, 5*time.Millisecond, 0)...) // steady 4: 5 ms
	s = append(s, samplesAt(kill, time.Minute, 5*time.Millisecond, 50*time.Millisecond)...)       // the kill
	s = append(s, samplesAt(kill.Add(time.Minute), time.Minute, 900*time.Millisecond, 0)...)      // outside every phase
	phases := gatePhases([]GateEvent{{Name: EventScaleUp, At: up}, {Name: EventPodKill, At: kill}}, 30*time.Second, time.Minute)
	if len(phases) != 4 || phases[0].Name != PhaseSteady || phases[0].To != up || phases[1].From != up ||
		phases[2].Name != PhaseSteady4 || phases[2].From != kill.Add(-30*time.Second) || phases[3].To != kill.Add(time.Minute) {
		t.Fatalf("phases %+v", phases)
	}
	stats := traffic.Summarize(s, phases)
	r := gateRatios(stats)
	if len(r) != 2 || r[0].Event != EventScaleUp || r[1].Event != EventPodKill {
		t.Fatalf("ratios %+v", r)
	}
	if r[0].Max != 40 || r[1].Max != 10 {
		t.Errorf("max ratios %.2f, %.2f; want 40 (400 ms ÷ 10 ms) and 10 (50 ms ÷ 5 ms, the 4-pod steady state)", r[0].Max, r[1].Max)
	}
	// One slow request in 6,000 is above p99.9's rank: p99 and p99.9 stay 1×.
	if r[0].P99 != 1 || r[0].P999 != 1 {
		t.Errorf("scale-up p99 %.2f×, p99.9 %.2f×; want 1× (one slow request in 6,001)", r[0].P99, r[0].P999)
	}
}

func TestGateRatiosSkipEmptyPhases(t *testing.T) {
	stats := []traffic.PhaseStats{{Name: PhaseSteady}, {Name: PhaseScaleUp}}
	stats[1].Count, stats[1].P99 = 10, time.Millisecond
	if r := gateRatios(stats); len(r) != 0 {
		t.Errorf("ratios from an empty steady state: %+v", r)
	}
}

func TestGateGoal(t *testing.T) {
	ways := func(p99, p999 float64) []GateWayResult {
		return []GateWayResult{
			{GateWay: GateWays[0], Ratios: []GateRatio{{Event: EventScaleUp, P99: 9, P999: 9}}},
			{GateWay: GateWays[2], Ratios: []GateRatio{{Event: EventPodKill, P99: 5, P999: 5}, {Event: EventScaleUp, P99: p99, P999: p999}}},
		}
	}
	if g := gateGoal(ways(1.1, 1.19)); !strings.Contains(g, ": met") || !strings.Contains(g, "p99 1.10×") {
		t.Errorf("1.1×, 1.19×: %q", g)
	}
	if g := gateGoal(ways(1.1, 1.3)); !strings.Contains(g, "NOT met") {
		t.Errorf("p99.9 1.3×: %q", g)
	}
	if g := gateGoal(nil); !strings.Contains(g, "not measured") {
		t.Errorf("no ways: %q", g)
	}
}

func TestGatePodsByEvent(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	events := []GateEvent{{Name: EventScaleUp, At: t0.Add(500 * time.Millisecond)}, {Name: EventPodKill, At: t0.Add(2 * time.Minute)}}
	pod := func(name string, created time.Time, ready *time.Time, warm string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
		if ready != nil {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(*ready)})
		}
		if warm != "" {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: wellknown.WarmCondition, Status: corev1.ConditionTrue, Message: warm})
		}
		return p
	}
	r1, r2 := t0.Add(20*time.Second), t0.Add(2*time.Minute+9*time.Second)
	got := gatePods([]corev1.Pod{
		pod("old", t0.Add(-time.Hour), &r1, ""),
		pod("kill-new", t0.Add(2*time.Minute+time.Second), &r2, "warm: 900 requests"),
		pod("up-new", t0, &r1, ""), // created in the event's second (API times are whole seconds)
		pod("up-cold", t0.Add(time.Second), nil, ""),
	}, events)
	if len(got) != 3 || got[0].Name != "up-cold" || got[1].Name != "up-new" || got[2].Name != "kill-new" {
		t.Fatalf("pods %+v; want up-cold, up-new (scale-up), kill-new (pod kill); not the old one", got)
	}
	if got[0].Ready || !got[1].Ready || got[1].ReadyAfter != 19500*time.Millisecond || got[2].Event != EventPodKill || got[2].ReadyAfter != 9*time.Second || got[2].Warm == "" {
		t.Errorf("pods %+v", got)
	}
	if s := readyAfterList(got, EventScaleUp); s != "not Ready, 20 s" {
		t.Errorf("readyAfterList = %q", s)
	}
}

// lab/manifests/gate: three Deployments of the sample app, the same pods but
// for the gated one's annotation, which the gate must accept as it is.
func TestGateExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "lab", "manifests", "gate")
	var deps []appsv1.Deployment
	hosts := map[string]bool{}
	for _, f := range []string{"10-cold.yaml", "20-slowstart.yaml", "30-gated.yaml"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			var meta struct {
				Kind string `json:"kind"`
				Spec struct {
					Hosts    []string `json:"hosts"`
					Gateways []string `json:"gateways"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch meta.Kind {
			case "Deployment":
				var d appsv1.Deployment
				if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				deps = append(deps, d)
			case "VirtualService":
				if len(meta.Spec.Gateways) != 1 || meta.Spec.Gateways[0] != "app-gateway" {
					t.Errorf("%s: VirtualService on gateways %v, want the lab's app-gateway", f, meta.Spec.Gateways)
				}
				for _, h := range meta.Spec.Hosts {
					hosts[h] = true
				}
			}
		}
	}
	if len(deps) != len(GateWays) {
		t.Fatalf("%d Deployments, want %d", len(deps), len(GateWays))
	}
	for i, w := range GateWays {
		d := deps[i]
		if d.Name != w.Deployment || !hosts[w.Host] || *d.Spec.Replicas != 2 {
			t.Errorf("way %s: Deployment %s (replicas %d), hosts %v", w.Name, d.Name, *d.Spec.Replicas, hosts)
		}
		if got, want := d.Spec.Template.Spec.Containers[0].Resources, deps[0].Spec.Template.Spec.Containers[0].Resources; !got.Limits.Cpu().Equal(*want.Limits.Cpu()) || got.Requests.Memory().Cmp(*want.Requests.Memory()) != 0 {
			t.Errorf("%s: resources differ from app-cold's", d.Name)
		}
		ann, opted := d.Spec.Template.Annotations[wellknown.WarmUpAnnotation]
		if opted != (w.Deployment == "app-gated") {
			t.Errorf("%s: opted in to the gate: %v", d.Name, opted)
		}
		if opted {
			c, err := gate.ParseConfig(ann, policy.Local())
			if err != nil {
				t.Fatalf("%s: the gate rejects the annotation: %v", d.Name, err)
			}
			if c.QPS != 60 || c.Port.String() != "http" || c.OnFailure != gate.StayUnready || len(c.Requests) != 1 {
				t.Errorf("%s: config %+v", d.Name, c)
			}
		}
	}
}

// One way's events and phases: a way scaled up alone is measured against
// its own steady state, and another way's events are not its phases.
func TestGatePhasesOfOneWay(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	all := []GateEvent{
		{Name: EventScaleUp, Way: "a", At: t0},
		{Name: EventScaleUp, Way: "b", At: t0.Add(2 * time.Minute)},
	}
	b := wayEvents(all, "b")
	if len(b) != 1 || !b[0].At.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("way b's events %+v", b)
	}
	phases := gatePhases(b, 30*time.Second, time.Minute)
	if len(phases) != 2 || phases[0].Name != PhaseSteady || !phases[0].From.Equal(t0.Add(90*time.Second)) || phases[1].Name != PhaseScaleUp {
		t.Fatalf("phases %+v", phases)
	}
	if r := gateRatios(traffic.Summarize(nil, phases)); len(r) != 0 {
		t.Errorf("ratios with no samples: %+v", r)
	}
}

func TestWriteGateBenchReport(t *testing.T) {
	r := &GateBenchResult{QPS: 40, Goal: "goal: met", Events: []GateEvent{{Name: EventScaleUp, Way: GateWays[0].Name}, {Name: EventPodKill, Way: GateWays[0].Name}}}
	for i, w := range GateWays {
		r.Ways = append(r.Ways, GateWayResult{GateWay: w,
			Phases: []traffic.PhaseStats{{Name: PhaseSteady}, {Name: PhaseScaleUp}, {Name: PhaseSteady4}, {Name: PhasePodKill}},
			Ratios: []GateRatio{{Event: EventScaleUp, P99: float64(i + 1), P999: 2, Max: 3}},
			Pods:   []GatePod{{Name: "p", Event: EventScaleUp, Ready: true, ReadyAfter: 12 * time.Second}}})
	}
	var b strings.Builder
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| danki warm gate | 3.00× | 2.00× | 3.00× | 12 s | – | – | – | – |", "goal: met", "| Istio slow start |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// make demo's short version: two ways, a scale-up only — no pod-kill columns.
func TestWriteGateBenchReportScaleUpOnly(t *testing.T) {
	r := &GateBenchResult{QPS: 40, Events: []GateEvent{{Name: EventScaleUp, Way: GateWays[0].Name}, {Name: EventScaleUp, Way: GateWays[2].Name}}}
	for _, w := range []GateWay{GateWays[0], GateWays[2]} {
		r.Ways = append(r.Ways, GateWayResult{GateWay: w, Phases: []traffic.PhaseStats{{Name: PhaseSteady}, {Name: PhaseScaleUp}},
			Ratios: []GateRatio{{Event: EventScaleUp, P99: 1.1, P999: 1.2, Max: 1.5}}})
	}
	var b strings.Builder
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), EventPodKill) || !strings.Contains(b.String(), "| danki warm gate | 1.10× | 1.20× | 1.50× | – |") ||
		!strings.Contains(b.String(), "| way | steady (2 pods) | minute after scale 2 → 4 |") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestGateWarmUpsFromTheGateLog(t *testing.T) {
	// a: warm, then warmed again (taken out of load balancing); b: one
	// warm-up; c: a failed warm-up, retried, warm.
	log := `time=2026-11-25T20:54:20.000Z level=INFO msg="warming pod" pod=default/a target=http://10.244.0.7:8080
time=2026-11-25T20:55:27.947Z level=INFO msg="pod warm" pod=default/a summary="converged"
time=2026-11-25T20:54:33.744Z level=INFO msg="warming pod" pod=default/b target=http://10.244.0.8:8080
time=2026-11-25T20:54:40.000Z level=INFO msg="warming pod" pod=default/c target=http://10.244.0.9:8080
time=2026-11-25T20:57:40.000Z level=WARN msg="warm-up failed" pod=default/c attempt=1 of=3 error="deadline"
time=2026-11-25T20:55:46.561Z level=INFO msg="warming pod" pod=default/a target=http://10.244.0.7:8080
time=2026-11-25T20:58:10.000Z level=INFO msg="warming pod" pod=default/c target=http://10.244.0.9:8080
time=2026-11-25T20:59:10.000Z level=INFO msg="pod warm" pod=default/c summary="converged"
`
	got, rewarmed := gateWarmUps(log)
	if len(got) != 3 || got["a"] != 2 || got["b"] != 1 || got["c"] != 2 {
		t.Errorf("warm-ups %v; want a 2, b 1, c 2", got)
	}
	if !slices.Equal(rewarmed, []string{"a"}) {
		t.Errorf("rewarmed %v; want [a] (c's second warm-up is a retry after a failure)", rewarmed)
	}
	var b strings.Builder
	if err := WriteGateBenchReport(&b, &GateBenchResult{WarmUps: got, Rewarmed: rewarmed}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"warm-ups per pod: a 2, b 1, c 2", "Retried after a failed warm-up (the pod stayed out of load balancing until one converged): c.", "Warmed again after it was warm: a**"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// The full bench: the control goes through the scale-up only; its raw row
// gets "–" under the pod-kill phases, not the others' columns shifted.
func TestWriteGateBenchReportWithControl(t *testing.T) {
	r := &GateBenchResult{QPS: 40, Events: []GateEvent{{Name: EventScaleUp}, {Name: EventPodKill}}}
	r.Ways = append(r.Ways, GateWayResult{GateWay: GateWays[2],
		Phases: []traffic.PhaseStats{{Name: PhaseSteady}, {Name: PhaseScaleUp}, {Name: PhaseSteady4}, {Name: PhasePodKill}}})
	steady := traffic.PhaseStats{Name: PhaseSteady}
	steady.Count, steady.P99 = 5, 10*time.Millisecond
	after := traffic.PhaseStats{Name: PhaseScaleUp}
	after.Count = 6
	r.Ways = append(r.Ways, GateWayResult{GateWay: GateControl, Phases: []traffic.PhaseStats{steady, after}})
	var b strings.Builder
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| JVM start only (control) | 0.0 / 10.0 / 0.0 / 0.0 (5, 0) | 0.0 / 0.0 / 0.0 / 0.0 (6, 0) | – | – |") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestGateGoalNamesTheControl(t *testing.T) {
	ways := []GateWayResult{
		{GateWay: GateWays[2], Ratios: []GateRatio{{Event: EventScaleUp, P99: 1.5, P999: 1.4}}},
		{GateWay: GateControl, Ratios: []GateRatio{{Event: EventQuiet, P99: 0.9, P999: 1.1}, {Event: EventScaleUp, P99: 1.3, P999: 1.25}}},
	}
	g := gateGoal(ways)
	if !strings.Contains(g, "NOT met — p99 1.50×, p99.9 1.40×") || !strings.Contains(g, "the control (two JVMs starting, no request to them): p99 1.30×, p99.9 1.25×") ||
		!strings.Contains(g, "nothing happening: the lab's noise): p99 0.90×, p99.9 1.10×") {
		t.Errorf("goal %q", g)
	}
}

// The control's manifest: the scaled Deployment has the serving one's pod
// template, is selected by the same Service but held out of load balancing
// by a readiness gate (one the warm gate does not set), and starts at 0.
func TestGateControlManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", GateControl.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string]appsv1.Deployment{}
	var svc corev1.Service
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			deps[d.Name] = d
		case "Service":
			if err := yaml.UnmarshalStrict([]byte(doc), &svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	name, n := GateControl.scaled()
	serving, extra := deps[GateControl.Deployment], deps[name]
	if serving.Spec.Replicas == nil || *serving.Spec.Replicas != 2 || extra.Spec.Replicas == nil || *extra.Spec.Replicas != 0 || n != 2 {
		t.Fatalf("deployments %v; want %s at 2 and %s at 0, scaled to 2", deps, GateControl.Deployment, name)
	}
	selects := func(labels map[string]string) bool {
		for k, v := range svc.Spec.Selector {
			if labels[k] != v {
				return false
			}
		}
		return len(svc.Spec.Selector) > 0
	}
	if !selects(serving.Spec.Template.Labels) || !selects(extra.Spec.Template.Labels) {
		t.Errorf("Service selector %v must select both %s and %s (the extra pods' endpoints churn as a served scale-up's)", svc.Spec.Selector, serving.Name, name)
	}
	gates := extra.Spec.Template.Spec.ReadinessGates
	if len(gates) != 1 || gates[0].ConditionType == "danki.dev/warm" || extra.Spec.Template.Annotations["danki.dev/warm-up"] != "" || !GateControl.HeldBack {
		t.Errorf("%s: readiness gates %v, annotations %v; want one gate nobody sets, so its pods are never Ready (and HeldBack)", name, gates, extra.Spec.Template.Annotations)
	}
	a, b := serving.Spec.Template.Spec.Containers[0], extra.Spec.Template.Spec.Containers[0]
	if a.Image != b.Image || !a.Resources.Limits.Cpu().Equal(*b.Resources.Limits.Cpu()) || !a.Resources.Requests.Cpu().Equal(*b.Resources.Requests.Cpu()) {
		t.Errorf("the extra pods differ from the serving ones: %+v vs %+v", b, a)
	}
}

// The control's quiet minute: its own phases, and a ratio like any event's.
func TestGateQuietMinute(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := t0.Add(time.Minute)
	phases := gatePhases([]GateEvent{{Name: EventQuiet, At: at}}, time.Minute, time.Minute)
	if len(phases) != 2 || phases[0].Name != PhaseQuietPrev || !phases[0].From.Equal(t0) || phases[1].Name != PhaseQuiet || !phases[1].To.Equal(at.Add(time.Minute)) {
		t.Fatalf("phases %+v", phases)
	}
	s := append(samplesAt(t0, time.Minute, 10*time.Millisecond, 0), samplesAt(at, time.Minute, 20*time.Millisecond, 0)...)
	r := gateRatios(traffic.Summarize(s, phases))
	if len(r) != 1 || r[0].Event != EventQuiet || r[0].P99 != 2 {
		t.Errorf("ratios %+v; want the quiet minute at 2× (20 ms ÷ 10 ms)", r)
	}
	if !slices.Equal(GateControl.events(), []string{EventQuiet, EventScaleUp}) || !slices.Equal(GateWays[0].events(), []string{EventScaleUp, EventPodKill}) {
		t.Errorf("events: control %v, no warm-up %v", GateControl.events(), GateWays[0].events())
	}
}

// The noise mode: consecutive minutes, each ÷ the one before, summarised
// as the median, the largest and how many pairs exceed the goal.
func TestGateNoise(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	phases := noisePhases(t0, 4, time.Minute)
	if len(phases) != 4 || !phases[3].From.Equal(t0.Add(3*time.Minute)) || !phases[3].To.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("phases %+v", phases)
	}
	var s []traffic.Sample
	for i, lat := range []time.Duration{10, 15, 15, 30} { // ms: ratios 1.5, 1, 2
		s = append(s, samplesAt(t0.Add(time.Duration(i)*time.Minute), time.Minute, lat*time.Millisecond, 0)...)
	}
	n := gateNoise("w", traffic.Summarize(s, phases))
	if len(n.Ratios) != 3 || n.Ratios[0].P99 != 1.5 || n.Ratios[1].P99 != 1 || n.Ratios[2].P999 != 2 {
		t.Fatalf("ratios %+v", n.Ratios)
	}
	if g := n.Summary; g.Pairs != 3 || g.MedianP99 != 1.5 || g.MaxP99 != 2 || g.AboveGoalP99 != 2 {
		t.Errorf("summary %+v; want 3 pairs, median 1.5, largest 2, 2 above 1.2", g)
	}
	var b strings.Builder
	if err := WriteGateBenchReport(&b, &GateBenchResult{Noise: []GateNoise{n}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| w | 3 | 1.50× | 2.00× | 2 | 1.50× | 2.00× | 2 |") {
		t.Errorf("report:\n%s", b.String())
	}
}

// Repeats of an event pool into one phase per name: a slow request in
// either repeat's minute is one of the pooled sample, and each repeat's own
// ratio is listed in event order.
func TestGateRepeatsPooled(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	events := []GateEvent{{Name: EventScaleUp, At: t0.Add(time.Minute)}, {Name: EventScaleUp, At: t0.Add(5 * time.Minute)}}
	phases := gatePhases(events, time.Minute, time.Minute)
	var s []traffic.Sample
	s = append(s, samplesAt(t0, time.Minute, 10*time.Millisecond, 0)...)                      // steady 1
	s = append(s, samplesAt(t0.Add(time.Minute), time.Minute, 10*time.Millisecond, 0)...)     // after 1: as steady
	s = append(s, samplesAt(t0.Add(2*time.Minute), 2*time.Minute, 50*time.Millisecond, 0)...) // between: not measured
	s = append(s, samplesAt(t0.Add(4*time.Minute), time.Minute, 10*time.Millisecond, 0)...)   // steady 2
	s = append(s, samplesAt(t0.Add(5*time.Minute), time.Minute, 20*time.Millisecond, 0)...)   // after 2: twice
	pooled := traffic.SummarizeByName(s, phases)
	if len(pooled) != 2 || pooled[0].Name != PhaseSteady || pooled[1].Name != PhaseScaleUp {
		t.Fatalf("pooled %+v; want steady, scale-up", pooled)
	}
	if pooled[0].Count != 12000 || pooled[1].Count != 12000 || !pooled[1].From.Equal(t0.Add(time.Minute)) || !pooled[1].To.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("pooled counts %d, %d, span %v–%v; want 12000 each, the after-minutes spanning 12:01–12:06", pooled[0].Count, pooled[1].Count, pooled[1].From, pooled[1].To)
	}
	if pooled[0].P99 != 10*time.Millisecond || pooled[1].P99 != 20*time.Millisecond || pooled[1].P50 != 10*time.Millisecond {
		t.Errorf("pooled p99 %v / %v, after p50 %v; want 10 ms / 20 ms (half the after samples slow), 10 ms", pooled[0].P99, pooled[1].P99, pooled[1].P50)
	}
	r := gateRatios(pooled)
	if len(r) != 1 || r[0].P99 != 2 {
		t.Errorf("pooled ratios %+v; want one scale-up ratio, p99 2×", r)
	}
	each := eachRatio(events, traffic.Summarize(s, phases))
	if len(each) != 2 || each[0].P99 != 1 || each[1].P99 != 2 || each[1].Event != EventScaleUp {
		t.Errorf("each repeat %+v; want 1×, then 2×", each)
	}
	if got := ratioList([]float64{1, 2, 1.5}); got != "1.00×, 2.00×, 1.50× (1.50×)" {
		t.Errorf("ratioList = %q", got)
	}
}

// With repeats the chart marks each new pod's Ready after its own event,
// not after every event of that name.
func TestGateChartMarksReadyPerRepeat(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	e1, e2 := t0.Add(time.Minute), t0.Add(5*time.Minute)
	events := []GateEvent{{Name: EventScaleUp, Way: "w", At: e1}, {Name: EventScaleUp, Way: "w", At: e2}}
	pods := gatePods([]corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "b", CreationTimestamp: metav1.NewTime(e2.Add(time.Second))}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(e2.Add(30 * time.Second))}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: metav1.NewTime(e1.Add(time.Second))}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(e1.Add(40 * time.Second))}}}},
	}, events)
	if len(pods) != 2 || pods[0].Name != "a" || !pods[0].EventAt.Equal(e1) || pods[1].ReadyAfter != 30*time.Second {
		t.Fatalf("pods %+v; want a after the first event (40 s), b after the second (30 s)", pods)
	}
	r := &GateBenchResult{From: t0, To: t0.Add(7 * time.Minute), Ways: []GateWayResult{{GateWay: GateWay{Name: "w"}, Events: events, Pods: pods}}}
	var ready []time.Time
	for _, m := range gateChartPanels(r)[0].Markers {
		if m.Label == "Ready" {
			ready = append(ready, m.At)
		}
	}
	if len(ready) != 2 || !ready[0].Equal(e1.Add(40*time.Second)) || !ready[1].Equal(e2.Add(30*time.Second)) {
		t.Errorf("Ready markers %v; want %v and %v", ready, e1.Add(40*time.Second), e2.Add(30*time.Second))
	}
}

// The report lists each repeat and the machine's CPU per phase when the run
// has them, and neither when it has not.
func TestWriteGateBenchReportRepeatsAndCPU(t *testing.T) {
	r := &GateBenchResult{QPS: 40, Events: []GateEvent{{Name: EventScaleUp, Way: "w"}, {Name: EventScaleUp, Way: "w"}}, Ways: []GateWayResult{{
		GateWay:    GateWay{Name: "w"},
		Phases:     []traffic.PhaseStats{{Name: PhaseSteady}, {Name: PhaseScaleUp}},
		Ratios:     []GateRatio{{Event: EventScaleUp, P99: 1.5, P999: 2}},
		EachRepeat: []GateRatio{{Event: EventScaleUp, P99: 1, P999: 3}, {Event: EventScaleUp, P99: 2, P999: 1}},
		CPU:        map[string]float64{PhaseSteady: 0.41, PhaseScaleUp: 0.93},
	}}}
	var b strings.Builder
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| w | scale 2 → 4 | 1.00×, 2.00× (1.50×) | 3.00×, 1.00× (2.00×) |", "| w | 41 % | 93 % |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	r.Ways[0].EachRepeat, r.Ways[0].CPU = nil, nil
	b.Reset()
	if err := WriteGateBenchReport(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Each repeat") || strings.Contains(b.String(), "machine's CPUs") {
		t.Errorf("no repeats or CPU figures, yet the report has their sections:\n%s", b.String())
	}
}

func TestMachineCPU(t *testing.T) {
	a, err := parseCPUTimes("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\n")
	if err != nil || a.total != 1000 || a.idle != 850 {
		t.Fatalf("parse = %+v, %v; want total 1000, idle 850 (idle + iowait)", a, err)
	}
	b := cpuTimes{total: 1200, idle: 900}
	if busy, ok := busyShare(a, b); !ok || busy != 0.75 {
		t.Errorf("busy = %v, %v; want 0.75 (50 idle of 200)", busy, ok)
	}
	if _, ok := busyShare(b, b); ok {
		t.Error("no time passed, yet a busy share")
	}
	if _, err := parseCPUTimes("intr 1 2 3\n"); err == nil || !strings.Contains(err.Error(), "want the cpu line") {
		t.Errorf("err = %v", err)
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := &CPUSampler{samples: []cpuSample{{t0, 0.2}, {t0.Add(time.Second), 0.4}, {t0.Add(time.Minute), 1}, {t0.Add(2 * time.Minute), 0.5}}}
	got := c.Busy([]traffic.Phase{{Name: "a", From: t0, To: t0.Add(time.Minute)}, {Name: "b", From: t0.Add(time.Minute), To: t0.Add(90 * time.Second)}, {Name: "a", From: t0.Add(2 * time.Minute), To: t0.Add(3 * time.Minute)}, {Name: "none", From: t0.Add(time.Hour), To: t0.Add(2 * time.Hour)}})
	if len(got) != 2 || got["b"] != 1 || got["a"] < 0.3666 || got["a"] > 0.3667 {
		t.Errorf("busy per phase %v; want a: mean of 0.2, 0.4, 0.5 (repeats pooled), b: 1, none left out", got)
	}
	if _, err := StartCPUSampler(t.Context()); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}
