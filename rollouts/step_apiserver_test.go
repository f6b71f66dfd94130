package rollouts

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/test/testenv"
)

// TestWarmupExampleOnAPIServer stores examples/warmup/rollout.yaml in a real
// kube-apiserver with Argo's Rollout CRD, reads it back (the plugin config
// must survive the CRD's schema), checks the step order, parses the plugin
// config strictly, and resolves the canary and stable pods of the stored
// Rollout from real EndpointSlices. No traffic is sent: the pod IPs are not
// loopback.
func TestWarmupExampleOnAPIServer(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "examples", "warmup", "rollout.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ro v1alpha1.Rollout
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		if bytes.Contains(doc, []byte("kind: Rollout")) {
			if err := yaml.UnmarshalStrict(doc, &ro); err != nil {
				t.Fatalf("example Rollout: %v", err)
			}
		}
	}
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ro.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Argo.ArgoprojV1alpha1().Rollouts(ro.Namespace).Create(ctx, &ro, metav1.CreateOptions{}); err != nil {
		t.Fatalf("API server refused the example Rollout: %v", err)
	}
	stored, err := e.Argo.ArgoprojV1alpha1().Rollouts(ro.Namespace).Get(ctx, ro.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored.Status.CurrentPodHash, stored.Status.StableRS = "7c9d5b6f4", "5f6d8c7b9"
	if stored, err = e.Argo.ArgoprojV1alpha1().Rollouts(ro.Namespace).UpdateStatus(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	steps := stored.Spec.Strategy.Canary.Steps
	plugin := -1
	for i, s := range steps {
		if s.Plugin != nil && s.Plugin.Name == WarmupPluginName {
			plugin = i
			break
		}
	}
	if plugin < 1 || steps[plugin-1].SetCanaryScale == nil || steps[plugin+1].SetWeight == nil {
		t.Fatalf("example steps: want setCanaryScale, danki/warmup, setWeight; got plugin at %d of %+v", plugin, steps)
	}
	cfg, err := warmupstep.ParseStepConfig(steps[plugin].Plugin.Config, policy.Local())
	if err != nil {
		t.Fatalf("example plugin config (as stored by the API server): %v", err)
	}
	if len(cfg.Requests) != 3 || !cfg.CompareToStable || cfg.Port.String() != "http" || cfg.Deadline.String() != "10m0s" {
		t.Errorf("example config lost fields in the API server: %+v", cfg)
	}

	// The canary and stable pods, as the controller's Services would list
	// them: an old pod is still in the canary Service's slice.
	ready := true
	slice := func(name, service string, eps map[string]string) {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ro.Namespace, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: stepPtr("http"), Port: stepPtr(int32(8080))}},
		}
		for pod, ip := range eps {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ro.Namespace, Name: pod}})
		}
		if _, err := e.Kube.DiscoveryV1().EndpointSlices(ro.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, hash string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ro.Namespace, Name: name, Labels: map[string]string{"app": "catalog", warmup.PodTemplateHashLabel: hash}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "catalog", Image: "catalog:v2"}}},
		}
		if _, err := e.Kube.CoreV1().Pods(ro.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("catalog-7c9d5b6f4-a", "7c9d5b6f4")
	pod("catalog-7c9d5b6f4-b", "7c9d5b6f4")
	pod("catalog-5f6d8c7b9-a", "5f6d8c7b9")
	slice("catalog-canary-1", "catalog-canary", map[string]string{"catalog-7c9d5b6f4-a": "10.2.0.5", "catalog-7c9d5b6f4-b": "10.2.0.6", "catalog-5f6d8c7b9-a": "10.2.0.9"})
	slice("catalog-stable-1", "catalog-stable", map[string]string{"catalog-5f6d8c7b9-a": "10.2.0.9"})

	resolve := func(stable bool) string {
		q, err := cfg.Query(warmupRollout(stored), cfg.CompareToStable, cfg.CompareToStable)
		if err != nil {
			t.Fatal(err)
		}
		pods := q.Canary.Pods
		if stable {
			pods = q.Stable.Pods
		}
		ts, err := pods.Resolve(ctx, e.Kube)
		if err != nil {
			t.Fatal(err)
		}
		var urls []string
		for _, x := range ts {
			urls = append(urls, x.Name+"="+x.URL)
		}
		return strings.Join(urls, ",")
	}
	if got := resolve(false); got != "catalog-7c9d5b6f4-a=http://10.2.0.5:8080,catalog-7c9d5b6f4-b=http://10.2.0.6:8080" {
		t.Errorf("canary pods of the Rollout: %s", got)
	}
	if got := resolve(true); got != "catalog-5f6d8c7b9-a=http://10.2.0.9:8080" {
		t.Errorf("stable pods of the Rollout: %s", got)
	}
}
