package runner

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestFileSDListsSidecarsWithPodLabels: every meshed pod's Envoy
// Prometheus listener is listed in envoy-stats.json beside pods.json with
// the labels kubernetes_sd relabelling gives (namespace, pod, each pod label
// sanitized, rollouts_pod_template_hash among them); a pod without a sidecar
// is not; pods.json keeps listing only the annotated apps, at their moved
// ports, as before.
func TestFileSDListsSidecarsWithPodLabels(t *testing.T) {
	dir := t.TempDir()
	sd := filepath.Join(dir, "pods.json")
	r, err := New(Config{Client: fake.NewClientset(), Node: "n", Network: Loopback{}, LogDir: t.TempDir(), FileSD: sd, Mesh: &Mesh{}})
	if err != nil {
		t.Fatal(err)
	}
	r.store = cache.NewStore(cache.MetaNamespaceKeyFunc)
	add := func(name, hash, ip string, meshed, scrape bool) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": "sample-app", "rollouts-pod-template-hash": hash, "security.istio.io/tlsMode": "istio",
				// A pod label named like a target label loses to it.
				"pod": "not-the-name"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
		if scrape {
			pod.Annotations = map[string]string{"prometheus.io/scrape": "true"}
		}
		if err := r.store.Add(pod); err != nil {
			t.Fatal(err)
		}
		r.pods["default/"+name] = &podState{uid: pod.UID, ip: netip.MustParseAddr(ip), meshed: meshed}
	}
	add("app-aaa-1", "aaa", "10.244.0.7", true, true)
	add("app-bbb-1", "bbb", "10.244.0.12", true, false)
	add("plain", "ccc", "10.244.0.9", false, true)
	if err := r.writeFileSD(); err != nil {
		t.Fatal(err)
	}

	read := func(file string) []sdGroup {
		t.Helper()
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var groups []sdGroup
		if err := json.Unmarshal(data, &groups); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return groups
	}
	sidecars := read(filepath.Join(dir, "envoy-stats.json"))
	if len(sidecars) != 2 {
		t.Fatalf("envoy-stats.json lists %d targets, want the 2 meshed pods: %+v", len(sidecars), sidecars)
	}
	want := map[string]map[string]string{
		"10.244.0.12:23012": {"namespace": "default", "pod": "app-bbb-1", "app": "sample-app", "rollouts_pod_template_hash": "bbb", "security_istio_io_tlsMode": "istio"},
		"10.244.0.7:23007":  {"namespace": "default", "pod": "app-aaa-1", "app": "sample-app", "rollouts_pod_template_hash": "aaa", "security_istio_io_tlsMode": "istio"},
	}
	for _, g := range sidecars {
		if len(g.Targets) != 1 || want[g.Targets[0]] == nil {
			t.Fatalf("unexpected sidecar target %v; want the pods' Envoy Prometheus ports %v", g.Targets, want)
		}
		w := want[g.Targets[0]]
		if len(g.Labels) != len(w) {
			t.Errorf("%s: labels %v, want %v", g.Targets[0], g.Labels, w)
		}
		for k, v := range w {
			if g.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q (all labels %v)", g.Targets[0], k, g.Labels[k], v, g.Labels)
			}
		}
	}
	pods := read(sd)
	if len(pods) != 2 || pods[0].Targets[0] != "10.244.0.7:18080" || pods[1].Targets[0] != "10.244.0.9:8080" {
		t.Fatalf("pods.json %+v, want the annotated pods at their app ports (meshed: moved past the sidecar)", pods)
	}
	if _, ok := pods[0].Labels["security_istio_io_tlsMode"]; ok {
		t.Errorf("pods.json gained pod labels: %v", pods[0].Labels)
	}

	// A deleted pod leaves both files.
	if err := r.store.Delete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-aaa-1", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.writeFileSD(); err != nil {
		t.Fatal(err)
	}
	if s := read(filepath.Join(dir, "envoy-stats.json")); len(s) != 1 || s[0].Targets[0] != "10.244.0.12:23012" {
		t.Errorf("after deleting app-aaa-1: envoy-stats.json %+v", s)
	}
	if p := read(sd); len(p) != 1 || p[0].Targets[0] != "10.244.0.9:8080" {
		t.Errorf("after deleting app-aaa-1: pods.json %+v", p)
	}
}
