package podcpu

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// podAt is a pod whose container app reports CPU request cpu ("" for a
// kubelet that reports no resources), with a resize condition if given.
func podAt(cpu string, cond *corev1.PodCondition) *corev1.Pod {
	p := &corev1.Pod{}
	s := corev1.ContainerStatus{Name: "app"}
	if cpu != "" {
		s.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
	if cond != nil {
		p.Status.Conditions = []corev1.PodCondition{*cond}
	}
	return p
}

func TestAwaitActuated(t *testing.T) {
	want := map[string]resource.Quantity{"app": resource.MustParse("250m")}
	deferred := &corev1.PodCondition{Type: corev1.PodResizePending, Reason: "Deferred", Message: "node is full"}
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	for _, c := range []struct {
		name    string
		answers []func() (*corev1.Pod, error) // the last one repeats
		wantErr string                        // "" for none
	}{
		{name: "applied at once", answers: []func() (*corev1.Pod, error){func() (*corev1.Pod, error) { return podAt("250m", nil), nil }}},
		{name: "applied after two reads at 1m and a transient error", answers: []func() (*corev1.Pod, error){
			func() (*corev1.Pod, error) { return podAt("1m", nil), nil },
			func() (*corev1.Pod, error) { return nil, errors.New("connection refused") },
			func() (*corev1.Pod, error) { return podAt("250m", nil), nil }}},
		{name: "kubelet reports no resources", answers: []func() (*corev1.Pod, error){func() (*corev1.Pod, error) { return podAt("", nil), nil }}},
		{name: "pod gone", answers: []func() (*corev1.Pod, error){func() (*corev1.Pod, error) { return nil, gone }}},
		{name: "deferred", answers: []func() (*corev1.Pod, error){func() (*corev1.Pod, error) { return podAt("1m", deferred), nil }},
			wantErr: "not applied by the kubelet before the wait ended (PodResizePending: Deferred node is full): context deadline exceeded"},
		{name: "unreadable", answers: []func() (*corev1.Pod, error){func() (*corev1.Pod, error) { return nil, errors.New("connection refused") }},
			wantErr: "(read the pod: connection refused)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The wait is ActuateWait; a shorter context ends the waits
			// that are to fail.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			reads := 0
			err := AwaitActuated(ctx, func(context.Context) (*corev1.Pod, error) {
				a := c.answers[min(reads, len(c.answers)-1)]
				reads++
				return a()
			}, want)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v (after %d reads)", err, reads)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("want an error with %q, got %v", c.wantErr, err)
			case c.wantErr == "" && reads != len(c.answers):
				t.Errorf("read the pod %d times; want %d", reads, len(c.answers))
			}
		})
	}
}
