package gate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/policy"
)

func TestYieldPlan(t *testing.T) {
	pod := func(qos corev1.PodQOSClass, annotation string, policy corev1.ResourceResizeRestartPolicy) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}},
			Status: corev1.PodStatus{QOSClass: qos},
		}
		if annotation != "" {
			p.Annotations[AnnotationCPURequests] = annotation
		}
		if policy != "" {
			p.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: policy}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string // the plan's requests, or a part of why not
	}{
		{"burstable, recorded", pod(corev1.PodQOSBurstable, `{"app":"250m"}`, ""), "app=250m"},
		{"burstable, in-place resize policy", pod(corev1.PodQOSBurstable, `{"app":"250m"}`, corev1.NotRequired), "app=250m"},
		{"restarts on resize", pod(corev1.PodQOSBurstable, `{"app":"250m"}`, corev1.RestartContainer), "RestartContainer"},
		{"guaranteed", pod(corev1.PodQOSGuaranteed, `{"app":"250m"}`, ""), "QoS class Guaranteed"},
		{"gate by hand, no record", pod(corev1.PodQOSBurstable, "", ""), "no " + AnnotationCPURequests},
		{"bad record", pod(corev1.PodQOSBurstable, `{"app":"lots"}`, ""), "container app"},
	} {
		rec, why := yieldPlan(tc.pod)
		got := why
		if rec != nil {
			got = formatRequests(rec)
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWithRecordedRequests(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationCPURequests: `{"app":"500m"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(YieldCPURequest)}}}}},
	}
	got := withRecordedRequests(p)
	if q := got.Spec.Containers[0].Resources.Requests.Cpu().String(); q != "500m" {
		t.Fatalf("request %s; want the recorded 500m", q)
	}
	if q := p.Spec.Containers[0].Resources.Requests.Cpu().String(); q != YieldCPURequest {
		t.Fatalf("the pod itself changed to %s", q)
	}
}

func TestYieldModeParsing(t *testing.T) {
	for in, want := range map[string]YieldMode{
		`{}`:                        YieldWarmUp,
		`{"yieldCPU": true}`:        YieldWarmUp,
		`{"yieldCPU": false}`:       YieldOff,
		`{"yieldCPU": "fromStart"}`: YieldFromStart,
		`{"yieldCPU": "off"}`:       YieldOff,
		"yieldCPU: fromStart":       YieldFromStart,
	} {
		c, err := ParseConfig(in, policy.Local())
		if err != nil || c.YieldCPU != want {
			t.Errorf("%s: %q, %v; want %q", in, c.YieldCPU, err, want)
		}
	}
	for _, in := range []string{`{"yieldCPU": "always"}`, `{"yieldCPU": 3}`} {
		if _, err := ParseConfig(in, policy.Local()); err == nil || !strings.Contains(err.Error(), "yieldCPU") {
			t.Errorf("%s: %v; want an error naming yieldCPU", in, err)
		}
	}
}
