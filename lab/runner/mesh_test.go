package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

func appPod(image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: "default", UID: "u1", Labels: map[string]string{"app": "sample-app"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString("http")}}}}}},
	}
}

func TestInjectPatch(t *testing.T) {
	r, err := New(Config{Client: fake.NewClientset(), Node: "n", Network: Loopback{}, LogDir: t.TempDir(),
		Images: ImageCommands{"danki.dev/sample-app": {"java"}}, Mesh: &Mesh{}})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := r.injectPatch(appPod("danki.dev/sample-app:v1"))
	if err != nil || patch == nil {
		t.Fatalf("a pod the runner runs gets a sidecar: patch %s, err %v", patch, err)
	}
	var ops []struct {
		Op, Path string
		Value    json.RawMessage
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range ops {
		got[o.Path] = string(o.Value)
	}
	for path, want := range map[string]string{
		"/metadata/labels":      `"security.istio.io/tlsMode":"istio"`,
		"/metadata/annotations": `sidecar.istio.io/status`,
		"/spec/containers/-":    `"name":"istio-proxy"`,
	} {
		if !strings.Contains(got[path], want) {
			t.Errorf("patch %s = %s, want it to contain %s", path, got[path], want)
		}
	}
	if !strings.Contains(got["/metadata/labels"], `"app":"sample-app"`) {
		t.Errorf("the pod's own labels are kept: %s", got["/metadata/labels"])
	}

	for name, pod := range map[string]*corev1.Pod{
		"unmapped image": appPod("nginx:1"),
		"opted out": func() *corev1.Pod {
			p := appPod("danki.dev/sample-app:v1")
			p.Annotations = map[string]string{"sidecar.istio.io/inject": "false"}
			return p
		}(),
		"injected already": func() *corev1.Pod {
			p := appPod("danki.dev/sample-app:v1")
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ProxyContainer, Image: ProxyImage})
			return p
		}(),
	} {
		if patch, err := r.injectPatch(pod); err != nil || patch != nil {
			t.Errorf("%s: want no injection, got %s, %v", name, patch, err)
		}
	}
}

func TestProxyPortsDistinctPerPod(t *testing.T) {
	seen := map[int]string{}
	for i := 3; i < 255; i++ {
		ip := netip.AddrFrom4([4]byte{10, 244, 0, byte(i)})
		p, err := proxyPortsFor(ip)
		if err != nil {
			t.Fatal(err)
		}
		for _, port := range []int{p.Admin, p.AgentStatus, p.EnvoyStatus, p.EnvoyProm} {
			if other, dup := seen[port]; dup {
				t.Fatalf("port %d of %s also used by %s", port, ip, other)
			}
			if port >= 32768 {
				t.Fatalf("port %d is in the kernel's ephemeral range", port)
			}
			seen[port] = ip.String()
		}
	}
}

func TestMeshedProbeAndEnvMoveTheAppPort(t *testing.T) {
	pod := appPod("danki.dev/sample-app:v1")
	ip := netip.MustParseAddr("10.244.0.7")
	url, err := probeURL(pod.Spec.Containers[0], ip, 10000)
	if err != nil || url != "http://10.244.0.7:18080/healthz" {
		t.Errorf("meshed probe URL = %q, %v; want the app's moved port 18080", url, err)
	}
	if url, _ := probeURL(pod.Spec.Containers[0], ip, 0); url != "http://10.244.0.7:8080/healthz" {
		t.Errorf("plain probe URL = %q", url)
	}
	if got := sidecarProbeURL(ip); got != "http://10.244.0.7:22007/healthz/ready" {
		t.Errorf("sidecar readiness = %q", got)
	}
	r, err := New(Config{Client: fake.NewClientset(), Node: "n", Network: Loopback{}, LogDir: t.TempDir(), Mesh: &Mesh{}})
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(r.env(pod, &containerState{spec: pod.Spec.Containers[0]}, &podState{ip: ip, meshed: true}), "\n")
	if !strings.Contains(env, "\nPORT=18080") {
		t.Errorf("meshed app env has no PORT=18080:\n%s", env)
	}
}

func TestPrepareSidecar(t *testing.T) {
	pod := appPod("danki.dev/sample-app:v1")
	pod.Spec.ServiceAccountName = "default"
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-root-cert", Namespace: "default"},
		Data: map[string]string{"root-cert.pem": "ROOT"}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	tmpl := filepath.Join(t.TempDir(), "envoy_bootstrap.json")
	if err := os.WriteFile(tmpl, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(root, sa)
	// The fake clientset does not implement TokenRequest.
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "istio-ca" || tr.Spec.BoundObjectRef == nil || tr.Spec.BoundObjectRef.Name != "app-1" {
			return true, nil, fmt.Errorf("want a token for audience istio-ca bound to pod app-1, got %+v", tr.Spec)
		}
		tr.Status.Token = "TOKEN"
		return true, tr, nil
	})
	r, err := New(Config{Client: client, Node: "n", Network: Loopback{}, LogDir: t.TempDir(),
		Mesh: &Mesh{PilotAgent: "pilot-agent", Envoy: "/x/envoy", BootstrapTemplate: tmpl, Dir: t.TempDir(), Discovery: "10.244.0.1:15012"}})
	if err != nil {
		t.Fatal(err)
	}
	dir, env, err := r.prepareSidecar(context.Background(), pod, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"var/lib/istio/envoy/envoy_bootstrap_tmpl.json", "var/run/secrets/istio/root-cert.pem",
		"var/run/secrets/tokens/istio-token", "etc/istio/pod/labels", "proxy.env"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("agent dir: %v", err)
		}
	}
	if tok, _ := os.ReadFile(filepath.Join(dir, "var/run/secrets/tokens/istio-token")); string(tok) != "TOKEN" {
		t.Errorf("token file = %q", tok)
	}
	labels, _ := os.ReadFile(filepath.Join(dir, "etc/istio/pod/labels"))
	if string(labels) != "app=\"sample-app\"\n" {
		t.Errorf("labels file = %q", labels)
	}
	all := strings.Join(env, "\n")
	for _, want := range []string{"INSTANCE_IP=10.244.0.9", "ISTIO_META_INTERCEPTION_MODE=NONE", "CA_ADDR=10.244.0.1:15012",
		`"binaryPath":"/x/envoy"`, `"proxyAdminPort":20009`, "ENVOY_STATUS_PORT=22009", "SERVICE_ACCOUNT=default"} {
		if !strings.Contains(all, want) {
			t.Errorf("agent env lacks %s:\n%s", want, all)
		}
	}
	// No root certificate yet (istiod not up): an error that says so.
	r.cfg.Client = fake.NewClientset(sa)
	if _, _, err := r.prepareSidecar(context.Background(), pod, netip.MustParseAddr("10.244.0.9")); err == nil ||
		!strings.Contains(err.Error(), "istio-ca-root-cert") {
		t.Errorf("without the root cert: err = %v", err)
	}
}

func TestServeInjectAnswersAnAdmissionReview(t *testing.T) {
	r, err := New(Config{Client: fake.NewClientset(), Node: "n", Network: Loopback{}, LogDir: t.TempDir(),
		Images: ImageCommands{"danki.dev/sample-app": {"java"}}, Mesh: &Mesh{}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(appPod("danki.dev/sample-app:v2"))
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "req-1", Namespace: "default", Object: runtime.RawExtension{Raw: raw}},
	})
	rec := httptest.NewRecorder()
	r.serveInject(rec, httptest.NewRequest("POST", "/inject", bytes.NewReader(review)))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("response %d %s: %v", rec.Code, rec.Body, err)
	}
	if out.Response.UID != "req-1" || !out.Response.Allowed || out.Response.PatchType == nil ||
		!strings.Contains(string(out.Response.Patch), ProxyContainer) || out.APIVersion != "admission.k8s.io/v1" {
		t.Errorf("response = %+v, patch %s", out.Response, out.Response.Patch)
	}
}
