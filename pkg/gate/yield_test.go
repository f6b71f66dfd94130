package gate

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/podcpu"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

var testKey = RecordKey("0123456789abcdef0123456789abcdef")

func TestYieldPlan(t *testing.T) {
	pod := func(qos corev1.PodQOSClass, annotation string, policy corev1.ResourceResizeRestartPolicy) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Annotations: map[string]string{}, CreationTimestamp: metav1.Now()},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}},
			Status: corev1.PodStatus{QOSClass: qos},
		}
		if annotation != "" {
			p.Annotations[wellknown.CPURequestsAnnotation] = annotation
			p.Annotations[wellknown.CPURequestsSignatureAnnotation] = admissionSignature(testKey, "shop", annotation, time.Now())
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
		{"gate by hand, no record", pod(corev1.PodQOSBurstable, "", ""), "no " + wellknown.CPURequestsAnnotation},
		{"bad record", pod(corev1.PodQOSBurstable, `{"app":"lots"}`, ""), "container app"},
		{"record changed by hand", func() *corev1.Pod {
			p := pod(corev1.PodQOSBurstable, `{"app":"250m"}`, "")
			p.Annotations[wellknown.CPURequestsAnnotation] = `{"app":"32"}`
			return p
		}(), "not signed by this gate"},
		{"record signed for another namespace", func() *corev1.Pod {
			p := pod(corev1.PodQOSBurstable, `{"app":"250m"}`, "")
			p.Namespace = "other"
			return p
		}(), "not signed by this gate"},
	} {
		rec, why, refused := yieldPlan(tc.pod, testKey)
		if refused != strings.Contains(tc.want, "not signed") {
			t.Errorf("%s: refused %v", tc.name, refused)
		}
		got := why
		if rec != nil {
			got = podcpu.Format(rec)
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWithRecordedRequests(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app-1", UID: "uid-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(YieldCPURequest)}}}}},
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: wellknown.CPUYieldCondition, Status: corev1.ConditionTrue,
		Message: loweredRecord(p, testKey, map[string]resource.Quantity{"app": resource.MustParse("500m")})}}
	got := withRecordedRequests(p, testKey)
	if q := got.Spec.Containers[0].Resources.Requests.Cpu().String(); q != "500m" {
		t.Fatalf("request %s; want the recorded 500m", q)
	}
	if q := p.Spec.Containers[0].Resources.Requests.Cpu().String(); q != YieldCPURequest {
		t.Fatalf("the pod itself changed to %s", q)
	}
	// The same record on another pod (another UID) is not the gate's.
	other := p.DeepCopy()
	other.UID = "uid-2"
	if q := withRecordedRequests(other, testKey).Spec.Containers[0].Resources.Requests.Cpu().String(); q != YieldCPURequest {
		t.Fatalf("a record copied to another pod counted: %s", q)
	}
}

func TestStampCPURequests(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Now(), Annotations: map[string]string{
			wellknown.CPURequestsAnnotation: `{"app":"32"}`, wellknown.CPURequestsSignatureAnnotation: "forged"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}},
	}
	stampCPURequests(p, "shop", testKey)
	if got := p.Annotations[wellknown.CPURequestsAnnotation]; got != `{"app":"500m"}` {
		t.Fatalf("record %s; want the pod's own {\"app\":\"500m\"}", got)
	}
	p.Namespace = "shop"
	if rec, err := verifiedCPURequests(p, testKey); err != nil || podcpu.Format(rec) != "app=500m" {
		t.Fatalf("verified record %v, %v", rec, err)
	}
	if _, err := verifiedCPURequests(p, RecordKey("another key of at least 32 bytes...")); err == nil {
		t.Fatal("verified with another key")
	}
	if _, err := verifiedCPURequests(p, nil); err == nil {
		t.Fatal("verified with no key")
	}
	// No CPU request: no record at all, the pod's own removed.
	p.Spec.Containers[0].Resources.Requests = nil
	p.Annotations[wellknown.CPURequestsAnnotation] = `{"app":"32"}`
	stampCPURequests(p, "shop", testKey)
	if _, ok := p.Annotations[wellknown.CPURequestsAnnotation]; ok {
		t.Fatalf("record left: %v", p.Annotations)
	}
}

// TestAdmissionRecordBoundToItsAdmission: the webhook's signed record
// verifies on a pod created right after it signed, not on one created a
// while later (an answer the webhook gave another caller, replayed), nor
// with its time changed.
func TestAdmissionRecordBoundToItsAdmission(t *testing.T) {
	signed := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	pod := func(created time.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")}}}}},
		}
	}
	oracle := pod(time.Time{})
	stampCPURequestsAt(oracle, "shop", testKey, signed)
	for _, tc := range []struct {
		name    string
		created time.Time
		sig     func(string) string
		ok      bool
	}{
		{"created as admitted", signed.Add(2 * time.Second), nil, true},
		{"created a little before (clocks)", signed.Add(-20 * time.Second), nil, true},
		{"created two minutes later: a replayed answer", signed.Add(2 * time.Minute), nil, false},
		{"created an hour before", signed.Add(-time.Hour), nil, false},
		{"its time moved to the pod's creation", signed.Add(2 * time.Minute), func(sig string) string {
			_, mac, _ := strings.Cut(sig, ".")
			return strconv.FormatInt(signed.Add(2*time.Minute).Unix(), 10) + "." + mac
		}, false},
		{"no time", signed, func(sig string) string { _, mac, _ := strings.Cut(sig, "."); return mac }, false},
	} {
		p := pod(tc.created)
		p.Annotations = maps.Clone(oracle.Annotations)
		if tc.sig != nil {
			p.Annotations[wellknown.CPURequestsSignatureAnnotation] = tc.sig(p.Annotations[wellknown.CPURequestsSignatureAnnotation])
		}
		rec, err := verifiedCPURequests(p, testKey)
		if tc.ok && (err != nil || podcpu.Format(rec) != "app=32") {
			t.Errorf("%s: %v, %v; want the record", tc.name, rec, err)
		}
		if !tc.ok && !errors.Is(err, errNotSigned) {
			t.Errorf("%s: %v, %v; want refused as not signed", tc.name, rec, err)
		}
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
