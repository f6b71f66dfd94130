package gate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
)

// events records the Reconciler's Events.
type events struct {
	mu   sync.Mutex
	seen []string // "reason: note"
}

func (e *events) Eventf(_, _ runtime.Object, _, reason, _, note string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, reason+": "+fmt.Sprintf(note, args...))
}

func (e *events) has(reason string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.seen {
		if strings.HasPrefix(s, reason+":") {
			return true
		}
	}
	return false
}

// TestYieldRecordOnAPIServer runs the gate's CPU yield (lower, then put
// back) against a real API server's pods/resize, with records a pod's
// author wrote or copied: the gate never sets a container's CPU request
// above what the container itself requested.
func TestYieldRecordOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := RecordKey("0123456789abcdef0123456789abcdef")
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	newReconciler := func() (*Reconciler, *events) {
		ev := &events{}
		r := &Reconciler{Client: c, Events: ev, Log: log, RecordKey: key}
		r.init()
		return r, ev
	}
	// A Burstable pod listing the gate, its container requesting cpu.
	pod := func(name, cpu string, annotations map[string]string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{wellknown.WarmUpAnnotation: "true"}},
			Spec: corev1.PodSpec{
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}},
				Containers: []corev1.Container{{Name: "app", Image: "app:v1", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")},
				}}},
			},
		}
		for k, v := range annotations {
			p.Annotations[k] = v
		}
		return p
	}
	create := func(t *testing.T, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		if err := c.Create(ctx, p); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		return p
	}
	cpu := func(t *testing.T, name string) resource.Quantity {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
	}
	// notAbove fails the test when the pod's request is above limit.
	notAbove := func(t *testing.T, name, limit, when string) {
		t.Helper()
		if q := cpu(t, name); q.Cmp(resource.MustParse(limit)) > 0 {
			t.Fatalf("%s: CPU request %s, above the container's own %s", when, q.String(), limit)
		}
	}
	// stamped is what the webhook writes at admission for p.
	stamped := func(p *corev1.Pod) map[string]string {
		q := p.DeepCopy()
		stampCPURequests(q, q.Namespace, key)
		return q.Annotations
	}

	t.Run("a record the pod's author wrote is refused: full weight, never resized", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			annotations map[string]string
		}{
			{"forged-unsigned", map[string]string{wellknown.CPURequestsAnnotation: `{"app":"32"}`}},
			{"forged-bad-signature", map[string]string{wellknown.CPURequestsAnnotation: `{"app":"32"}`, wellknown.CPURequestsSignatureAnnotation: "bm90IGEgc2lnbmF0dXJl"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := create(t, pod(tc.name, "500m", tc.annotations))
				r, ev := newReconciler()
				if r.lowerCPU(ctx, log, p, "warming") {
					t.Error("lowerCPU reported the request lowered on a forged record")
				}
				if q := cpu(t, tc.name); q.Cmp(resource.MustParse("500m")) != 0 {
					t.Errorf("after lowerCPU: CPU request %s; want it untouched at 500m", q.String())
				}
				r.restoreCPU(ctx, log, p)
				notAbove(t, tc.name, "500m", "after restoreCPU")
				if q := cpu(t, tc.name); q.Cmp(resource.MustParse("500m")) != 0 {
					t.Errorf("after restoreCPU: CPU request %s; want 500m", q.String())
				}
				if !ev.has(ReasonRecordRefused) {
					t.Errorf("no %s Event; got %v", ReasonRecordRefused, ev.seen)
				}
			})
		}
	})

	t.Run("a signed record copied from a bigger pod of the namespace restores no more than the pod had", func(t *testing.T) {
		big := pod("big", "32", nil)
		copied := stamped(big) // as the webhook signed it for the 32-CPU pod
		p := create(t, pod("replayed", "500m", map[string]string{
			wellknown.CPURequestsAnnotation: copied[wellknown.CPURequestsAnnotation], wellknown.CPURequestsSignatureAnnotation: copied[wellknown.CPURequestsSignatureAnnotation]}))
		r, _ := newReconciler()
		if !r.lowerCPU(ctx, log, p, "warming") {
			t.Fatal("not lowered")
		}
		if q := cpu(t, "replayed"); q.String() != YieldCPURequest {
			t.Fatalf("lowered to %s; want %s", q.String(), YieldCPURequest)
		}
		r.restoreCPU(ctx, log, p)
		notAbove(t, "replayed", "500m", "after restoreCPU")
		if q := cpu(t, "replayed"); q.Cmp(resource.MustParse("500m")) != 0 {
			t.Fatalf("restored to %s; want 500m, what it was lowered from", q.String())
		}
	})

	t.Run("a gate restarted mid-warm-up puts back what the first one lowered it from", func(t *testing.T) {
		p := pod("restarted", "500m", nil)
		p.Annotations = stamped(p)
		create(t, p)
		first, _ := newReconciler()
		if !first.lowerCPU(ctx, log, p, "warming") {
			t.Fatal("not lowered")
		}
		var lowered corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &lowered); err != nil {
			t.Fatal(err)
		}
		if cond := podCondition(&lowered, wellknown.CPUYieldCondition); cond == nil || cond.Status != corev1.ConditionTrue || !strings.Contains(cond.Message, `"app":"500m"`) {
			t.Fatalf("no record of the lowered request on the pod: %+v", cond)
		}
		second, _ := newReconciler() // remembers nothing of the first
		second.restoreCPU(ctx, log, p)
		if q := cpu(t, "restarted"); q.Cmp(resource.MustParse("500m")) != 0 {
			t.Fatalf("restored to %s by a fresh gate; want 500m", q.String())
		}
		var restored corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &restored); err != nil {
			t.Fatal(err)
		}
		if cond := podCondition(&restored, wellknown.CPUYieldCondition); cond == nil || cond.Status != corev1.ConditionFalse {
			t.Fatalf("record not cleared after the restore: %+v", cond)
		}
	})

	t.Run("fromStart: the restore is bounded by the signed admission-time request", func(t *testing.T) {
		p := pod("from-start", "500m", map[string]string{wellknown.WarmUpAnnotation: `{"yieldCPU": "fromStart"}`})
		p.Annotations = stamped(p) // 500m at admission
		create(t, p)
		// Raised after admission by someone else's resize.
		r, _ := newReconciler()
		if err := r.resizeCPU(ctx, p, map[string]resource.Quantity{"app": resource.MustParse("4")}, ""); err != nil {
			t.Fatal(err)
		}
		if !r.lowerCPU(ctx, log, p, "starting") {
			t.Fatal("not lowered")
		}
		r.restoreCPU(ctx, log, p)
		if q := cpu(t, "from-start"); q.Cmp(resource.MustParse("500m")) != 0 {
			t.Fatalf("restored to %s; want the admission-time 500m", q.String())
		}
	})
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
