package warmup

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// Pods the warm gate has warmed (wellknown.WarmCondition True) are not warmed twice:
// the step says so and sends them nothing; the others are warmed as usual.
func TestRunSkipsPodsTheGateWarmed(t *testing.T) {
	warm := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	cold := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	cfg := Config{QPS: 500, HealthPath: "/healthz"}
	warm.HealthPath, cold.HealthPath = "/healthz", "/healthz"

	res, err := Run(context.Background(), cfg, []Target{{Name: "a", URL: warm.URL, Warmed: true}}, Options{})
	if err != nil || !res.Converged || warm.All() != 0 || !strings.Contains(res.Summary(), "already warmed by the danki warm gate") {
		t.Fatalf("all warmed: %v, %s; %d requests sent; want converged, nothing sent, saying why", err, res.Summary(), warm.All())
	}
	res, err = Run(context.Background(), cfg, []Target{{Name: "a", URL: warm.URL, Warmed: true}, {Name: "b", URL: cold.URL}}, Options{})
	defaults := cfg.WithDefaults()
	if err != nil || warm.All() != 0 || cold.Load() < defaults.MinStop() || !strings.Contains(res.Reason, "1 pod more already warmed") {
		t.Fatalf("mixed: %v, %q; warmed pod got %d, cold %d requests; want only the cold one loaded", err, res.Reason, warm.All(), cold.Load())
	}
}

func TestPodTargetSeesTheGateCondition(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.7"}}
	tg, err := PodTarget(pod, intstr.IntOrString{})
	if err != nil || tg.URL != "http://10.0.0.7:8080" || tg.Warmed {
		t.Fatalf("%+v, %v", tg, err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: wellknown.WarmCondition, Status: corev1.ConditionTrue}}
	if tg, _ = PodTarget(pod, intstr.IntOrString{}); !tg.Warmed {
		t.Fatal("condition True: want Warmed")
	}
}
