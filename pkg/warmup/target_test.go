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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/pkg/policy"
)

// TestFindTargets covers target resolution as both callers use it: the step
// plugin (a TargetConfig and the Rollout's fields, through Query) and
// `danki warmup` (a TargetQuery from its flags).
func TestFindTargets(t *testing.T) {
	pod := func(name, hash, ip string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "cart", PodTemplateHashLabel: hash}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	ready, port, portName := true, int32(8080), "http"
	slice := func(service string, pods map[string]string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: service + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
		}
		for name, ip := range pods {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: name}})
		}
		return s
	}
	kube := fake.NewClientset(pod("cart-new-a", "new", "10.0.0.5"), pod("cart-old-a", "old", "10.0.0.9"),
		slice("cart-canary", map[string]string{"cart-new-a": "10.0.0.5", "cart-old-a": "10.0.0.9"}),
		slice("cart-stable", map[string]string{"cart-old-a": "10.0.0.9"}))
	withKube := func(q TargetQuery) TargetQuery {
		q.Timeout, q.Kube = 300*time.Millisecond, func() (kubernetes.Interface, error) { return kube, nil }
		return q
	}
	rollout := Rollout{Namespace: "shop", Name: "cart", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cart"}},
		CanaryService: "cart-canary", StableService: "cart-stable", CanaryHash: "new", StableHash: "old"}
	step := func(c TargetConfig, r Rollout, compare bool) TargetQuery {
		q, err := c.WithDefaults().Query(r, compare, compare)
		if err != nil {
			t.Fatalf("Query(%+v): %v", c, err)
		}
		return withKube(q)
	}
	cli := func(canary, stable KubeTargets) TargetQuery {
		canary.Namespace, stable.Namespace = "shop", "shop"
		return withKube(TargetQuery{Canary: TargetSource{Pods: canary}, Stable: TargetSource{Pods: stable}, CompareToStable: true, MinPods: 1})
	}

	for _, tc := range []struct {
		name           string
		query          TargetQuery
		canary, stable string
		err            string
	}{
		{name: "step: canaryService, stableService", query: step(TargetConfig{Port: intstr.FromString("http")}, rollout, true),
			canary: "cart-new-a=http://10.0.0.5:8080", stable: "cart-old-a=http://10.0.0.9:8080"},
		{name: "step: useSelector", query: step(TargetConfig{UseSelector: true}, rollout, false), canary: "cart-new-a=http://10.0.0.5:8080"},
		{name: "step: no services, selector", query: step(TargetConfig{Port: intstr.FromInt32(9000)}, Rollout{Namespace: "shop", Name: "cart", Selector: rollout.Selector, CanaryHash: "new", StableHash: "old"}, true),
			canary: "cart-new-a=http://10.0.0.5:9000", stable: "cart-old-a=http://10.0.0.9:9000"},
		{name: "step: urls", query: step(TargetConfig{URLs: []string{"http://10.1.0.1:80"}, StableURLs: []string{"http://10.1.0.2:80/"}}, Rollout{}, true),
			canary: "10.1.0.1:80=http://10.1.0.1:80", stable: "10.1.0.2:80=http://10.1.0.2:80"},
		{name: "step: too few pods", query: step(TargetConfig{MinPods: 2}, rollout, false), err: "found 1 of 2 ready pods (ready endpoints of Service cart-canary in namespace shop)"},
		{name: "cli: service and hash", query: cli(KubeTargets{Service: "cart-canary", PodTemplateHash: "new"}, KubeTargets{Service: "cart-stable"}),
			canary: "cart-new-a=http://10.0.0.5:8080", stable: "cart-old-a=http://10.0.0.9:8080"},
		{name: "cli: selector and hashes", query: cli(KubeTargets{Selector: "app=cart", PodTemplateHash: "new"}, KubeTargets{Selector: "app=cart", PodTemplateHash: "old"}),
			canary: "cart-new-a=http://10.0.0.5:8080", stable: "cart-old-a=http://10.0.0.9:8080"},
		{name: "cli: bad url", query: TargetQuery{Canary: TargetSource{URLs: []string{"http://x:1/api"}, URLsField: "--url"}}, err: "--url[0]: "},
		{name: "no kube client", query: TargetQuery{Canary: TargetSource{Pods: KubeTargets{Namespace: "shop", Service: "cart-canary"}}}, err: "no Kubernetes client to find ready endpoints of Service cart-canary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canary, stable, err := FindTargets(context.Background(), tc.query)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := targetList(canary); got != tc.canary {
				t.Errorf("canary %s, want %s", got, tc.canary)
			}
			if got := targetList(stable); got != tc.stable {
				t.Errorf("stable %s, want %s", got, tc.stable)
			}
		})
	}

	// What the Rollout cannot answer fails Query, naming the fix.
	for _, tc := range []struct {
		rollout Rollout
		want    string
	}{
		{Rollout{Namespace: "shop", Name: "cart", CanaryService: "c", CanaryHash: "new"}, "no stable ReplicaSet apart from the canary"},
		{Rollout{Namespace: "shop", Name: "cart", CanaryService: "c", CanaryHash: "new", StableHash: "new"}, "turn them off for the first rollout or give stableURLs"},
		{Rollout{Namespace: "shop", Name: "cart", StableHash: "old"}, "no status.currentPodHash yet"},
		{Rollout{Namespace: "shop", Name: "cart", CanaryHash: "new", StableHash: "old"}, "neither a canaryService nor spec.selector"},
	} {
		if _, err := (TargetConfig{}).Query(tc.rollout, true, true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Query(%+v): err = %v, want %q", tc.rollout, err, tc.want)
		}
	}
	if _, _, err := FindTargets(context.Background(), TargetQuery{Canary: TargetSource{Pods: KubeTargets{Namespace: "shop", Service: "x"}},
		Kube: func() (kubernetes.Interface, error) { return nil, errors.New("kubeconfig: none") }}); err == nil || !strings.Contains(err.Error(), "kubeconfig: none") {
		t.Errorf("client error: %v", err)
	}
}

func targetList(ts []Target) string {
	var parts []string
	for _, x := range ts {
		parts = append(parts, x.Name+"="+x.URL)
	}
	return strings.Join(parts, ",")
}

func TestTargetConfigValidate(t *testing.T) {
	err := TargetConfig{MinPods: -1, URLs: []string{"https://x:1"}, StableURLs: []string{"x"}}.Validate(policy.Local())
	for _, want := range []string{"minPods: must be at least 1", "urls[0]: ", "stableURLs[0]: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %q", err, want)
		}
	}
	if err := (TargetConfig{}).WithDefaults().Validate(policy.Local()); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
}
