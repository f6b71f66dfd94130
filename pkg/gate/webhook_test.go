package gate

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/danki-dev/danki/pkg/wellknown"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestInjectorLabelsGatedPods: every pod the webhook leaves with the gate
// carries wellknown.GatedLabel (the cache holds only those), a pod that listed the
// gate itself too; other pods pass untouched.
func TestInjectorLabelsGatedPods(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	inj := NewInjector(admission.NewDecoder(scheme))
	handGated := []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		gates       []corev1.PodReadinessGate
		wantPatch   bool
	}{
		{"opted in", map[string]string{wellknown.WarmUpAnnotation: "true"}, nil, nil, true},
		{"gated by its template", nil, nil, handGated, true},
		{"gated and labelled already", nil, map[string]string{wellknown.GatedLabel: "true"}, handGated, false},
		{"not opted in", nil, nil, nil, false},
		{"opted out", map[string]string{wellknown.WarmUpAnnotation: "false"}, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := corev1.Pod{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: tc.annotations, Labels: tc.labels},
				Spec:       corev1.PodSpec{ReadinessGates: tc.gates, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			raw, err := json.Marshal(&pod)
			if err != nil {
				t.Fatal(err)
			}
			resp := inj.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}})
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if !tc.wantPatch {
				if len(resp.Patches) != 0 {
					t.Fatalf("pod changed: %+v", resp.Patches)
				}
				return
			}
			var labelled, gated bool
			for _, p := range resp.Patches {
				switch {
				case p.Path == "/metadata/labels" && p.Value.(map[string]any)[wellknown.GatedLabel] == "true",
					p.Path == "/metadata/labels/danki.dev~1gated" && p.Value == "true":
					labelled = true
				case p.Path == "/spec/readinessGates" || p.Path == "/spec/readinessGates/0":
					gated = true
				}
			}
			if !labelled {
				t.Fatalf("no %s label in %+v", wellknown.GatedLabel, resp.Patches)
			}
			if tc.gates == nil && !gated {
				t.Fatalf("no readiness gate in %+v", resp.Patches)
			}
		})
	}
}
