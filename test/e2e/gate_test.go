package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
)

// The gated Deployment of lab/manifests/gate and its cluster on the gateway.
const (
	gatedApp     = "app-gated"
	gatedHost    = "gated.lab"
	condWarm     = wellknown.WarmCondition
	gatedCluster = `outbound|8080||app-gated.default.svc.cluster.local`
)

// TestLabWarmGate is the warm gate (#16) on the lab, installed as users
// install it: deploy/gate (the Helm chart's kustomize twin) as a Deployment
// whose pod runs under its own ServiceAccount and RBAC with in-cluster
// config, its webhook called by the API server through its Service, its
// caBundle kept by the gate (scenario.InstallGate: the lab's overlay only
// moves where it listens). lab/manifests/gate's gated Deployment runs under
// user traffic through the gateway, started with one replica (the shipped
// manifest's 2 cost the test a second serial warm-up and prove nothing the
// first does not) and scaled 1 → 3. Every gated pod must
// get no user request before its danki.dev/warm condition is True (Envoy's
// per-endpoint counters, read before the pod each time), must then become
// Ready and receive users; a new pod deleted mid-warm-up must have its
// warm-up load stopped by the gate (its log: "stopping warm-up" for the pod
// deleting, then "warm-up stopped", never "pod warm").
func TestLabWarmGate(t *testing.T) {
	l := startLab(t)
	ctx, kube := l.ctx, l.kube
	cache, err := testenv.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	gp, err := scenario.InstallGate(ctx, kube, scenario.GateInstallOptions{Root: l.root, Kubeconfig: l.kubeconfig, Cache: cache, Mesh: l.mesh})
	if err != nil {
		t.Fatalf("install danki gate (deploy/gate): %v", err)
	}
	logPath := gp.LogPath
	gateStarted := time.Now()
	waitScraped(t, l, "danki-gate", 1)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("danki gate log:\n%s", b)
		}
		if err := gp.Stop(); err != nil {
			t.Errorf("remove danki gate: %v", err)
		}
	})
	t.Logf("danki gate installed from deploy/gate: pod danki-gate/%s Ready, its webhook trusted by its caBundle (log %s)", gp.Pod, logPath)

	l.apply(t, filepath.Join(l.root, "lab", "manifests", "20-gateway.yaml"), oneReplica(t, filepath.Join(l.root, "lab", "manifests", "gate", "30-gated.yaml")))
	pods := kube.CoreV1().Pods("default")
	// One pod at a time (--max-per-node), each up to its deadline (5m,
	// 30-gated.yaml; ~2 min on a quiet lab).
	waitFor(t, ctx, 6*time.Minute, "app-gated: its pod warmed by the gate and Ready", func() (bool, string) {
		return gatedReady(ctx, l, 1)
	})
	initial := gatedPods(t, ctx, l)
	for _, p := range initial {
		if !slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return string(g.ConditionType) == condWarm }) {
			t.Fatalf("pod %s has no readiness gate %s: the webhook did not inject it (gates %v)", p.Name, condWarm, p.Spec.ReadinessGates)
		}
		c := podCondition(&p, condWarm)
		t.Logf("pod %s: %s %s %q", p.Name, c.Status, c.Reason, c.Message)
		// The pod requests 250m of CPU (30-gated.yaml) and its annotation
		// sets cpuBudget "50%": the gate's warm-up stays within half the
		// request, read from the pod.
		if !strings.Contains(c.Message, "CPU budget 0.125 cores per pod") {
			t.Errorf("pod %s: the warm condition does not name the CPU budget of 50%% of its request (250m): %q", p.Name, c.Message)
		}
	}
	waitFor(t, ctx, time.Minute, "the gateway routes "+gatedHost, func() (bool, string) {
		code, err := getHost(ctx, gatedHost)
		return code == http.StatusOK, fmt.Sprintf("HTTP %d, %v", code, err)
	})

	users, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: gatewayURL, QPS: 30, Headers: map[string]string{"Host": gatedHost}})
	if err != nil {
		t.Fatal(err)
	}
	defer users.Stop()
	w := watchGate(t, ctx, l)
	time.Sleep(5 * time.Second)

	t.Log("scale app-gated 1 → 3")
	scaled := time.Now()
	patch := []byte(`{"spec":{"replicas":3}}`)
	if _, err := kube.AppsV1().Deployments("default").Patch(ctx, gatedApp, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale: %v", err)
	}

	// One new pod is deleted while the gate warms it.
	var victim corev1.Pod
	waitFor(t, ctx, 2*time.Minute, "a new pod warming (condition reason Warming)", func() (bool, string) {
		for _, p := range gatedPods(t, ctx, l) {
			if c := podCondition(&p, condWarm); p.CreationTimestamp.After(scaled.Add(-time.Second)) && c != nil && c.Reason == "Warming" {
				victim = p
				return true, ""
			}
		}
		return false, "no new pod warming yet"
	})
	t.Logf("deleting %s mid-warm-up (%q)", victim.Name, podCondition(&victim, condWarm).Message)
	deleted := time.Now()
	if err := pods.Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := "pod=default/" + victim.Name
	waitFor(t, ctx, 20*time.Second, "the gate stopping "+victim.Name+"'s warm-up load", func() (bool, string) {
		stopping, stopped := gateLogHas(logPath, "stopping warm-up", ref), gateLogHas(logPath, "warm-up stopped", ref)
		return stopping != "" && stopped != "", fmt.Sprintf("stopping: %q, stopped: %q", stopping, stopped)
	})
	stopping := gateLogHas(logPath, "stopping warm-up", ref)
	t.Logf("gate log %.1f s after the delete: %s", time.Since(deleted).Seconds(), stopping)
	if !strings.Contains(stopping, "pod delet") {
		t.Errorf("the gate stopped %s's warm-up for another reason: %s", victim.Name, stopping)
	}

	waitFor(t, ctx, 15*time.Minute, "app-gated: 3 pods warmed and Ready (the deleted one re-created)", func() (bool, string) {
		return gatedReady(ctx, l, 3)
	})
	var fresh []corev1.Pod
	for _, p := range gatedPods(t, ctx, l) {
		if p.CreationTimestamp.After(scaled.Add(-time.Second)) {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) != 2 {
		t.Fatalf("%d Ready pods created since the scale-up, want 2 (one new, one replacing the deleted one)", len(fresh))
	}
	waitFor(t, ctx, time.Minute, "users reach every new pod through Envoy", func() (bool, string) {
		rq, err := gatedRequests()
		if err != nil {
			return false, err.Error()
		}
		var state []string
		all := true
		for _, p := range fresh {
			state = append(state, fmt.Sprintf("%s %d", p.Name, rq[p.Status.PodIP]))
			all = all && rq[p.Status.PodIP] > 0
		}
		return all, strings.Join(state, ", ")
	})
	// The watch looks every 200 ms: give it the look that sees the last
	// pod warm (the Ready check above reads the Deployment, not the watch).
	waitFor(t, ctx, 15*time.Second, "the watch seeing every new pod warm", func() (bool, string) {
		return w.sawWarm(fresh)
	})
	res := users.Stop()
	w.stop()
	if gateLogHas(logPath, "pod warm", ref) != "" {
		t.Errorf("the gate declared the deleted pod %s warm", victim.Name)
	}

	// The invariant, over every look at every gated pod since the users came.
	t.Logf("%d looks at Envoy and the pods (%d failed, last: %v); user requests %d, not OK %d", w.looks, w.failed, w.lastErr, res.Requests, res.Errors)
	if w.looks < 100 {
		t.Errorf("only %d looks at Envoy and the pods: too few to judge", w.looks)
	}
	for _, p := range append(fresh, victim) {
		s := w.pods[p.Name]
		if s == nil || s.notWarmLooks == 0 {
			t.Errorf("pod %s was never seen before its condition was True: the check would be empty", p.Name)
			continue
		}
		if s.warmAt.IsZero() {
			t.Logf("pod %s: seen %d times not warm (user requests then: %d); never warm", p.Name, s.notWarmLooks, s.usersBeforeWarm)
		} else {
			t.Logf("pod %s: seen %d times not warm (user requests then: %d); warm %.1f s after creation, first user request seen %.1f s after warm",
				p.Name, s.notWarmLooks, s.usersBeforeWarm, s.warmAt.Sub(s.created).Seconds(), s.firstUsers.Sub(s.warmAt).Seconds())
		}
		if s.usersBeforeWarm > 0 {
			t.Errorf("pod %s got %d user requests through Envoy before its %s condition was True", p.Name, s.usersBeforeWarm, condWarm)
		}
	}
	// yieldCPU: each new pod warmed with its CPU request lowered in place
	// (by the gate, through pods/resize) and applied (by the lab's runner,
	// to the pod's cgroups), and none was warm without its request back.
	for _, p := range fresh {
		if s := w.pods[p.Name]; s != nil && s.yieldedLooks == 0 {
			t.Errorf("pod %s was never seen warming at CPU request 1m (yieldCPU): the gate did not lower it, or the runner did not apply it", p.Name)
		} else if s != nil {
			t.Logf("pod %s: seen %d times warming at CPU request 1m", p.Name, s.yieldedLooks)
		}
	}
	for name, s := range w.pods {
		if s.warmLow > 0 {
			t.Errorf("pod %s was warm in %d looks without its CPU request back at %s (%s)", name, s.warmLow, gatedCPURequest, s.warmLowSeen)
		}
	}
	// A warm pod stays warm: its condition never goes back to False while
	// its containers run (that would take a warm, serving pod out of every
	// load balancer and warm it again).
	for name, s := range w.pods {
		if s.unwarmed > 0 && name != victim.Name {
			t.Errorf("pod %s: its %s condition was True, then not True in %d later looks: the gate took a warm pod out of load balancing", name, condWarm, s.unwarmed)
		}
	}
	if res.Requests == 0 || float64(res.Errors) > 0.01*float64(res.Requests) {
		t.Errorf("users: %d of %d requests not OK", res.Errors, res.Requests)
	}

	// The gate's own metrics (--metrics-bind-address), scraped by the lab's
	// Prometheus (job danki-gate): 1 + 2 pods warmed, 1 deleted mid-warm-up,
	// 4 admitted with the readiness gate; the dashboard's gate row.
	wantCounted(t, l, gateStarted, map[string]float64{
		`danki_gate_warmups_total{outcome="warm"}`:            3,
		`danki_gate_warmups_total{outcome="deleted"}`:         1,
		`danki_gate_warmup_duration_seconds_count`:            3,
		`danki_gate_warmup_requests_count`:                    3,
		`danki_gate_webhook_admissions_total{result="gated"}`: 4,
	})
	checkDashboard(t, l, "default", gatedApp, gateStarted, "danki warm gate")
}

// gateWatch looks at Envoy's per-endpoint counters and then at the gated
// pods every 200 ms. A pod whose condition is not True in a look was not
// warm when its counter was read just before, so any count then is a user
// request that reached it before it was warm.
type gateWatch struct {
	mu    sync.Mutex
	looks int
	// failed counts looks that could not read Envoy or the pods (skipped).
	failed  int
	lastErr error
	pods    map[string]*gatePodSeen
	stop    func()
}

// sawWarm reports whether the watch has seen each of pods warm, and which
// it has not.
func (w *gateWatch) sawWarm(pods []corev1.Pod) (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var not []string
	for _, p := range pods {
		if s := w.pods[p.Name]; s == nil || s.warmAt.IsZero() {
			not = append(not, p.Name)
		}
	}
	return len(not) == 0, fmt.Sprintf("%d looks (%d failed, last: %v); not seen warm yet: %s", w.looks, w.failed, w.lastErr, strings.Join(not, ", "))
}

type gatePodSeen struct {
	created, warmAt, firstUsers time.Time
	notWarmLooks                int
	usersBeforeWarm             int64
	// unwarmed counts looks where a pod seen warm before was not: the
	// gate took a warm pod out of load balancing again.
	unwarmed int
	// yieldedLooks counts looks at the pod warming with its CPU request
	// lowered (yieldCPU) in the spec and applied by the lab's runner (the
	// container status); warmLow looks at it warm with any other request
	// than its own in either.
	yieldedLooks, warmLow int
	warmLowSeen           string
}

func watchGate(t *testing.T, ctx context.Context, l *lab) *gateWatch {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w := &gateWatch{pods: map[string]*gatePodSeen{}}
	w.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			rq, err := gatedRequests()
			var list *corev1.PodList
			if err == nil {
				list, err = l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + gatedApp})
			}
			if err != nil {
				if ctx.Err() != nil {
					return // stopped
				}
				w.mu.Lock()
				w.failed++
				w.lastErr = err
				w.mu.Unlock()
				continue
			}
			now := time.Now()
			w.mu.Lock()
			w.looks++
			for i := range list.Items {
				p := &list.Items[i]
				s := w.pods[p.Name]
				if s == nil {
					s = &gatePodSeen{created: p.CreationTimestamp.Time}
					w.pods[p.Name] = s
				}
				n := rq[p.Status.PodIP]
				if p.Status.PodIP == "" {
					n = 0
				}
				c := podCondition(p, condWarm)
				warm := c != nil && c.Status == corev1.ConditionTrue
				spec, applied := cpuRequests(p)
				switch {
				case !warm && c != nil && c.Reason == "Warming" && spec == "1m" && applied == "1m":
					s.yieldedLooks++
				case warm && (spec != gatedCPURequest || applied != gatedCPURequest):
					s.warmLow++
					s.warmLowSeen = fmt.Sprintf("spec %s, applied %s", spec, applied)
				}
				switch {
				case !warm && !s.warmAt.IsZero():
					s.unwarmed++
				case !warm:
					s.notWarmLooks++
					s.usersBeforeWarm = max(s.usersBeforeWarm, n)
				case s.warmAt.IsZero():
					s.warmAt = now
				}
				if n > 0 && s.firstUsers.IsZero() {
					s.firstUsers = now
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// gatedCPURequest is the CPU request of lab/manifests/gate/30-gated.yaml.
const gatedCPURequest = "250m"

// cpuRequests are the pod's first container's CPU request in its spec and
// as applied (its container status's resources; "" until reported).
func cpuRequests(p *corev1.Pod) (spec, applied string) {
	if len(p.Spec.Containers) > 0 {
		spec = p.Spec.Containers[0].Resources.Requests.Cpu().String()
	}
	if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Resources != nil {
		applied = p.Status.ContainerStatuses[0].Resources.Requests.Cpu().String()
	}
	return spec, applied
}

// gatedRequests reads Envoy's rq_total per endpoint IP (10.244.0.x:8080) of
// the gated cluster: requests the gateway sent to that pod — user requests
// only, since the gate's warm-up goes straight to the pod IP, not through
// Envoy.
func gatedRequests() (map[string]int64, error) {
	counts, err := envoyHostCounts()
	if err != nil {
		return nil, err
	}
	rq := map[string]int64{}
	for _, c := range counts {
		if c.cluster == gatedCluster && c.port == "8080" && strings.HasPrefix(c.ip, "10.244.0.") {
			rq[c.ip] = c.n
		}
	}
	return rq, nil
}

func gatedReady(ctx context.Context, l *lab, n int32) (bool, string) {
	d, err := l.kube.AppsV1().Deployments("default").Get(ctx, gatedApp, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	list, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + gatedApp})
	if err != nil {
		return false, err.Error()
	}
	var state []string
	for _, p := range list.Items {
		c := podCondition(&p, condWarm)
		if c == nil {
			state = append(state, p.Name+": no warm condition")
			continue
		}
		state = append(state, fmt.Sprintf("%s: %s %s %q", p.Name, c.Status, c.Reason, c.Message))
	}
	return d.Status.ReadyReplicas == n && d.Status.Replicas == n && len(list.Items) == int(n),
		fmt.Sprintf("%d/%d ready; %s", d.Status.ReadyReplicas, d.Status.Replicas, strings.Join(state, "; "))
}

func gatedPods(t *testing.T, ctx context.Context, l *lab) []corev1.Pod {
	t.Helper()
	list, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + gatedApp})
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

func podCondition(p *corev1.Pod, typ string) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if string(p.Status.Conditions[i].Type) == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// gateLogHas returns the first line of the gate's log with msg="<msg>" and
// the pod reference (pod=default/NAME, a whole field), or "".
func gateLogHas(path, msg, ref string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `msg="`+msg+`"`) && (strings.Contains(line, ref+" ") || strings.HasSuffix(line, ref)) {
			return line
		}
	}
	return ""
}

// oneReplica writes a copy of the Deployment manifest at path with
// replicas: 1 and returns the copy's path.
func oneReplica(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "\n  replicas: 2\n", "\n  replicas: 1\n"
	if strings.Count(string(b), from) != 1 {
		t.Fatalf("%s has no single %q to lower", path, strings.TrimSpace(from))
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
