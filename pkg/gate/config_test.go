package gate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("true", policy.Local())
	if err != nil || c.OnFailure != StayUnready || c.Retries != DefaultRetries || c.QPS == 0 {
		t.Fatalf(`"true": %+v, %v; want the defaults (fail closed, 3 attempts)`, c, err)
	}
	c, err = ParseConfig("qps: 50\nonFailure: becomeReady\nretries: 1\nport: http\n", policy.Local())
	if err != nil || c.QPS != 50 || c.OnFailure != BecomeReady || c.Retries != 1 || c.Port.StrVal != "http" {
		t.Fatalf("YAML config: %+v, %v", c, err)
	}
	for cfg, want := range map[string]string{
		`{"qsp": 5}`:                "qsp: unknown field",
		`{"onFailure": "maybe"}`:    "onFailure: \"maybe\" is not a policy",
		`{"retries": -1}`:           "retries: must be at least 1",
		`{"compareToStable": true}`: "compareToStable: the gate warms one pod on its own",
		`{"requests": [{"method": "POST", "path": "/x"}]}`: "requests[0].method",
		`{"cpuBudget": "-250m"}`:                           "cpuBudget: must not be negative",
		`{"cpuBudget": "lots"}`:                            `cpuBudget: want cores or a share of the CPU request, got "lots"`,
		`{"cpuBudget": "-50%"}`:                            "cpuBudget: must not be negative",
		`{"mtls": "strict"}`:                               `mtls: want auto, istio or off, got "strict"`,
	} {
		if _, err := ParseConfig(cfg, policy.Local()); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), wellknown.WarmUpAnnotation) {
			t.Errorf("%s: %v; want an error naming the annotation and %q", cfg, err, want)
		}
	}
	if c, err = ParseConfig("cpuBudget: 250m", policy.Local()); err != nil || c.CPUBudget == nil || c.CPUBudget.Of(1) != 0.25 {
		t.Errorf("cpuBudget 250m: %v, %v", c.CPUBudget, err)
	}
	if c, err = ParseConfig("cpuBudget: 50%", policy.Local()); err != nil || c.CPUBudget == nil || c.CPUBudget.Of(0.25) != 0.125 {
		t.Errorf("cpuBudget 50%%: %v, %v; want half the request", c.CPUBudget, err)
	}
	// The gate's default budget is the pod's CPU request (the warm-up's
	// own is none); 0 lifts it.
	for annotation, want := range map[string]float64{"true": 0.25, "qps: 20": 0.25, "cpuBudget: 0": 0} {
		if c, err = ParseConfig(annotation, policy.Local()); err != nil || c.CPUBudget == nil || c.CPUBudget.Of(0.25) != want {
			t.Errorf("%s: cpuBudget %v, %v; want %g cores of a 250m request", annotation, c.CPUBudget, err, want)
		}
	}
	if c, err = ParseConfig("mtls: istio", policy.Local()); err != nil || c.MTLS != mtls.Istio {
		t.Errorf("mtls istio: %q, %v", c.MTLS, err)
	}
	if !OptedIn(map[string]string{wellknown.WarmUpAnnotation: "true"}) || OptedIn(map[string]string{wellknown.WarmUpAnnotation: "false"}) || OptedIn(nil) {
		t.Error("OptedIn: true opts in, false and no annotation do not")
	}
}

func TestInjectorPatchesOnlyOptedInPods(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	inj := NewInjector(admission.NewDecoder(scheme))
	review := func(pod *corev1.Pod) admission.Response {
		raw, _ := json.Marshal(pod)
		return inj.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		}})
	}
	pod := func(ann map[string]string, gates ...corev1.PodReadinessGate) *corev1.Pod {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}, Spec: corev1.PodSpec{ReadinessGates: gates}}
	}
	r := review(pod(map[string]string{wellknown.WarmUpAnnotation: "true"}, corev1.PodReadinessGate{ConditionType: "other"}))
	paths := map[string]bool{}
	for _, p := range r.Patches {
		paths[p.Path] = true
	}
	if !r.Allowed || len(r.Patches) != 2 || !paths["/spec/readinessGates/1"] || !paths["/metadata/labels"] {
		t.Fatalf("opted-in pod: allowed %v, patches %+v; want the gate added after the existing one, and the label %s", r.Allowed, r.Patches, wellknown.GatedLabel)
	}
	for name, p := range map[string]*corev1.Pod{
		"no annotation": pod(nil),
		"opted out":     pod(map[string]string{wellknown.WarmUpAnnotation: "false"}),
	} {
		if r := review(p); !r.Allowed || len(r.Patches) != 0 {
			t.Errorf("%s: allowed %v, patches %+v; want allowed unchanged", name, r.Allowed, r.Patches)
		}
	}
}

func TestRetriesCapped(t *testing.T) {
	if _, err := ParseConfig("retries: 11", policy.Policy{}); err == nil || !strings.Contains(err.Error(), "retries: 11 is above the operator's cap of 10; lower it (the operator sets the cap with --max-retries") {
		t.Errorf("retries 11: %v", err)
	}
	low := policy.Policy{Limits: policy.Limits{Retries: 2}}
	if c, err := ParseConfig("true", low); err != nil || c.Retries != 2 {
		t.Errorf("default retries under a cap of 2: %d, %v", c.Retries, err)
	}
	if _, err := ParseConfig("qps: 600", policy.Policy{}); err == nil || !strings.Contains(err.Error(), "qps: 600 is above the operator's cap") {
		t.Errorf("qps 600: %v", err)
	}
	if _, err := ParseConfig(`{"grpcDescriptorSet": "/etc/passwd", "requests": [{"grpc": {"method": "a.B/C"}}]}`, policy.Policy{}); err == nil || !strings.Contains(err.Error(), "names a file") {
		t.Errorf("a pod's descriptor set: %v", err)
	}
}
