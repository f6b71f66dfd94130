package manifests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/danki-dev/danki/test/testenv"
)

// helmKubeVersion is the test API server's (helm template defaults to 1.20).
const helmKubeVersion = "1.34.4"

// TestHelmChart renders deploy/helm/danki with the helm that hack/helm.sh
// builds and checks it as deploy/ is checked: its default values render the
// same objects as kustomize's deploy/gate and deploy/rbac (less the
// Namespace: `helm install --create-namespace` makes it), field for field
// but the chart's labels; both certificate modes pass a server-side dry run
// (but cert-manager's own objects: no cert-manager CRDs here); and its RBAC,
// applied for real, lets the gate's and the plugins' calls through as their
// ServiceAccounts and no more.
func TestHelmChart(t *testing.T) {
	e := testenv.Start(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, e.Config)
	path, err := exec.Command(filepath.Join(root, "hack", "helm.sh"), "--path").Output()
	if err != nil {
		t.Fatalf("hack/helm.sh --path (builds helm): %v", err)
	}
	helm := strings.TrimSpace(string(path))
	render := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"template", "danki", filepath.Join(root, "deploy", "helm", "danki"),
			"--namespace", "danki-gate", "--kube-version", helmKubeVersion}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", args, err, out)
		}
		file := filepath.Join(t.TempDir(), "chart.yaml")
		if err := os.WriteFile(file, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	createNamespaces(t, e.Kube, map[string]bool{"danki-gate": true, "argo-rollouts": true})
	chart := render(t)

	t.Run("same objects as kustomize", func(t *testing.T) {
		want := map[string]map[string]any{}
		for _, dir := range []string{"deploy/gate", "deploy/rbac"} {
			out, err := k.run("kustomize", filepath.Join(root, dir))
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
			}
			file := filepath.Join(t.TempDir(), "k.yaml")
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
			for key, obj := range objects(t, file) {
				if !strings.HasPrefix(key, "Namespace/") {
					want[key] = obj
				}
			}
		}
		got := objects(t, chart)
		for key, w := range want {
			g, ok := got[key]
			if !ok {
				t.Errorf("the chart does not render %s", key)
				continue
			}
			if !reflect.DeepEqual(g, w) {
				gj, _ := json.MarshalIndent(g, "", " ")
				wj, _ := json.MarshalIndent(w, "", " ")
				t.Errorf("%s differs from kustomize's (labels aside):\nchart:\n%s\nkustomize:\n%s", key, gj, wj)
			}
		}
		for key := range got {
			if _, ok := want[key]; !ok {
				t.Errorf("the chart renders %s, kustomize does not", key)
			}
		}
		if len(want) < 15 {
			t.Errorf("only %d objects compared: is the rendering broken?", len(want))
		}
	})

	t.Run("dry-run/self-managed", func(t *testing.T) { k.applyDryRun(t, chart, len(readDocs(t, chart))) })
	t.Run("dry-run/cert-manager", func(t *testing.T) {
		file := render(t, "--set", "certificates.certManager.enabled=true")
		docs, raws := readDocs(t, file), mustDocs(t, file)
		var keep []string
		var cert struct {
			Spec struct {
				SecretName string   `json:"secretName"`
				DNSNames   []string `json:"dnsNames"`
			} `json:"spec"`
		}
		for i, d := range docs {
			switch {
			case d.Kind == "Certificate":
				if err := yaml.Unmarshal(raws[i], &cert); err != nil {
					t.Fatal(err)
				}
			case strings.HasPrefix(d.APIVersion, "cert-manager.io/"):
			default:
				keep = append(keep, string(raws[i]))
			}
		}
		if cert.Spec.SecretName != "danki-gate-tls" || !contains(cert.Spec.DNSNames, "danki-gate.danki-gate.svc") {
			t.Errorf("Certificate %+v: want the Secret the gate mounts, for the Service's name", cert.Spec)
		}
		out := filepath.Join(t.TempDir(), "no-cert-manager.yaml")
		if err := os.WriteFile(out, []byte(strings.Join(keep, "\n---\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		k.applyDryRun(t, out, len(keep))
		objs := objects(t, file)
		var deploy appsv1.Deployment
		convert(t, objs["Deployment/danki-gate/danki-gate"], &deploy)
		args := strings.Join(deploy.Spec.Template.Spec.Containers[0].Args, " ")
		if strings.Contains(args, "--webhook-config") || deploy.Spec.Template.Spec.Volumes[0].Secret == nil ||
			deploy.Spec.Template.Spec.Volumes[0].Secret.SecretName != "danki-gate-tls" {
			t.Errorf("with cert-manager the gate must serve the Secret and leave the caBundle alone: args %s, volumes %+v", args, deploy.Spec.Template.Spec.Volumes)
		}
		var role rbacv1.ClusterRole
		convert(t, objs["ClusterRole//danki-gate"], &role)
		for _, r := range role.Rules {
			if contains(r.Resources, "mutatingwebhookconfigurations") {
				t.Errorf("with cert-manager the gate may not touch the webhook configuration: %+v", r)
			}
		}
	})

	// Before the plugins' ClusterRole exists (it grants get on Secrets):
	// the mesh identities and the gate's roles alone.
	t.Run("mesh-identity", func(t *testing.T) {
		testMeshIdentity(t, e, k, render(t, "--show-only", "templates/plugins-mesh-identity.yaml", "--show-only", "templates/gate-rbac.yaml"))
	})
	t.Run("gate-rbac", func(t *testing.T) { testGateRBAC(t, e, k, chart) })
	t.Run("plugins-rbac", func(t *testing.T) { testRBAC(t, e, k, chart) })
}

// testGateRBAC applies the chart and makes the gate's own calls as its
// ServiceAccount danki-gate/danki-gate: allowed where the gate needs them
// (pkg/gate), Forbidden one step beyond.
func testGateRBAC(t *testing.T, e *testenv.Env, k *kubectl, chart string) {
	ctx := context.Background()
	if out, err := k.run("apply", "--server-side", "--field-manager=danki-manifests-test", "-f", chart); err != nil {
		t.Fatalf("apply the chart: %v\n%s", err, out)
	}
	const user = "system:serviceaccount:danki-gate:danki-gate"
	waitMayCreateToken(t, e.Kube, user, "danki-gate", "danki")
	kube := impersonate(t, e.Config, user)
	ns := "danki-gate"
	calls := []struct {
		name    string
		allowed bool
		call    func(kube kubernetes.Interface) error
	}{
		{"list pods of every namespace", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "danki.dev/gated=true"})
			return err
		}},
		{"get+patch its webhook configuration", true, func(c kubernetes.Interface) error {
			if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "danki-gate", metav1.GetOptions{}); err != nil {
				return err
			}
			_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, "danki-gate", "application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"danki.dev/test":"1"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"get another webhook configuration", false, func(c kubernetes.Interface) error {
			_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "other", metav1.GetOptions{})
			return err
		}},
		{"create its leader-election Lease", true, func(c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "danki-gate"}}, metav1.CreateOptions{})
			return err
		}},
		{"create its record-key Secret, then get it", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "danki-gate-record-key"}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			_, err = c.CoreV1().Secrets(ns).Get(ctx, "danki-gate-record-key", metav1.GetOptions{})
			return err
		}},
		{"list Secrets", false, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a Lease in another namespace", false, func(c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "danki-gate"}}, metav1.CreateOptions{})
			return err
		}},
		{"create an event", true, func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "p."},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p"}, Reason: "Warm", Message: "test"}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, c := range calls {
		err := c.call(kube)
		switch {
		case c.allowed && err != nil:
			t.Errorf("%s as %s: %v", c.name, user, err)
		case !c.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s as %s: want Forbidden, got %v", c.name, user, err)
		}
	}
	// The control: without the chart's bindings the same allowed calls are Forbidden.
	other := impersonate(t, e.Config, "system:serviceaccount:danki-gate:not-bound")
	for _, c := range calls {
		if c.allowed {
			if err := c.call(other); !apierrors.IsForbidden(err) {
				t.Errorf("%s as an unbound ServiceAccount: want Forbidden, got %v", c.name, err)
			}
		}
	}
}

// objects reads a rendered file into kind/namespace/name → the object, less
// metadata.labels (the chart's own) and null fields.
func objects(t *testing.T, file string) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, raw := range mustDocs(t, file) {
		var obj map[string]any
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		md, _ := obj["metadata"].(map[string]any)
		delete(md, "labels")
		key := obj["kind"].(string) + "/" + str(md["namespace"]) + "/" + str(md["name"])
		if _, dup := objs[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		objs[key] = obj
	}
	return objs
}

func mustDocs(t *testing.T, file string) [][]byte {
	t.Helper()
	raws, err := testenv.YAMLDocuments(file)
	if err != nil {
		t.Fatal(err)
	}
	return raws
}

func convert(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

func str(v any) string { s, _ := v.(string); return s }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
