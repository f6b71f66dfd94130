package scenario

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The gate the lab installs is deploy/gate as it ships: every object the
// same, only where the Deployment listens, how many replicas and on which
// network differ — the shipped args kept, the lab's appended after them.
func TestGateOverlayKeepsTheShippedInstall(t *testing.T) {
	shipped := filepath.Join("..", "..", "deploy", "gate")
	dir := t.TempDir()
	if err := writeGateOverlay(dir, shipped, GateInstallOptions{Mesh: "strict", MaxConcurrent: 3}); err != nil {
		t.Fatal(err)
	}
	want, got := kustomize(t, shipped), kustomize(t, dir)
	if len(got) != len(want) {
		t.Fatalf("the overlay renders %d objects, deploy/gate %d", len(got), len(want))
	}
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("%s: in deploy/gate, not in the overlay", key)
			continue
		}
		if key != "Deployment/danki-gate" {
			if !equality.Semantic.DeepEqual(w.Object, g.Object) {
				t.Errorf("%s differs from deploy/gate's", key)
			}
			continue
		}
		var wd, gd appsv1.Deployment
		fromUnstructured(t, w, &wd)
		fromUnstructured(t, g, &gd)
		wc, gc := wd.Spec.Template.Spec.Containers[0], gd.Spec.Template.Spec.Containers[0]
		if !slices.Equal(gc.Args[:len(wc.Args)], wc.Args) {
			t.Errorf("the shipped args changed: %q, want %q first", gc.Args, wc.Args)
		}
		added := gc.Args[len(wc.Args):]
		wantAdded := []string{"--webhook-host=10.244.0.1", "--health-probe-bind-address=10.244.0.1:8081",
			"--metrics-bind-address=127.0.0.1:18097", "--cert-dir=certs", "--istiod-address=10.244.0.1:15012", "--max-concurrent=3"}
		if !slices.Equal(added, wantAdded) {
			t.Errorf("the lab's args %q, want %q", added, wantAdded)
		}
		if *gd.Spec.Replicas != 1 || !gd.Spec.Template.Spec.HostNetwork || gd.Spec.Template.Spec.DNSPolicy != "ClusterFirstWithHostNet" {
			t.Errorf("replicas %d, hostNetwork %v, dnsPolicy %s: want 1, true, ClusterFirstWithHostNet", *gd.Spec.Replicas, gd.Spec.Template.Spec.HostNetwork, gd.Spec.Template.Spec.DNSPolicy)
		}
		// Nothing else: the same Deployment once those are put back.
		gd.Spec.Replicas, gd.Spec.Template.Spec.HostNetwork, gd.Spec.Template.Spec.DNSPolicy = wd.Spec.Replicas, false, wd.Spec.Template.Spec.DNSPolicy
		gd.Spec.Template.Spec.Containers[0].Args = wc.Args
		if !equality.Semantic.DeepEqual(wd, gd) {
			t.Errorf("the overlay changes more of the Deployment than replicas, network and args")
		}
	}
}

func kustomize(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command("kubectl", "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		objs[u.GetKind()+"/"+u.GetName()] = u
	}
	return objs
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	raw, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatal(err)
	}
}
