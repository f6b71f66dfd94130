package rollouts

import (
	"context"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/test/testenv"
)

// TestRolloutStateCarriesTemplateCPU: the step's yieldCPU puts back the
// Rollout's pod template's CPU requests, read from the API server — the
// Rollout the controller hands over the plugin RPC (gob) has lost every
// resource.Quantity's value (gob sees none of its fields exported but
// Format).
func TestRolloutStateCarriesTemplateCPU(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	ns := "yield"
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "app"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "app", Image: "app:v2", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}},
					{Name: "log", Image: "log:v1"},
				}},
			},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
	}
	if _, err := e.Argo.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := argoRollouts{e.Argo}.Get(ctx, ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := st.TemplateCPURequests["app"]; !ok || q.String() != "250m" || len(st.TemplateCPURequests) != 1 {
		t.Errorf("template CPU requests %v; want app=250m only", st.TemplateCPURequests)
	}

}
