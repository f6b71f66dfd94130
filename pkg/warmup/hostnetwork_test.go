package warmup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

// hostNetworkPod is a Running, Ready pod of the new hash whose IP is its
// node's (spec.hostNetwork).
func hostNetworkPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-hostnet", Labels: map[string]string{"app": "shop", PodTemplateHashLabel: "new"}},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9", HostIP: "10.0.0.9",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// wantHostNetworkRefused checks err is the pod's HostNetworkError, naming
// the pod and why.
func wantHostNetworkRefused(t *testing.T, err error) {
	t.Helper()
	var hn *HostNetworkError
	if !errors.As(err, &hn) || hn.Name != "cart-hostnet" ||
		!strings.Contains(err.Error(), "shop/cart-hostnet") || !strings.Contains(err.Error(), "spec.hostNetwork") || !strings.Contains(err.Error(), "node") {
		t.Fatalf("got %v; want the host-network pod refused by name, saying the load would reach its node", err)
	}
}

func TestHostNetworkPodsAreNoTargets(t *testing.T) {
	ctx := context.Background()
	t.Run("PodTarget", func(t *testing.T) {
		_, err := PodTarget(hostNetworkPod(), intstr.FromString("http"))
		wantHostNetworkRefused(t, err)
		p := hostNetworkPod()
		p.Spec.HostNetwork = false
		if tg, err := PodTarget(p, intstr.FromString("http")); err != nil || tg.URL != "http://10.0.0.9:8080" {
			t.Errorf("the same pod on the pod network: %+v, %v; want a target", tg, err)
		}
	})
	t.Run("by selector", func(t *testing.T) {
		kube := fake.NewClientset(hostNetworkPod())
		_, err := KubeTargets{Namespace: "shop", Selector: "app=shop", PodTemplateHash: "new", Port: intstr.FromString("http")}.Resolve(ctx, kube)
		wantHostNetworkRefused(t, err)
	})
	t.Run("behind a Service", func(t *testing.T) {
		port, name, ready := int32(8080), "http", true
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: "cart-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "cart-hostnet"}}},
		}
		kube := fake.NewClientset(hostNetworkPod(), slice)
		k := KubeTargets{Namespace: "shop", Service: "cart", PodTemplateHash: "new"}
		_, err := k.Resolve(ctx, kube)
		wantHostNetworkRefused(t, err)
		// Wait gives up at once: polling would not change the answer.
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = k.Wait(wctx, kube, 1, 50*time.Millisecond)
		wantHostNetworkRefused(t, err)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("Wait took %s: it polled on a refusal no wait changes", took)
		}
	})
}
