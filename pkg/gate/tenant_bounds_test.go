package gate

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// What one tenant's pods make the gate do, every tenant pays: these tests
// hold the bounds of docs/gate.md's "Blast radius" on the Reconciler with
// an in-memory client (the API server's part is in tenant_test.go).

// fakeGate is a Reconciler on a fake client holding pods, as the
// operator's policy lets the test's pods on this machine be warmed.
func fakeGate(t *testing.T, pods ...*corev1.Pod) (*Reconciler, client.Client, *events) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]client.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&corev1.Pod{}).Build()
	ev := &events{}
	r := &Reconciler{Client: c, Events: ev, Log: slog.New(slog.NewTextHandler(testLog{t}, nil)),
		Policy: policy.Policy{Network: policy.Network{AllowLoopback: true}}}
	return r, c, ev
}

// readyPod is a gated pod of namespace whose containers are ready, served
// at 127.0.0.1:port, with annotation as its warm-up config.
func readyPod(namespace, name, annotation string, port int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name),
			Annotations: map[string]string{wellknown.WarmUpAnnotation: annotation}},
		Spec: corev1.PodSpec{
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}},
			Containers:     []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}},
		},
		Status: corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}},
	}
}

func reconcilePod(t *testing.T, r *Reconciler, p *corev1.Pod) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
	if err != nil {
		t.Fatalf("reconcile %s/%s: %v", p.Namespace, p.Name, err)
	}
	return res
}

// gateCondition is the pod's danki.dev/warm condition as the client has it.
func gateCondition(t *testing.T, c client.Client, p *corev1.Pod) *corev1.PodCondition {
	t.Helper()
	var cur corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
		t.Fatal(err)
	}
	return condition(&cur)
}

// waitCondition waits up to limit for p's condition to satisfy ok.
func waitCondition(t *testing.T, c client.Client, p *corev1.Pod, limit time.Duration, what string, ok func(*corev1.PodCondition) bool) *corev1.PodCondition {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		cond := gateCondition(t, c, p)
		if cond != nil && ok(cond) {
			return cond
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: no %s within %s; condition %+v", p.Namespace, p.Name, what, limit, cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func portOf(t *testing.T, url string) int {
	t.Helper()
	i := strings.LastIndex(url, ":")
	port, err := strconv.Atoi(url[i+1:])
	if err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return port
}

// TestSlotOfAPodThatNeverTurnsHealthyGoesToTheNextInLine: a tenant's pod
// whose health path never answers 200, with the longest healthTimeout and
// deadline the caps allow, holds the only slot; another namespace's pod
// waits behind it. The gate's own bound on the health wait
// (MaxHealthWait) fails the stuck pod's attempt and hands the slot on:
// the other pod is warm long before the stuck pod's healthTimeout.
func TestSlotOfAPodThatNeverTurnsHealthyGoesToTheNextInLine(t *testing.T) {
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(sick.Close)
	fine := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 5*time.Millisecond, 200))
	fine.HealthPath = "/healthz"

	stuck := readyPod("tenant-a", "never-healthy", `{"healthPath": "/healthz", "healthTimeout": "30m", "deadline": "1h", "yieldCPU": false}`, portOf(t, sick.URL))
	other := readyPod("tenant-b", "healthy", `{"healthPath": "/healthz", "qps": 400, "connections": 4, "yieldCPU": false}`, portOf(t, fine.URL))
	r, c, _ := fakeGate(t, stuck, other)
	r.MaxConcurrent = 1
	r.MaxHealthWait = 3 * time.Second
	t.Cleanup(func() { r.stop(stuck.UID, errPodDeleted); r.stop(other.UID, errPodDeleted) })

	reconcilePod(t, r, stuck)
	for deadline := time.Now().Add(2 * time.Second); r.slots.busy() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stuck pod holds no slot")
		}
	}
	reconcilePod(t, r, other)
	waitCondition(t, c, other, 10*time.Second, "Queued behind the stuck pod", func(c *corev1.PodCondition) bool { return c.Reason == ReasonQueued })

	failed := waitCondition(t, c, stuck, 30*time.Second, "failed attempt", func(c *corev1.PodCondition) bool { return c.Reason == ReasonRetrying })
	if !strings.Contains(failed.Message, "--max-health-wait") || !strings.Contains(failed.Message, "attempt 1 of 3") {
		t.Fatalf("stuck pod's condition %q; want its first attempt failed, naming --max-health-wait", failed.Message)
	}
	waitCondition(t, c, other, time.Minute, "Warm", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
}

// TestTenantHealthTimeoutOnlyNarrowsTheHealthWait: a pod's healthTimeout
// below the gate's bound is kept, one above it is lowered to it, and a
// negative bound leaves the pod's.
func TestTenantHealthTimeoutOnlyNarrowsTheHealthWait(t *testing.T) {
	for _, tc := range []struct {
		bound, pod, want time.Duration
		narrowed         bool
	}{
		{0, 30 * time.Minute, DefaultMaxHealthWait, true},
		{0, 10 * time.Second, 10 * time.Second, false},
		{time.Minute, 5 * time.Minute, time.Minute, true},
		{-1, 30 * time.Minute, 30 * time.Minute, false},
	} {
		r := &Reconciler{MaxHealthWait: tc.bound}
		cfg, err := ParseConfig(`{"healthTimeout": "`+tc.pod.String()+`"}`, policy.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		got, bound := r.withinHealthWait(cfg.Config)
		if got.HealthTimeout.D() != tc.want || (bound > 0) != tc.narrowed {
			t.Errorf("bound %s, pod's %s: healthTimeout %s (narrowed: %v); want %s (%v)", tc.bound, tc.pod, got.HealthTimeout, bound > 0, tc.want, tc.narrowed)
		}
	}
}

// TestHostNetworkPodIsNotWarmed: a pod on its node's network is never
// sent warm-up load (its address is the node's); it stays un-Ready with
// the reason in its condition and a Warning Event.
func TestHostNetworkPodIsNotWarmed(t *testing.T) {
	var hits atomic.Int64
	node := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(node.Close)
	pod := readyPod("tenant-a", "host-network", "true", portOf(t, node.URL))
	pod.Spec.HostNetwork = true
	r, c, ev := fakeGate(t, pod)
	t.Cleanup(func() { r.stop(pod.UID, errPodDeleted) })

	reconcilePod(t, r, pod)
	cond := gateCondition(t, c, pod)
	if cond == nil || cond.Reason != ReasonHostNetwork || cond.Status != corev1.ConditionFalse || !strings.Contains(cond.Message, "hostNetwork") {
		t.Fatalf("condition %+v; want False %s naming hostNetwork", cond, ReasonHostNetwork)
	}
	if n := r.Running(); n != 0 {
		t.Fatalf("%d warm-ups started for a host-network pod", n)
	}
	if !ev.has(ReasonHostNetwork) {
		t.Fatalf("no %s Event: %v", ReasonHostNetwork, ev.seen)
	}
	reconcilePod(t, r, pod) // again: still refused, nothing sent
	if n := r.Running(); n != 0 || hits.Load() != 0 {
		t.Fatalf("after a second reconcile: %d warm-ups, %d requests to the node's address", n, hits.Load())
	}
}

// TestNeighbourGuardSkipsHostNetworkSiblings: a Ready sibling on its node's
// network is not a neighbour to probe.
func TestNeighbourGuardSkipsHostNetworkSiblings(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid", Controller: ptrTrue()}
	mk := func(name string, host bool) *corev1.Pod {
		p := readyPod("tenant-a", name, "true", 8080)
		p.OwnerReferences = []metav1.OwnerReference{owner}
		p.Spec.HostNetwork = host
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		return p
	}
	warming, sibling, hostSibling := mk("warming", false), mk("sibling", false), mk("host-sibling", true)
	r, _, _ := fakeGate(t, warming, sibling, hostSibling)
	r.init()
	cfg, err := ParseConfig("true", r.Policy)
	if err != nil {
		t.Fatal(err)
	}
	got := r.neighbours(context.Background(), warming, cfg)
	if len(got) != 1 || got[0].Name != "sibling" {
		t.Fatalf("neighbours %+v; want the sibling only", got)
	}
}

func ptrTrue() *bool { b := true; return &b }

// TestParseBoundedAndOncePerAnnotation: a parse that does not end ends
// the reconcile's wait after the bound with the annotation refused, and
// the pods carrying the same annotation (one template's) read that one
// parse's refusal instead of each starting one and waiting again.
func TestParseBoundedAndOncePerAnnotation(t *testing.T) {
	r, _, _ := fakeGate(t)
	r.init()
	r.testParseTimeout = 50 * time.Millisecond
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var parses atomic.Int64
	r.testParse = func(annotation string) (Config, error) {
		if strings.Contains(annotation, "never-ends") {
			parses.Add(1)
			<-release
		}
		return ParseConfig(annotation, r.Policy)
	}
	hostile := `{"requests": [{"path": "/never-ends"}]}`
	start := time.Now()
	for range 3 {
		if _, err := r.parseConfig(context.Background(), hostile); !errors.Is(err, errParseTooLong) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("parse that never ends: %v; want refused for taking too long", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("three reconciles waited %s on the hostile annotation; want about one bound (50ms)", took)
	}
	if n := parses.Load(); n != 1 {
		t.Fatalf("the hostile annotation parsed %d times; want once", n)
	}
	if cfg, err := r.parseConfig(context.Background(), `{"qps": 5}`); err != nil || cfg.QPS != 5 {
		t.Fatalf("another annotation beside it: qps %v, %v", cfg.QPS, err)
	}
}

// TestParseOfAHostileTemplateIsBounded: a request template built to
// render for long (nested ranges: 3·10⁸ iterations when rendered) does not
// keep the reconcile waiting past the bound, whether the template engine
// refuses it at once or renders it.
func TestParseOfAHostileTemplateIsBounded(t *testing.T) {
	r, _, _ := fakeGate(t)
	r.init()
	r.testParseTimeout = 200 * time.Millisecond
	start := time.Now()
	_, err := r.parseConfig(context.Background(), `{"requests": [{"path": "/x{{range 30000}}{{range 10000}}{{end}}{{end}}"}]}`)
	if err == nil {
		t.Fatal("a template of 3·10⁸ iterations accepted")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the reconcile waited %s on it; want at most the bound (200ms)", took)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
}
