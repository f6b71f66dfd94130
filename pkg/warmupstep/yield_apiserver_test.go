package warmupstep

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/test/testenv"
)

// TestCPUYieldOnAPIServer lowers and restores canary pods' CPU requests
// through a real kube-apiserver's pods/resize: only the canary revision's
// Burstable pods whose request is their template's are lowered; what comes
// back is the template's request, whatever the pod carries; a pod found
// lowered (a plugin restart) is budgeted and restored by its template.
func TestCPUYieldOnAPIServer(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	ns := "yield"
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, hash, request, limit string) {
		t.Helper()
		mem := resource.MustParse("256Mi")
		res := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(request), corev1.ResourceMemory: mem},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit), corev1.ResourceMemory: mem}}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{warmup.PodTemplateHashLabel: hash},
				// A tenant's own record of a bigger request is not what
				// comes back.
				Annotations: map[string]string{"danki.dev/cpu-requests": `{"app":"32"}`}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v2", Resources: res,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
		}
		if _, err := e.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("canary-a", "new", "250m", "1")       // Burstable, as its template
	pod("canary-restarted", "new", "1m", "1") // lowered before the plugin restarted
	pod("canary-limitrange", "new", "100m", "1")
	pod("canary-guaranteed", "new", "250m", "250m") // requests = limits
	pod("stable-a", "old", "250m", "1")
	cpu := func(name string) string {
		t.Helper()
		p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Spec.Containers[0].Resources.Requests.Cpu().String()
	}

	rollouts := &templateRollouts{state: RolloutState{CanaryHash: "new", TemplateCPURequests: map[string]resource.Quantity{"app": resource.MustParse("250m")}}}
	s := &Step{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clients: func() Clients { return Clients{Kube: e.Kube, Rollouts: rollouts} }}
	ro := Rollout{Rollout: warmup.Rollout{Namespace: ns, Name: "app", CanaryHash: "new", StableHash: "old"}}
	on := true
	y := s.CPUYield(ro, StepConfig{YieldCPU: &on})
	target := func(name string) warmup.Target {
		return warmup.Target{Name: name, URL: "http://10.1.0.5:8080", CPURequest: 0.001}
	}
	targets, note, lowered := y.Lower(ctx, []warmup.Target{target("canary-a"), target("canary-restarted"),
		target("canary-limitrange"), target("canary-guaranteed"), target("stable-a")})
	t.Log(note)
	if !lowered {
		t.Fatal("nothing lowered")
	}
	for name, want := range map[string]string{"canary-a": "1m", "canary-restarted": "1m", "canary-limitrange": "100m", "canary-guaranteed": "250m", "stable-a": "250m"} {
		if got := cpu(name); got != want {
			t.Errorf("%s: CPU request %s after Lower; want %s", name, got, want)
		}
	}
	for _, want := range []string{"3 of 5 pod(s)", "canary-limitrange: no container requests its template's CPU",
		"canary-guaranteed: QoS class Guaranteed", "stable-a: not a running pod of canary revision new"} {
		if !strings.Contains(note, want) {
			t.Errorf("note does not say %q: %s", want, note)
		}
	}
	// The yielded pods' warm-ups are budgeted by their template's request.
	for i, want := range []float64{0.25, 0.25, 0.001} {
		if targets[i].CPURequest != want {
			t.Errorf("%s: CPU budget %v; want %v", targets[i].Name, targets[i].CPURequest, want)
		}
	}

	back := y.Restore(ctx)
	t.Log(back)
	if back != "CPU request 1m while warming, restored on 2 pod(s)" {
		t.Errorf("restore note %q", back)
	}
	for name, want := range map[string]string{"canary-a": "250m", "canary-restarted": "250m", "canary-limitrange": "100m", "canary-guaranteed": "250m", "stable-a": "250m"} {
		if got := cpu(name); got != want {
			t.Errorf("%s: CPU request %s after Restore; want %s", name, got, want)
		}
	}
	if again := y.Restore(ctx); again != "" {
		t.Errorf("a second restore did something: %q", again)
	}
	if off := false; s.CPUYield(ro, StepConfig{YieldCPU: &off}) != nil {
		t.Error("yieldCPU false still yields")
	}
	if s.CPUYield(ro, StepConfig{}) == nil {
		t.Error("yieldCPU unset does not yield; the default is true")
	}
	// Mirrored traffic alone has no judgement at full weight: it yields
	// only when asked.
	only := &mirror.Config{Mode: mirror.ModeOnly}
	if s.CPUYield(ro, StepConfig{Mirror: only}) != nil || s.CPUYield(ro, StepConfig{Mirror: only, YieldCPU: &on}) == nil {
		t.Error("mirror mode only: want no yield by default, a yield when yieldCPU is true")
	}
	// A Rollout whose canary moved on (its template changed) resizes
	// nothing: what it would put back is not this revision's.
	rollouts.state.CanaryHash = "newer"
	if _, note, lowered := s.CPUYield(ro, StepConfig{YieldCPU: &on}).Lower(ctx, []warmup.Target{target("canary-a")}); lowered || cpu("canary-a") != "250m" ||
		note != "CPU not yielded: the Rollout's canary is now revision newer, not new" {
		t.Errorf("a moved-on canary: lowered %v (%s), note %q", lowered, cpu("canary-a"), note)
	}
}

// templateRollouts is Rollouts with a fixed state.
type templateRollouts struct{ state RolloutState }

func (r *templateRollouts) Get(context.Context, string, string) (RolloutState, error) {
	return r.state, nil
}
func (r *templateRollouts) MergePatch(context.Context, string, string, []byte) error { return nil }
