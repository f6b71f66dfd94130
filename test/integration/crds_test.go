package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/test/testenv"
	networkingv1 "istio.io/api/networking/v1"
	istiov1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDankiResourcesOnRealAPIServer creates the objects a danki rollout is
// made of and reads them back from a real API server that validates them
// against the real Istio and Argo Rollouts CRD schemas.
func TestDankiResourcesOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "default"

	vs := &istiov1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: networkingv1.VirtualService{
			Hosts:    []string{"app.example.com"},
			Gateways: []string{"istio-system/gateway"},
			Http: []*networkingv1.HTTPRoute{{
				Name: "primary",
				Route: []*networkingv1.HTTPRouteDestination{
					{Destination: &networkingv1.Destination{Host: "app-stable", Port: &networkingv1.PortSelector{Number: 8080}}, Weight: 90},
					{Destination: &networkingv1.Destination{Host: "app-canary", Port: &networkingv1.PortSelector{Number: 8080}}, Weight: 10},
				},
			}},
		},
	}
	if _, err := env.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VirtualService: %v", err)
	}
	gotVS, err := env.Istio.NetworkingV1().VirtualServices(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get VirtualService: %v", err)
	}
	route := gotVS.Spec.GetHttp()[0].GetRoute()
	if len(route) != 2 || route[0].GetDestination().GetHost() != "app-stable" || route[0].GetWeight() != 90 ||
		route[1].GetDestination().GetHost() != "app-canary" || route[1].GetWeight() != 10 {
		t.Fatalf("VirtualService read back with route %v, want app-stable=90 app-canary=10", route)
	}

	dr := &istiov1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: networkingv1.DestinationRule{
			Host: "app",
			Subsets: []*networkingv1.Subset{
				{Name: "stable", Labels: map[string]string{"rollouts-pod-template-hash": "aaaa"}},
				{Name: "canary", Labels: map[string]string{"rollouts-pod-template-hash": "bbbb"}},
			},
		},
	}
	if _, err := env.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, dr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DestinationRule: %v", err)
	}
	gotDR, err := env.Istio.NetworkingV1().DestinationRules(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get DestinationRule: %v", err)
	}
	if s := gotDR.Spec.GetSubsets(); len(s) != 2 || s[1].GetLabels()["rollouts-pod-template-hash"] != "bbbb" {
		t.Fatalf("DestinationRule read back with subsets %v", s)
	}

	latencyConfig := json.RawMessage(`{"prometheus":{"address":"http://127.0.0.1:9090"},"slo":{"p99":"250ms"}}`)
	at := &v1alpha1.AnalysisTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "latency", Namespace: ns},
		Spec: v1alpha1.AnalysisTemplateSpec{
			Args: []v1alpha1.Argument{{Name: "canary-hash"}},
			Metrics: []v1alpha1.Metric{{
				Name:     "tail-latency",
				Interval: "30s",
				Provider: v1alpha1.MetricProvider{Plugin: map[string]json.RawMessage{"danki/latency": latencyConfig}},
			}},
		},
	}
	if _, err := env.Argo.ArgoprojV1alpha1().AnalysisTemplates(ns).Create(ctx, at, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create AnalysisTemplate: %v", err)
	}
	gotAT, err := env.Argo.ArgoprojV1alpha1().AnalysisTemplates(ns).Get(ctx, "latency", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get AnalysisTemplate: %v", err)
	}
	if got := string(gotAT.Spec.Metrics[0].Provider.Plugin["danki/latency"]); !strings.Contains(got, `"p99":"250ms"`) {
		t.Fatalf("AnalysisTemplate plugin config read back as %s", got)
	}

	replicas := int32(2)
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.RolloutSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "app"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "danki.dev/sample-app:v1",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				}}},
			},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				StableService: "app-stable",
				CanaryService: "app-canary",
				TrafficRouting: &v1alpha1.RolloutTrafficRouting{
					Plugins: map[string]json.RawMessage{"danki/istio": json.RawMessage(`{"virtualService":{"name":"app","routes":["primary"]}}`)},
				},
				Steps: []v1alpha1.CanaryStep{
					{Plugin: &v1alpha1.PluginStep{Name: "danki/warmup", Config: json.RawMessage(`{"maxRequests":5000}`)}},
					{SetWeight: ptr(int32(20))},
					{Analysis: &v1alpha1.RolloutAnalysis{Templates: []v1alpha1.AnalysisTemplateRef{{TemplateName: "latency"}},
						Args: []v1alpha1.AnalysisRunArgument{{Name: "canary-hash", ValueFrom: &v1alpha1.ArgumentValueFrom{PodTemplateHashValue: ptr(v1alpha1.Latest)}}}}},
					{SetWeight: ptr(int32(60))},
				},
			}},
		},
	}
	if _, err := env.Argo.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Rollout: %v", err)
	}
	gotRO, err := env.Argo.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Rollout: %v", err)
	}
	steps := gotRO.Spec.Strategy.Canary.Steps
	if len(steps) != 4 || steps[0].Plugin == nil || steps[0].Plugin.Name != "danki/warmup" || steps[1].SetWeight == nil || *steps[1].SetWeight != 20 {
		t.Fatalf("Rollout read back with steps %+v", steps)
	}
	if _, ok := gotRO.Spec.Strategy.Canary.TrafficRouting.Plugins["danki/istio"]; !ok {
		t.Fatalf("Rollout read back without trafficRouting.plugins[danki/istio]: %+v", gotRO.Spec.Strategy.Canary.TrafficRouting)
	}

	// Schema validation is real: the CRD's OpenAPI schema rejects a weight
	// that is not an integer and a route with an unknown field.
	for name, body := range map[string]string{
		"weight-not-integer": `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"bad1"},
			"spec":{"hosts":["x"],"http":[{"route":[{"destination":{"host":"a"},"weight":"ninety"}]}]}}`,
		"destination-without-host": `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"bad2"},
			"spec":{"hosts":["x"],"http":[{"route":[{"destination":{"subset":"a"},"weight":100}]}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			err := env.Istio.NetworkingV1().RESTClient().Post().
				Namespace(ns).Resource("virtualservices").
				Body([]byte(body)).SetHeader("Content-Type", "application/json").
				Do(ctx).Error()
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("API server accepted an invalid VirtualService (%s): err=%v", name, err)
			}
			t.Logf("rejected as expected: %v", err)
		})
	}
	// And a Service a Rollout refers to is a plain core object.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "app-canary", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "app"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromString("http")}}},
	}
	if _, err := env.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Service: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
