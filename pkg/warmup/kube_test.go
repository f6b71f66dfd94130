package warmup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/test/testenv"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// TestKubeTargetsAgainstAPIServer resolves targets from real Pods and
// EndpointSlices stored in a real kube-apiserver (envtest). No traffic goes
// to the pod IPs: only resolution is tested here.
func TestKubeTargetsAgainstAPIServer(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	ns := "warmup-resolve"
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// canary-a/b run the new hash, b is not Ready yet; stable-a runs the
	// old hash; canary-gone is being deleted (has a finalizer).
	mkPod(t, e.Kube, ns, "canary-a", "new", "10.1.0.5", true, nil)
	mkPod(t, e.Kube, ns, "canary-b", "new", "10.1.0.6", false, nil)
	mkPod(t, e.Kube, ns, "stable-a", "old", "10.1.0.7", true, nil)
	mkPod(t, e.Kube, ns, "canary-gone", "new", "10.1.0.8", true, []string{"danki.dev/test"})
	if err := e.Kube.CoreV1().Pods(ns).Delete(ctx, "canary-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // let the namespace go
		p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, "canary-gone", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = e.Kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		}
	})

	t.Run("selector and hash over pods", func(t *testing.T) {
		k := KubeTargets{Namespace: ns, Selector: "app=shop", PodTemplateHash: "new", Port: intstr.FromString("http")}
		got := resolveNames(t, k, e.Kube)
		if got != "canary-a=http://10.1.0.5:8080" {
			t.Errorf("targets %s, want only the running, ready, not deleting canary-a", got)
		}
		k.Port = intstr.FromInt32(9999)
		if got := resolveNames(t, k, e.Kube); got != "canary-a=http://10.1.0.5:9999" {
			t.Errorf("port by number: %s", got)
		}
		k.Port = intstr.FromString("grpc")
		if _, err := k.Resolve(ctx, e.Kube); err == nil || !strings.Contains(err.Error(), `no container port named "grpc"`) || !strings.Contains(err.Error(), "http=8080") {
			t.Errorf("unknown port name: err = %v", err)
		}
		k = KubeTargets{Namespace: ns, Selector: "app=shop", PodTemplateHash: "old"}
		if got := resolveNames(t, k, e.Kube); got != "stable-a=http://10.1.0.7:8080" {
			t.Errorf("stable hash, only port: %s", got)
		}
	})

	t.Run("service endpoint slices", func(t *testing.T) {
		mkSlice(t, e.Kube, ns, "shop-canary-1", "shop-canary", []endpoint{
			{ip: "10.1.0.5", pod: "canary-a", ready: ptr(true)},
			{ip: "10.1.0.6", pod: "canary-b", ready: ptr(false)},
			{ip: "10.1.0.9", pod: "canary-c"}, // ready unset: counts as ready
		})
		mkSlice(t, e.Kube, ns, "shop-canary-2", "shop-canary", []endpoint{
			{ip: "10.1.0.5", pod: "canary-a", ready: ptr(true)}, // duplicate across slices
			{ip: "10.1.0.7", pod: "stable-a", ready: ptr(true)}, // Service not yet re-pointed
		})
		k := KubeTargets{Namespace: ns, Service: "shop-canary", Port: intstr.FromString("http")}
		if got := resolveNames(t, k, e.Kube); got != "canary-a=http://10.1.0.5:8080,canary-c=http://10.1.0.9:8080,stable-a=http://10.1.0.7:8080" {
			t.Errorf("service targets: %s", got)
		}
		k.PodTemplateHash = "old"
		if got := resolveNames(t, k, e.Kube); got != "stable-a=http://10.1.0.7:8080" {
			t.Errorf("service + hash filter: %s", got)
		}
		k.Port = intstr.FromString("admin")
		if _, err := k.Resolve(ctx, e.Kube); err == nil || !strings.Contains(err.Error(), `no port named "admin"`) {
			t.Errorf("unknown slice port: err = %v", err)
		}
	})

	t.Run("wait for pods to appear", func(t *testing.T) {
		k := KubeTargets{Namespace: ns, Selector: "app=late"}
		go func() {
			time.Sleep(300 * time.Millisecond)
			p := podSpec(ns, "late-a", "x", map[string]string{"app": "late"}, nil)
			created, err := e.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err == nil {
				setReady(ctx, e.Kube, created, "10.1.0.20", true)
			}
		}()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ts, err := k.Wait(wctx, e.Kube, 1, 100*time.Millisecond)
		if err != nil || len(ts) != 1 || ts[0].Name != "late-a" {
			t.Errorf("Wait = %v, %v", ts, err)
		}
		wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := (KubeTargets{Namespace: ns, Selector: "app=never"}).Wait(wctx, e.Kube, 1, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "found 0 of at least 1") {
			t.Errorf("Wait for nothing: err = %v", err)
		}
	})
}

func resolveNames(t *testing.T, k KubeTargets, kube kubernetes.Interface) string {
	t.Helper()
	ts, err := k.Resolve(context.Background(), kube)
	if err != nil {
		t.Fatalf("resolve %s: %v", k, err)
	}
	var parts []string
	for _, x := range ts {
		parts = append(parts, x.Name+"="+x.URL)
	}
	return strings.Join(parts, ",")
}

func ptr[T any](v T) *T { return &v }

func podSpec(ns, name, hash string, labels map[string]string, finalizers []string) *corev1.Pod {
	if labels == nil {
		labels = map[string]string{"app": "shop", PodTemplateHashLabel: hash}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: finalizers},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "shop:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func mkPod(t *testing.T, kube kubernetes.Interface, ns, name, hash, ip string, ready bool, finalizers []string) {
	t.Helper()
	ctx := context.Background()
	p, err := kube.CoreV1().Pods(ns).Create(ctx, podSpec(ns, name, hash, nil, finalizers), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := setReady(ctx, kube, p, ip, ready); err != nil {
		t.Fatal(err)
	}
}

// setReady sets the pod's status through the status subresource, as the
// kubelet would.
func setReady(ctx context.Context, kube kubernetes.Interface, p *corev1.Pod, ip string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
	}
	_, err := kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

type endpoint struct {
	ip, pod string
	ready   *bool
}

func mkSlice(t *testing.T, kube kubernetes.Interface, ns, name, service string, eps []endpoint) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ep.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ep.ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: ep.pod},
		})
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
