package gate

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
)

// TestHostileAnnotationsDoNotStopOtherTenants runs the gate (its four
// reconcile workers, as deploy/gate runs it) on a real API server while
// one tenant's namespace holds more pods than there are workers whose
// annotations' parse never ends — and two whose request template is built
// to render for long (3·10⁸ iterations). Another namespace's pod, created after them, is
// still warmed: no reconcile waits on a tenant's annotation past the bound.
func TestHostileAnnotationsDoNotStopOtherTenants(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	kube := env.Kube
	for _, ns := range []string{"hostile", "other"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A parse that never ends, whatever the template engine refuses: the
	// reconciler's own bound is what is tested.
	release := make(chan struct{})
	started := make(chan *Reconciler, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, env.Config, Options{
			Policy:    policy.Policy{Network: policy.Network{AllowLoopback: true}},
			RecordKey: RecordKey("0123456789abcdef0123456789abcdef"),
			secondRun: true, // TestGateOnAPIServer runs it too
			Log:       slog.New(slog.NewTextHandler(testLog{t}, nil)),
			OnStarted: func(r *Reconciler, _ string) {
				r.testParse = func(annotation string) (Config, error) {
					if strings.Contains(annotation, "never-ends") {
						<-release
					}
					return ParseConfig(annotation, r.Policy)
				}
				started <- r
			},
		})
	}()
	t.Cleanup(func() {
		close(release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-started

	var hostile []string
	for i := range 6 {
		name := "never-ends-" + string(rune('a'+i))
		gatedPod(t, ctx, kube, "hostile", name, `{"requests": [{"path": "/never-ends"}]}`, 1)
		hostile = append(hostile, name)
	}
	for i := range 2 {
		name := "renders-long-" + string(rune('a'+i))
		gatedPod(t, ctx, kube, "hostile", name, `{"requests": [{"path": "/x{{range 30000}}{{range 10000}}{{end}}{{end}}"}]}`, 1)
		hostile = append(hostile, name)
	}
	srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 5*time.Millisecond, 200))
	srv.HealthPath = "/healthz"
	gatedPod(t, ctx, kube, "other", "fine", `{"qps": 400, "connections": 4, "healthPath": "/healthz", "yieldCPU": false}`, portOf(t, srv.URL))

	waitFor(t, ctx, kube, "other", "fine", 2*time.Minute, "danki.dev/warm True", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == ReasonWarm
	})
	for _, name := range hostile {
		waitFor(t, ctx, kube, "hostile", name, time.Minute, "InvalidConfig", func(c *corev1.PodCondition) bool {
			return c.Status == corev1.ConditionFalse && c.Reason == ReasonInvalidConfig
		})
	}
}

// gatedPod creates a pod in namespace listing the readiness gate (and the
// label the gate's cache selects), then plays the kubelet: running at
// 127.0.0.1:port, its containers ready.
func gatedPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, namespace, name, annotation string, port int) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels:      map[string]string{wellknown.GatedLabel: "true"},
			Annotations: map[string]string{wellknown.WarmUpAnnotation: annotation}},
		Spec: corev1.PodSpec{
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}},
			Containers: []corev1.Container{{Name: "app", Image: "app:v1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}},
		},
	}
	if _, err := kube.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Phase, cur.Status.PodIP, cur.Status.PodIPs = corev1.PodRunning, "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
		cur.Status.Conditions = append(cur.Status.Conditions,
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
		_, err = kube.CoreV1().Pods(namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set status of %s/%s: %v", namespace, name, err)
	}
}

// waitFor waits up to limit for the pod's danki.dev/warm condition to
// satisfy ok.
func waitFor(t *testing.T, ctx context.Context, kube kubernetes.Interface, namespace, name string, limit time.Duration, what string, ok func(*corev1.PodCondition) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last *corev1.PodCondition
	for time.Now().Before(deadline) {
		if p, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			if last = condition(p); last != nil && ok(last) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s: %s not within %s; condition %+v", namespace, name, what, limit, last)
}
