package gate_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/gate"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
)

const ns = "default"

// TestGateOnAPIServer runs the gate against a real API server, as its
// ServiceAccount bound by deploy/gate/rbac.yaml (so every call it makes is
// one that RBAC grants), with its webhook called by the API server over TLS
// from the self-managed CA. There is no kubelet: the test plays it, setting
// each pod's IP and ContainersReady, and serves the pod from a local
// cold-starting server.
func TestGateOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := env.Kube
	applyRBAC(t, ctx, kube)

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:danki-gate:danki-gate",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:danki-gate", "system:authenticated"}}
	port := freePort(t)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	certs, err := os.MkdirTemp("", "danki-gate-test-")
	if err != nil {
		t.Fatal(err)
	}
	// The webhook configuration exists before the gate starts, trusting a
	// CA that is not the gate's (stale): the gate patches it.
	stale := registerWebhook(t, ctx, kube, port)
	started := make(chan *gate.Reconciler, 1)
	done := make(chan error, 1)
	go func() {
		done <- gate.Run(ctx, sa, gate.Options{
			WebhookHost: "127.0.0.1", WebhookPort: port, CertDir: certs, MaxConcurrent: 4, MaxTotalQPS: 4 * 400,
			WebhookConfig: webhookConfig, MetricsAddr: metricsAddr,
			// A tenant's policy: the test's pods run on this machine.
			Policy:    policy.Policy{Network: policy.Network{AllowLoopback: true}},
			Log:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
			OnStarted: func(r *gate.Reconciler, _ string) { started <- r },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gate.Run: %v", err)
		}
		_ = os.RemoveAll(certs)
	})
	var rec *gate.Reconciler
	select {
	case rec = <-started:
	case err := <-done:
		t.Fatalf("gate.Run ended before it started: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the gate did not start within 2m (its webhook server, cache and reconciler)")
	}
	t.Run("the gate makes a stale caBundle trust its CA", func(t *testing.T) { testCABundlePatched(t, ctx, kube, certs, stale) })
	t.Run("the API server sends the webhook opted-in pods only", func(t *testing.T) { testWebhookScope(t, ctx, kube) })
	t.Run("the gate caches gated pods only, without managedFields", func(t *testing.T) { testCacheScope(t, ctx, kube, rec) })
	t.Run("RBAC: the one webhook configuration, no other", func(t *testing.T) { testWebhookConfigRBAC(t, ctx, kube) })

	t.Run("webhook injects the gate into annotated pods only", func(t *testing.T) {
		on := createPod(t, ctx, kube, "annotated", "true", 8080)
		if !gate.HasGate(on) {
			t.Fatalf("annotated pod created without the readiness gate: %+v", on.Spec.ReadinessGates)
		}
		off := createPod(t, ctx, kube, "plain", "", 8080)
		if len(off.Spec.ReadinessGates) != 0 {
			t.Fatalf("pod without the annotation got readiness gates %+v", off.Spec.ReadinessGates)
		}
		out := createPod(t, ctx, kube, "opted-out", "false", 8080)
		if gate.HasGate(out) {
			t.Fatal(`pod annotated "false" got the gate`)
		}
	})

	t.Run("condition True only after the warm-up converged", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 30*time.Millisecond, 300))
		srv.HealthPath = "/healthz"
		pod := createPod(t, ctx, kube, "cold", `{"qps": 400, "connections": 4, "healthPath": "/healthz"}`, serverPort(t, srv.URL))
		if gate.IsWarm(pod) {
			t.Fatal("warm before anything happened")
		}
		markContainersReady(t, ctx, kube, pod)
		var warming bool
		var sentWhenWarm int64
		waitPod(t, ctx, kube, "cold", time.Minute, "danki.dev/warm True", func(p *corev1.Pod) bool {
			c := warmCondition(p)
			if c != nil && c.Reason == gate.ReasonWarming {
				warming = true
			}
			if gate.IsWarm(p) {
				sentWhenWarm = srv.Load()
				return true
			}
			return false
		})
		c := warmCondition(getPod(t, ctx, kube, "cold"))
		if c.Reason != gate.ReasonWarm || !strings.Contains(c.Message, "converged") {
			t.Fatalf("condition %s %q; want reason Warm naming the convergence", c.Reason, c.Message)
		}
		if sentWhenWarm < minStop() || !warming {
			t.Fatalf("condition True after %d requests (progress seen: %v); want the warm-up's minimum stop (%d) first", sentWhenWarm, warming, minStop())
		}
		if srv.Unmarked() != 0 {
			t.Fatalf("%d requests without the marker header", srv.Unmarked())
		}
		t.Logf("warm after %d requests: %s", sentWhenWarm, c.Message)
		// A warm pod stays warm: no second warm-up (whose progress would
		// set the condition False and take a serving pod out of load
		// balancing), whatever the informer cache still says.
		settled := srv.Load()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if !gate.IsWarm(getPod(t, ctx, kube, "cold")) {
				t.Fatalf("condition left True after the warm-up: %+v", warmCondition(getPod(t, ctx, kube, "cold")))
			}
		}
		if extra := srv.Load() - settled; extra > 10 {
			t.Fatalf("%d more requests after the pod was warm: a second warm-up", extra)
		}
	})

	t.Run("one warm-up at a time per node: the second pod queued, warmed after", func(t *testing.T) {
		servers := map[string]*testutil.ColdServer{}
		for _, name := range []string{"node-a", "node-b"} {
			srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 300))
			srv.HealthPath = "/healthz"
			servers[name] = srv
			pod := createPod(t, ctx, kube, name, `{"qps": 400, "connections": 4, "healthPath": "/healthz"}`, serverPort(t, srv.URL))
			// The scheduler's part: both pods on node n1.
			if err := kube.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("bind %s to n1: %v", name, err)
			}
			markContainersReady(t, ctx, kube, pod)
		}
		var queued string
		waitFor := func(name string) {
			waitPod(t, ctx, kube, name, time.Minute, name+" warm", func(p *corev1.Pod) bool {
				for other, first := range map[string]string{"node-a": "node-b", "node-b": "node-a"} {
					c := warmCondition(getPod(t, ctx, kube, other))
					if c == nil || c.Reason != gate.ReasonQueued {
						continue
					}
					if !strings.Contains(c.Message, "on node n1") {
						t.Fatalf("queued message %q does not name the node", c.Message)
					}
					queued = other
					// The condition may still say Queued a moment after
					// the slot freed: judge the load only while the first
					// pod is not warm yet (read after the load, so it was
					// not warm when the load was read either).
					n := servers[other].Load()
					if !gate.IsWarm(getPod(t, ctx, kube, first)) && n != 0 {
						t.Fatalf("%s queued behind %s but its server had %d requests while %s was still warming", other, first, n, first)
					}
				}
				return gate.IsWarm(p)
			})
		}
		waitFor("node-a")
		waitFor("node-b")
		if queued == "" {
			t.Fatal("neither pod was seen queued behind the other on node n1")
		}
		t.Logf("%s waited for the other's warm-up on n1; both warm (%d and %d requests)", queued, servers["node-a"].Load(), servers["node-b"].Load())
	})

	failing := func(t *testing.T, name, policy string, want corev1.ConditionStatus, reason string) {
		srv := testutil.NewColdServer(t, nil)
		srv.HealthPath, srv.FirstOnConnStatus = "/healthz", 0
		srv.Delay = func(int64, bool) time.Duration { return 0 }
		broken := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				return
			}
			w.WriteHeader(http.StatusInternalServerError)
		})}
		l := testutil.ListenLoopback(t)
		go func() { _ = broken.Serve(l) }()
		t.Cleanup(func() { _ = broken.Close() })
		cfg := fmt.Sprintf(`{"healthPath": "/healthz", "qps": 200, "retries": 2, "retryBackoff": "1s", "onFailure": %q}`, policy)
		pod := createPod(t, ctx, kube, name, cfg, l.Addr().(*net.TCPAddr).Port)
		markContainersReady(t, ctx, kube, pod)
		waitPod(t, ctx, kube, name, time.Minute, "gave up: "+reason, func(p *corev1.Pod) bool {
			c := warmCondition(p)
			return c != nil && c.Reason == reason && c.Status == want
		})
		c := warmCondition(getPod(t, ctx, kube, name))
		if !strings.Contains(c.Message, "after 2 attempts") || !strings.Contains(c.Message, "500") {
			t.Fatalf("message %q; want the attempts and the last error", c.Message)
		}
		events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil || len(events.Items) == 0 {
			t.Fatalf("no Event for %s (%v)", name, err)
		}
	}
	t.Run("failing warm-up, fail closed: stays un-ready", func(t *testing.T) {
		failing(t, "broken-closed", gate.StayUnready, corev1.ConditionFalse, gate.ReasonFailed)
	})
	t.Run("failing warm-up, fail open: Ready anyway", func(t *testing.T) {
		failing(t, "broken-open", gate.BecomeReady, corev1.ConditionTrue, gate.ReasonFailedOpen)
	})

	t.Run("invalid config: condition and Event name the field", func(t *testing.T) {
		pod := createPod(t, ctx, kube, "typo", `{"qsp": 5}`, 8080)
		markContainersReady(t, ctx, kube, pod)
		waitPod(t, ctx, kube, "typo", 30*time.Second, "InvalidConfig naming qsp", func(p *corev1.Pod) bool {
			c := warmCondition(p)
			return c != nil && c.Reason == gate.ReasonInvalidConfig && strings.Contains(c.Message, "qsp")
		})
	})

	t.Run("a container restart makes the pod cold again: un-ready, warmed afresh", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		srv.HealthPath = "/healthz"
		pod := createPod(t, ctx, kube, "restarted", `{"qps": 400, "healthPath": "/healthz"}`, serverPort(t, srv.URL))
		markContainersReady(t, ctx, kube, pod)
		waitPod(t, ctx, kube, "restarted", time.Minute, "warm", gate.IsWarm)
		first := srv.Load()
		setContainersReady(t, ctx, kube, "restarted", corev1.ConditionFalse)
		waitPod(t, ctx, kube, "restarted", 30*time.Second, "condition False after the restart", func(p *corev1.Pod) bool {
			c := warmCondition(p)
			return c != nil && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "restarted")
		})
		setContainersReady(t, ctx, kube, "restarted", corev1.ConditionTrue)
		waitPod(t, ctx, kube, "restarted", time.Minute, "warm again", gate.IsWarm)
		if again := srv.Load() - first; again < minStop() {
			t.Fatalf("warm again after %d more requests; want a fresh warm-up (≥ %d)", again, minStop())
		}
	})

	t.Run("the neighbour guard watches the workload's Ready pods; no rejection", func(t *testing.T) {
		sibling := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		sibling.HealthPath = "/healthz"
		// The new pod is slower than its sibling even when warm: the gate
		// must not reject it (it only guards the sibling's users).
		fresh := testutil.NewColdServer(t, testutil.Decaying(20*time.Millisecond, 30*time.Millisecond, 300))
		fresh.HealthPath = "/healthz"
		owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "app-1234", UID: "rs-uid-1234", Controller: new(true)}
		old := createOwnedPod(t, ctx, kube, "sibling", owner, serverPort(t, sibling.URL))
		markReady(t, ctx, kube, old)
		pod := createOwnedPod(t, ctx, kube, "newcomer", owner, serverPort(t, fresh.URL))
		markContainersReady(t, ctx, kube, pod)
		waitPod(t, ctx, kube, "newcomer", time.Minute, "warm", gate.IsWarm)
		if sibling.Load() == 0 || sibling.Unmarked() != 0 {
			t.Fatalf("sibling got %d probe requests (%d unmarked); want the guard's marked probe", sibling.Load(), sibling.Unmarked())
		}
		t.Logf("sibling probed %d times while the newcomer warmed (%d requests)", sibling.Load(), fresh.Load())
	})

	t.Run("a Burstable pod warms at the least CPU weight and gets its request back before Ready", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 300))
		srv.HealthPath = "/healthz"
		p := newPod("burstable", `{"qps": 400, "healthPath": "/healthz"}`, serverPort(t, srv.URL))
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Annotations[wellknown.CPURequestsAnnotation]; got != `{"app":"500m"}` {
			t.Fatalf("webhook recorded %s=%q; want {\"app\":\"500m\"}", wellknown.CPURequestsAnnotation, got)
		}
		markContainersReady(t, ctx, kube, pod)
		cpu := func(p *corev1.Pod) string { return p.Spec.Containers[0].Resources.Requests.Cpu().String() }
		var lowered bool
		waitPod(t, ctx, kube, "burstable", time.Minute, "warm", func(p *corev1.Pod) bool {
			if c := warmCondition(p); c != nil && c.Reason == gate.ReasonWarming && cpu(p) == gate.YieldCPURequest {
				lowered = true
			}
			if gate.IsWarm(p) && cpu(p) != "500m" {
				t.Fatalf("condition True with the CPU request at %s; want it back at 500m first", cpu(p))
			}
			return gate.IsWarm(p)
		})
		if !lowered {
			t.Fatalf("never saw the CPU request at %s while warming", gate.YieldCPURequest)
		}
		final := getPod(t, ctx, kube, "burstable")
		if lim := final.Spec.Containers[0].Resources.Limits.Cpu().String(); lim != "2" || final.Status.QOSClass != corev1.PodQOSBurstable {
			t.Fatalf("after the warm-up: CPU limit %s, QoS %s; want the limit untouched (2) and Burstable", lim, final.Status.QOSClass)
		}
	})

	t.Run("a CPU record the pod's author wrote is replaced at admission: never restored above the pod's own request", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 300))
		srv.HealthPath = "/healthz"
		p := newPod("forged-record", `{"qps": 400, "healthPath": "/healthz"}`, serverPort(t, srv.URL))
		// The pod lists the gate itself and brings its own record.
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}}
		p.Annotations[wellknown.CPURequestsAnnotation] = `{"app":"32"}`
		p.Annotations[wellknown.CPURequestsSignatureAnnotation] = "forged"
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Annotations[wellknown.CPURequestsAnnotation]; got != `{"app":"500m"}` {
			t.Fatalf("admitted with %s=%q; want the webhook's own {\"app\":\"500m\"}", wellknown.CPURequestsAnnotation, got)
		}
		if sig := pod.Annotations[wellknown.CPURequestsSignatureAnnotation]; sig == "" || sig == "forged" {
			t.Fatalf("admitted with signature %q; want the webhook's", sig)
		}
		markContainersReady(t, ctx, kube, pod)
		max := resource.MustParse("500m")
		waitPod(t, ctx, kube, "forged-record", time.Minute, "warm", func(p *corev1.Pod) bool {
			if q := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.Cmp(max) > 0 {
				t.Fatalf("CPU request %s, above the pod's own 500m", q.String())
			}
			return gate.IsWarm(p)
		})
		if q := getPod(t, ctx, kube, "forged-record").Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.Cmp(max) != 0 {
			t.Fatalf("warm with the CPU request at %s; want 500m", q.String())
		}
	})

	t.Run("yieldCPU fromStart: lowered once scheduled, before its containers are ready", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		srv.HealthPath = "/healthz"
		p := newPod("from-start", `{"qps": 400, "healthPath": "/healthz", "yieldCPU": "fromStart"}`, serverPort(t, srv.URL))
		p.Spec.NodeName = "node-a"
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cpu := func(p *corev1.Pod) string { return p.Spec.Containers[0].Resources.Requests.Cpu().String() }
		waitPod(t, ctx, kube, "from-start", 30*time.Second, "CPU request 1m while the containers start", func(p *corev1.Pod) bool {
			return cpu(p) == gate.YieldCPURequest
		})
		if srv.Load() != 0 {
			t.Fatalf("%d warm-up requests before the containers were ready", srv.Load())
		}
		markContainersReady(t, ctx, kube, getPod(t, ctx, kube, "from-start"))
		waitPod(t, ctx, kube, "from-start", time.Minute, "warm with its request back", func(p *corev1.Pod) bool {
			if gate.IsWarm(p) && cpu(p) != "500m" {
				t.Fatalf("condition True with the CPU request at %s; want it back at 500m first", cpu(p))
			}
			return gate.IsWarm(p)
		})
	})

	t.Run("a pod that opted out of yieldCPU keeps its CPU request", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		srv.HealthPath = "/healthz"
		p := newPod("no-yield", `{"qps": 400, "healthPath": "/healthz", "yieldCPU": false}`, serverPort(t, srv.URL))
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		markContainersReady(t, ctx, kube, pod)
		waitPod(t, ctx, kube, "no-yield", time.Minute, "warm", func(p *corev1.Pod) bool {
			if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "500m" {
				t.Fatalf("CPU request changed to %s with yieldCPU false", got)
			}
			return gate.IsWarm(p)
		})
	})

	t.Run("deleted pod stops its load at once", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.NeverSettling)
		srv.HealthPath = "/healthz"
		pod := createPod(t, ctx, kube, "doomed", `{"healthPath": "/healthz", "qps": 200}`, serverPort(t, srv.URL))
		markContainersReady(t, ctx, kube, pod)
		deadline := time.Now().Add(30 * time.Second)
		for srv.Load() < 100 {
			if time.Now().After(deadline) {
				t.Fatalf("warm-up never started: %d requests", srv.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
		zero := int64(0)
		if err := kube.CoreV1().Pods(ns).Delete(ctx, "doomed", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		// The watch delivers the deletion, the reconcile cancels the load.
		var n int64
		for {
			n = srv.Load()
			time.Sleep(300 * time.Millisecond)
			if srv.Load() == n {
				break
			}
			if time.Since(deleted) > 5*time.Second {
				t.Fatalf("load still running 5 s after the pod was deleted (%d requests)", srv.Load())
			}
		}
		t.Logf("load stopped within %s of the deletion", time.Since(deleted).Round(100*time.Millisecond))
	})

	// After the work above, the manager's metrics endpoint shows it: the
	// gate's metrics next to controller-runtime's own.
	t.Run("the metrics endpoint counts the warm-ups, their outcomes and the webhook's answers", func(t *testing.T) {
		url := "http://" + metricsAddr + "/metrics"
		m := testutil.ScrapeMetrics(t, url)
		// Warm: cold, node-a, node-b, restarted (twice), newcomer,
		// burstable, forged-record, from-start, no-yield.
		if warm := m.MustValue(t, "danki_gate_warmups_total", "outcome", "warm"); warm < 10 {
			t.Errorf("danki_gate_warmups_total{outcome=warm} = %v; want ≥ 10 (the pods warmed above)", warm)
		}
		// The two broken pods: two failed attempts each (500s: failed).
		if failed := m.MustValue(t, "danki_gate_warmups_total", "outcome", "failed"); failed < 4 {
			t.Errorf("danki_gate_warmups_total{outcome=failed} = %v; want ≥ 4 (2 pods × 2 attempts)", failed)
		}
		if rejected := m.MustValue(t, "danki_gate_warmups_total", "outcome", "rejected"); rejected < 1 {
			t.Errorf("danki_gate_warmups_total{outcome=rejected} = %v; want ≥ 1 (the typo pod)", rejected)
		}
		if n := m.MustValue(t, "danki_gate_warmup_duration_seconds"); n < 10 {
			t.Errorf("danki_gate_warmup_duration_seconds has %v observations; want one per warm attempt (≥ 10)", n)
		}
		if sum, _ := m.HistogramSum("danki_gate_warmup_requests"); sum < float64(10*minStop()) {
			t.Errorf("danki_gate_warmup_requests sums to %v; want ≥ 10 pods × %d (the minimum stop)", sum, minStop())
		}
		if slots := m.MustValue(t, "danki_gate_warmup_slots"); slots != 4 {
			t.Errorf("danki_gate_warmup_slots = %v; want 4 (MaxConcurrent)", slots)
		}
		if gated := m.MustValue(t, "danki_gate_webhook_admissions_total", "result", "gated"); gated < 12 {
			t.Errorf("danki_gate_webhook_admissions_total{result=gated} = %v; want one per gated pod created (≥ 12)", gated)
		}
		if _, ok := m.Value("controller_runtime_reconcile_total"); !ok {
			t.Errorf("controller-runtime's own metrics missing from the endpoint: the gate's are not on its registry? (%s)", m.Names("controller_runtime"))
		}
		// The deleted pod's warm-up ends with its outcome once the
		// reconcile stopped it; the gauges fall back to zero when every
		// warm-up is over (the failing pods' retries may still be due).
		testutil.WaitFor(t, 30*time.Second, func() bool {
			m := testutil.ScrapeMetrics(t, url)
			deleted, _ := m.Value("danki_gate_warmups_total", "outcome", "deleted")
			running, _ := m.Value("danki_gate_warmups_running")
			queued, _ := m.Value("danki_gate_warmups_queued")
			inUse, _ := m.Value("danki_gate_warmup_slots_in_use")
			return deleted >= 1 && running == 0 && queued == 0 && inUse == 0
		})
	})
}

func applyRBAC(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	t.Helper()
	docs, err := testenv.YAMLDocuments(filepath.Join("..", "..", "deploy", "gate", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "danki-gate"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			mustUnmarshal(t, doc, &o)
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			mustUnmarshal(t, doc, &o)
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			mustUnmarshal(t, doc, &o)
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			mustUnmarshal(t, doc, &o)
			_, err = kube.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			mustUnmarshal(t, doc, &o)
			_, err = kube.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("deploy/gate/rbac.yaml: unexpected %s", meta.Kind)
		}
		if err != nil {
			t.Fatalf("apply %s: %v", meta.Kind, err)
		}
	}
}

func mustUnmarshal(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatal(err)
	}
}

// webhookConfig is deploy/gate's MutatingWebhookConfiguration's name.
const webhookConfig = "danki-gate"

// registerWebhook points the API server at the gate's webhook with
// deploy/gate's rules, match conditions and failure policy, and a caBundle
// of a CA that is not the gate's, which it returns: the gate must patch it.
func registerWebhook(t *testing.T, ctx context.Context, kube kubernetes.Interface, port int) []byte {
	t.Helper()
	other, err := gate.NewCerts([]string{"127.0.0.1"}, time.Hour, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := testenv.YAMLDocuments(filepath.Join("..", "..", "deploy", "gate", "webhook.yaml"))
	if err != nil || len(docs) != 1 {
		t.Fatalf("deploy/gate/webhook.yaml: %v", err)
	}
	var wh admissionv1.MutatingWebhookConfiguration
	mustUnmarshal(t, docs[0], &wh)
	if wh.Name != webhookConfig {
		t.Fatalf("deploy/gate/webhook.yaml names %s, want %s", wh.Name, webhookConfig)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, gate.WebhookPath)
	wh.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{URL: &url, CABundle: other.CABundle}
	if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &wh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return other.CABundle
}

// waitWebhook waits until the API server calls the webhook: a probe pod
// comes back gated.
func waitWebhook(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		p := createPod(t, ctx, kube, "probe-"+strconv.Itoa(i), "true", 8080)
		if gate.HasGate(p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the API server never called the webhook")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func createPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name, annotation string, port int) *corev1.Pod {
	t.Helper()
	created, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(name, annotation, port), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return created
}

// newPod is a pod serving port, with the gate's annotation when given.
func newPod(name, annotation string, port int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString("http")}}},
		}}},
	}
	if annotation != "" {
		p.Annotations = map[string]string{wellknown.WarmUpAnnotation: annotation}
	}
	return p
}

// markContainersReady plays the kubelet: the pod runs at 127.0.0.1 with
// its containers ready.
func markContainersReady(t *testing.T, ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	// The gate writes its own condition meanwhile: retry on conflicts.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getPod(t, ctx, kube, pod.Name)
		now := metav1.Now()
		cur.Status.Phase = corev1.PodRunning
		cur.Status.PodIP = "127.0.0.1"
		cur.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
		cur.Status.Conditions = append(cur.Status.Conditions,
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
		_, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set status of %s: %v", pod.Name, err)
	}
}

// createOwnedPod creates an opted-in pod controlled by owner (a ReplicaSet
// that need not exist: no garbage collector runs here).
func createOwnedPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string, owner metav1.OwnerReference, port int) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: []metav1.OwnerReference{owner},
			Annotations: map[string]string{wellknown.WarmUpAnnotation: `{"qps": 300, "healthPath": "/healthz"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}},
	}
	created, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return created
}

// markReady plays the kubelet for a pod already serving: Ready, at
// 127.0.0.1, its gate's condition True.
func markReady(t *testing.T, ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getPod(t, ctx, kube, pod.Name)
		now := metav1.Now()
		cur.Status.Phase, cur.Status.PodIP, cur.Status.PodIPs = corev1.PodRunning, "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
		cur.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: wellknown.WarmCondition, Status: corev1.ConditionTrue, Reason: gate.ReasonWarm, LastTransitionTime: now},
		}
		_, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("mark %s Ready: %v", pod.Name, err)
	}
}

// setContainersReady plays the kubelet seeing a container stop (False) or
// come back (True).
func setContainersReady(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string, status corev1.ConditionStatus) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getPod(t, ctx, kube, name)
		for i := range cur.Status.Conditions {
			if cur.Status.Conditions[i].Type == corev1.ContainersReady {
				cur.Status.Conditions[i].Status = status
				cur.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
		_, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set ContainersReady=%s on %s: %v", status, name, err)
	}
}

func getPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string, limit time.Duration, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	var c *corev1.PodCondition
	if last != nil {
		c = warmCondition(last)
	}
	t.Fatalf("pod %s: %s not within %s; condition %+v", name, what, limit, c)
}

func warmCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == wellknown.WarmCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func serverPort(t *testing.T, url string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}

func freePort(t *testing.T) int {
	t.Helper()
	l := testutil.ListenLoopback(t)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// minStop is the warm-up's earliest stop per pod with the defaults (the
// gate's configs here set no stopping-rule field).
func minStop() int64 {
	c := warmup.Config{}.WithDefaults()
	return c.MinStop()
}
