package analysis

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

// source: load against a pod behind a STRICT sidecar: the warm-up and the
// measured load both reach it over Istio mTLS as danki.
func TestLoadSourceOverMTLS(t *testing.T) {
	m := testutil.NewMesh(t)
	app := m.StrictPod(testutil.MeshSPIFFEID("shop", "cart"), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	_, portText, _ := net.SplitHostPort(app.Addr)
	port, _ := strconv.Atoi(portText)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: "shop", UID: "uid-1",
			Labels: map[string]string{"app": "app", mtls.TLSModeLabel: mtls.TLSModeIstio}},
		Spec: corev1.PodSpec{ServiceAccountName: "cart", Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	kube := kubefake.NewClientset(pod)
	pol := policy.Local()
	pol.Mesh = mtls.NewMesh(mtls.MeshConfig{CAAddress: m.CAAddress, RootFile: m.RootFile(), Namespace: "danki-system", ServiceAccount: "danki", Client: m.Client})
	t.Cleanup(pol.Mesh.Close)

	cfg, err := ParseConfig([]byte(`{"source": "load", "load": {"selector": "app=app", "namespace": "shop", "port": "http",
		"count": 200, "qps": 200, "connections": 2, "mtls": "auto"}, "slo": {"maxErrorRate": 0}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(cfg, WithLogger(quietLoadLog), WithPolicy(pol),
		WithKube(func() (kubernetes.Interface, error) { return kube, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := a.Analyze(ctx, time.Time{})
	if v.Phase != Pass {
		t.Fatalf("verdict %s: %s", v.Phase, v.Summary)
	}
	if callers, dankiID := app.Callers(), testutil.MeshSPIFFEID("danki-system", "danki"); len(callers) != 1 || callers[dankiID] < 200 {
		t.Errorf("the pod saw callers %v; want the warm-up and all 200 measured requests from %s", callers, dankiID)
	}
	t.Logf("%s", v.Summary)
}
