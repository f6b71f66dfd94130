package manifests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	networkingv1api "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/podcpu"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/test/testenv"
)

// notServerObjects are apiVersion groups of YAML files under examples/ that
// look like Kubernetes objects but are read by a tool, not the API server.
var notServerObjects = map[string]string{
	"kind.x-k8s.io":           "a kind cluster config: kind reads it, the API server has no such kind",
	"kustomize.config.k8s.io": "a kustomization: kustomize reads it; its output is what gets applied",
}

// kustomizations are the install manifests, applied as `kubectl kustomize`
// renders them.
var kustomizations = []string{"deploy", "deploy/http"}

// TestManifests applies every manifest danki ships (and the lab's) to a real API server with
// the real Istio and Argo Rollouts CRDs (server-side dry run, strict field
// validation), shows that broken manifests are refused, and checks the
// install's RBAC against danki's own client calls.
func TestManifests(t *testing.T) {
	e := testenv.Start(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, e.Config)

	files := append(yamlFiles(t, filepath.Join(root, "examples")), yamlFiles(t, filepath.Join(root, "lab", "manifests"))...)
	if len(files) < 10 {
		t.Fatalf("found only %d YAML files under examples/ and lab/manifests/: is the walk broken?", len(files))
	}
	rendered := map[string]string{}
	for _, dir := range kustomizations {
		out, err := k.run("kustomize", filepath.Join(root, dir))
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		path := filepath.Join(t.TempDir(), strings.ReplaceAll(dir, "/", "-")+".yaml")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		rendered[dir] = path
	}

	// The namespaces the manifests name must exist: a dry run of a
	// Namespace object creates nothing.
	namespaces := map[string]bool{}
	for _, path := range append(slices.Clone(files), mapValues(rendered)...) {
		for _, d := range readDocs(t, path) {
			if d.Metadata.Namespace != "" {
				namespaces[d.Metadata.Namespace] = true
			}
		}
	}
	createNamespaces(t, e.Kube, namespaces)

	t.Run("examples", func(t *testing.T) {
		for _, path := range files {
			rel, _ := filepath.Rel(root, path)
			t.Run(rel, func(t *testing.T) {
				docs := readDocs(t, path)
				if reason := notApplicable(docs); reason != "" {
					t.Skipf("not applied: %s", reason)
				}
				k.applyDryRun(t, path, len(docs))
			})
		}
	})
	t.Run("kustomize", func(t *testing.T) {
		for _, dir := range kustomizations {
			t.Run(dir, func(t *testing.T) {
				docs := readDocs(t, rendered[dir])
				kinds := map[string]int{}
				for _, d := range docs {
					kinds[d.Kind]++
				}
				want := map[string]int{"ConfigMap": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1}
				if fmt.Sprint(kinds) != fmt.Sprint(want) {
					t.Errorf("kubectl kustomize %s renders %v, want %v", dir, kinds, want)
				}
				k.applyDryRun(t, rendered[dir], len(docs))
			})
		}
	})
	t.Run("kustomize/deploy/gate", func(t *testing.T) { testGateInstall(t, e, k, root) })
	t.Run("rejects", func(t *testing.T) { testRejects(t, k) })
	// Before rbac: it checks the mesh identity's Role without danki-plugins.
	t.Run("mesh-identity", func(t *testing.T) {
		testMeshIdentity(t, e, k, filepath.Join(root, "deploy/rbac/mesh-identity.yaml"), filepath.Join(root, "deploy/gate/rbac.yaml"))
	})
	t.Run("rbac", func(t *testing.T) { testRBAC(t, e, k, rendered["deploy"]) })
}

// testRejects proves the dry runs above can fail: the API server refuses
// each broken manifest for the reason it was broken, and accepts the
// control, which differs from them only in the mistake.
func testRejects(t *testing.T, k *kubectl) {
	const rollout = `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: broken, namespace: shop}
spec:
  selector: {matchLabels: {app: broken}}
  template:
    metadata: {labels: {app: broken}}
    spec:
      containers: [{name: app, image: registry.example.com/app:v1}]
  strategy:
    canary:
      stableService: app-stable
      canaryService: app-canary
      steps:
      - STEP: 20
`
	const virtualService = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: shop}
spec:
  hosts: [app]
  http:
  - name: primary
    route:
    - destination: {host: app-stable}
      weight: STABLE
    - destination: {host: app-canary}
      weight: 0
`
	for _, tc := range []struct {
		name, manifest string
		wantErr        string // "" for the controls
	}{
		{"control: Rollout", strings.Replace(rollout, "STEP", "setWeight", 1), ""},
		{"Rollout step with a misspelt field", strings.Replace(rollout, "STEP", "setWieght", 1),
			`.spec.strategy.canary.steps[0].setWieght: field not declared in schema`},
		{"control: VirtualService", strings.Replace(virtualService, "STABLE", "100", 1), ""},
		{"VirtualService weight that is not a number", strings.Replace(virtualService, "STABLE", `"all"`, 1),
			`spec.http[0].route[0].weight`},
		// (Weight ranges — negative, over 100, not summing to 100 — are not
		// in Istio's CRD schema: istiod's validating webhook checks them,
		// and there is no istiod here.)
		{"VirtualService route with a misspelt field", strings.Replace(virtualService, "weight: STABLE", "weigth: 100", 1),
			`.spec.http[0].route[0].weigth: field not declared in schema`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "manifest.yaml")
			if err := os.WriteFile(path, []byte(tc.manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := k.run(dryRunArgs(path)...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("control manifest refused: %v\n%s", err, out)
			case tc.wantErr == "":
				return
			case err == nil:
				t.Fatalf("broken manifest accepted:\n%s\nkubectl: %s", tc.manifest, out)
			case !strings.Contains(string(out), tc.wantErr):
				t.Fatalf("refused, but not for %q:\n%s", tc.wantErr, out)
			}
			t.Logf("refused as expected: %s", strings.TrimSpace(string(out)))
		})
	}
}

// testRBAC installs deploy/ for real and runs danki's own client calls —
// pkg/shift's VirtualService/DestinationRule reads and updates, pkg/warmup's
// EndpointSlice, pod and ReplicaSet lookups, the router's status.abort patch and its
// Warning event — as the Argo Rollouts controller's ServiceAccount: with
// danki's ClusterRole they all succeed (and nothing else grants anything
// here: envtest has no other roles), and as a ServiceAccount without it
// every one is forbidden.
func testRBAC(t *testing.T, e *testenv.Env, k *kubectl, deploy string) {
	ctx := context.Background()
	if out, err := k.run("apply", "--server-side", "--field-manager=danki-manifests-test", "-f", deploy); err != nil {
		t.Fatalf("apply deploy/: %v\n%s", err, out)
	}
	const ns = "danki-rbac"
	createNamespaces(t, e.Kube, map[string]bool{ns: true})
	seed(t, e, ns)
	// The RBAC authorizer learns of new roles and bindings through
	// informers: wait until it has them, or a slow machine fails the calls.
	waitAuthorized(t, e.Kube, "system:serviceaccount:argo-rollouts:argo-rollouts", ns)

	for _, tc := range []struct {
		user    string
		allowed bool
	}{
		{"system:serviceaccount:argo-rollouts:argo-rollouts", true},
		{"system:serviceaccount:argo-rollouts:not-bound", false},
	} {
		t.Run(tc.user, func(t *testing.T) {
			cfg := rest.CopyConfig(e.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: tc.user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
			istio, err := istioclient.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			argo, err := argoclient.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			target := shift.Target{
				Namespace: ns, VirtualService: "app", HTTPRoutes: []string{"primary"},
				Subsets: &shift.Subsets{DestinationRule: "app", StableSubset: "stable", CanarySubset: "canary"},
			}
			calls := []struct {
				name string
				call func() error
			}{
				{"danki/istio SetWeight (get DestinationRule, get+update VirtualService)", func() error {
					return shift.New(istio, log).SetWeight(ctx, target, 30)
				}},
				{"danki/istio UpdateHash (get+update DestinationRule)", func() error {
					return shift.New(istio, log).UpdateHashes(ctx, target, "canaryhash", "stablehash")
				}},
				{"danki/warmup canary Service endpoints (list endpointslices, pods)", func() error {
					got, err := warmup.KubeTargets{Namespace: ns, Service: "app-canary", PodTemplateHash: "canaryhash", Port: intstr.FromString("http")}.Resolve(ctx, kube)
					return wantTargets(got, err, "http://10.244.0.5:8080")
				}},
				{"danki/warmup pods by selector (list pods)", func() error {
					got, err := warmup.KubeTargets{Namespace: ns, Selector: "app=app", PodTemplateHash: "canaryhash", Port: intstr.FromString("http")}.Resolve(ctx, kube)
					return wantTargets(got, err, "http://10.244.0.5:8080")
				}},
				{"danki/warmup wait for the canary ReplicaSet's replicas (list pods, replicasets)", func() error {
					// Wait reads spec.replicas of the canary's ReplicaSet
					// (seeded: 1): a Forbidden there fails the wait.
					wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					got, err := warmup.KubeTargets{Namespace: ns, Selector: "app=app", PodTemplateHash: "canaryhash", Port: intstr.FromString("http")}.Wait(wctx, kube, 1, 100*time.Millisecond)
					return wantTargets(got, err, "http://10.244.0.5:8080")
				}},
				{"danki/warmup yieldCPU (get pods, patch pods/resize)", func() error {
					// As pkg/warmupstep/yield.go lowers a canary pod's CPU
					// request while it warms and puts it back.
					pods := kube.CoreV1().Pods(ns)
					if _, err := pods.Get(ctx, "app-canary-1", metav1.GetOptions{}); err != nil {
						return err
					}
					for _, cpu := range []string{podcpu.YieldRequest, "250m"} {
						body, err := podcpu.ResizePatch(map[string]resource.Quantity{"app": resource.MustParse(cpu)}, "")
						if err != nil {
							return err
						}
						if _, err := pods.Patch(ctx, "app-canary-1", k8stypes.StrategicMergePatchType, body, metav1.PatchOptions{}, "resize"); err != nil {
							return err
						}
					}
					return nil
				}},
				{"danki/istio abort (patch rollouts/status)", func() error {
					// The call rollouts/trafficrouter.go makes when a gated ramp failed.
					_, err := argo.ArgoprojV1alpha1().Rollouts(ns).Patch(ctx, "app", k8stypes.MergePatchType,
						[]byte(`{"status":{"abort":true}}`), metav1.PatchOptions{}, "status")
					return err
				}},
				{"danki/warmup capacity knee (get + patch rollouts)", func() error {
					// As rollouts/step.go recordKnee records a passed knee.
					if _, err := argo.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "app", metav1.GetOptions{}); err != nil {
						return err
					}
					_, err := argo.ArgoprojV1alpha1().Rollouts(ns).Patch(ctx, "app", k8stypes.MergePatchType,
						[]byte(`{"metadata":{"annotations":{"danki.dev/capacity-knees":"[{\"revision\":\"canaryhash\",\"qps\":120}]"}}}`), metav1.PatchOptions{})
					return err
				}},
				{"danki/latency load run's owner (get analysisruns)", func() error {
					// As rollouts/loadruns.go re-reads a source: load
					// measurement's AnalysisRun (none here: NotFound is allowed).
					_, err := argo.ArgoprojV1alpha1().AnalysisRuns(ns).Get(ctx, "app", metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						return nil
					}
					return err
				}},
				{"danki/latency bearerTokenSecret (get secrets)", func() error {
					// As pkg/analysis reads prometheus.bearerTokenSecret.
					_, err := kube.CoreV1().Secrets(ns).Get(ctx, "prometheus-token", metav1.GetOptions{})
					return err
				}},
				{"danki/istio ramp-failure event (create events)", func() error {
					// As rollouts/trafficrouter.go records it next to the abort.
					_, err := kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
						ObjectMeta:     metav1.ObjectMeta{GenerateName: "app.", Namespace: ns},
						InvolvedObject: corev1.ObjectReference{Kind: "Rollout", APIVersion: "argoproj.io/v1alpha1", Namespace: ns, Name: "app"},
						Reason:         "DankiRampFailed", Message: "danki/istio aborted the rollout: test", Type: corev1.EventTypeWarning,
						Source: corev1.EventSource{Component: "danki/istio"}, Count: 1,
					}, metav1.CreateOptions{})
					return err
				}},
			}
			for _, c := range calls {
				err := c.call()
				switch {
				case tc.allowed && err != nil:
					t.Errorf("%s: %v", c.name, err)
				case !tc.allowed && err == nil:
					t.Errorf("%s: allowed without danki's ClusterRole: the test proves nothing", c.name)
				case !tc.allowed && !apierrors.IsForbidden(err):
					t.Errorf("%s: want Forbidden, got %v", c.name, err)
				}
			}
			if !tc.allowed {
				return
			}
			// The writes took effect.
			vs, err := e.Istio.NetworkingV1().VirtualServices(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if w := vs.Spec.Http[0].Route[1].Weight; w != 30 {
				t.Errorf("canary weight after SetWeight: %d, want 30", w)
			}
			dr, err := e.Istio.NetworkingV1().DestinationRules(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := dr.Spec.Subsets[1].Labels["rollouts-pod-template-hash"]; got != "canaryhash" {
				t.Errorf("canary subset hash label after UpdateHash: %q, want canaryhash", got)
			}
			ro, err := e.Argo.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !ro.Status.Abort {
				t.Error("status.abort not set after the patch")
			}
			if got := ro.Annotations["danki.dev/capacity-knees"]; !strings.Contains(got, "canaryhash") {
				t.Errorf("capacity knee annotation after the patch: %q", got)
			}
		})
	}
}

// waitAuthorized polls SubjectAccessReviews until user may do what danki's
// ClusterRole grants (up to 30 s).
func waitAuthorized(t *testing.T, kube kubernetes.Interface, user, ns string) {
	t.Helper()
	checks := []authorizationv1.ResourceAttributes{
		{Group: "networking.istio.io", Resource: "virtualservices", Verb: "update"},
		{Group: "networking.istio.io", Resource: "destinationrules", Verb: "get"},
		{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "list"},
		{Resource: "pods", Verb: "list"},
		{Group: "apps", Resource: "replicasets", Verb: "list"},
		{Resource: "pods", Subresource: "resize", Verb: "patch"},
		{Group: "argoproj.io", Resource: "rollouts", Subresource: "status", Verb: "patch"},
		{Group: "argoproj.io", Resource: "rollouts", Verb: "patch"},
		{Resource: "events", Verb: "create"},
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, attrs := range checks {
		attrs.Namespace = ns
		for {
			sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attrs},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview: %v", err)
			}
			if sar.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s may not %s %s/%s %s after applying deploy/: %s", user, attrs.Verb, attrs.Group, attrs.Resource, attrs.Subresource, sar.Status.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// seed creates, as admin, what danki's calls act on: a VirtualService split
// between two subsets of a DestinationRule, a Rollout, and a canary pod that
// is Running and Ready behind the app-canary Service's EndpointSlice.
func seed(t *testing.T, e *testenv.Env, ns string) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err := e.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: networkingv1api.DestinationRule{Host: "app", Subsets: []*networkingv1api.Subset{
			{Name: "stable", Labels: map[string]string{"app": "app"}},
			{Name: "canary", Labels: map[string]string{"app": "app"}},
		}},
	}, metav1.CreateOptions{})
	must("DestinationRule", err)
	_, err = e.Istio.NetworkingV1().VirtualServices(ns).Create(ctx, &networkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: networkingv1api.VirtualService{Hosts: []string{"app"}, Http: []*networkingv1api.HTTPRoute{{
			Name: "primary",
			Route: []*networkingv1api.HTTPRouteDestination{
				{Destination: &networkingv1api.Destination{Host: "app", Subset: "stable"}, Weight: 100},
				{Destination: &networkingv1api.Destination{Host: "app", Subset: "canary"}, Weight: 0},
			},
		}}},
	}, metav1.CreateOptions{})
	must("VirtualService", err)
	_, err = e.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-token", Namespace: ns},
		StringData: map[string]string{"token": "t"},
	}, metav1.CreateOptions{})
	must("Secret", err)
	labels := map[string]string{"app": "app"}
	_, err = e.Argo.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v1"}}},
			},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
	}, metav1.CreateOptions{})
	must("Rollout", err)

	canary, replicas := map[string]string{"app": "app", "rollouts-pod-template-hash": "canaryhash"}, int32(1)
	_, err = e.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "app-canaryhash", Namespace: ns, Labels: canary},
		Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: canary},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: canary},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v2"}}}}},
	}, metav1.CreateOptions{})
	must("ReplicaSet", err)
	pod, err := e.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-canary-1", Namespace: ns,
			Labels: map[string]string{"app": "app", "rollouts-pod-template-hash": "canaryhash"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v2",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			// Burstable: danki/warmup's yieldCPU may resize it in place.
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
	}, metav1.CreateOptions{})
	must("Pod", err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}}, QOSClass: corev1.PodQOSBurstable,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = e.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must("Pod status", err)

	name, port, ready := "http", int32(8080), true
	_, err = e.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "app-canary-abcde", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "app-canary"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "app-canary-1"}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}, metav1.CreateOptions{})
	must("EndpointSlice", err)
}

// wantTargets passes through a lookup error, else checks that the lookup
// really saw the seeded canary pod (an empty answer would also be no error).
func wantTargets(got []warmup.Target, err error, want string) error {
	if err != nil {
		return err
	}
	if len(got) != 1 || got[0].URL != want {
		return fmt.Errorf("targets %v, want the one at %s", got, want)
	}
	return nil
}

// kubectl runs the kubectl on PATH against the test's API server.
type kubectl struct {
	path, kubeconfig, cacheDir string
}

func newKubectl(t *testing.T, cfg *rest.Config) *kubectl {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not found on PATH (it applies the manifests): install kubectl: %v", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientCertificate: cfg.CertFile,
		ClientKeyData: cfg.KeyData, ClientKey: cfg.KeyFile, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return &kubectl{path: path, kubeconfig: kubeconfig, cacheDir: filepath.Join(dir, "cache")}
}

func (k *kubectl) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if args[0] != "kustomize" {
		args = append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)
	}
	cmd := exec.CommandContext(ctx, k.path, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func dryRunArgs(path string) []string {
	return []string{"apply", "--server-side", "--dry-run=server", "--validate=strict",
		"--field-manager=danki-manifests-test", "-f", path}
}

var dryRunLine = regexp.MustCompile(`(?m)^\S+ serverside-applied \(server dry run\)$`)

// applyDryRun applies path in a server-side dry run with strict field
// validation and checks that kubectl reports every document.
func (k *kubectl) applyDryRun(t *testing.T, path string, docs int) {
	t.Helper()
	out, err := k.run(dryRunArgs(path)...)
	if err != nil {
		t.Fatalf("kubectl apply --server-side --dry-run=server --validate=strict -f %s: %v\n%s", path, err, out)
	}
	if n := len(dryRunLine.FindAll(out, -1)); n != docs {
		t.Fatalf("%d objects applied, the file has %d documents:\n%s", n, docs, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// doc is what the test reads of one YAML document.
type doc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// readDocs reads the objects of a YAML file.
func readDocs(t *testing.T, path string) []doc {
	t.Helper()
	raws, err := testenv.YAMLDocuments(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]doc, len(raws))
	for i, raw := range raws {
		if err := yaml.Unmarshal(raw, &docs[i]); err != nil {
			t.Fatalf("%s: not YAML: %v", path, err)
		}
	}
	return docs
}

// notApplicable says why a file is not for the API server, or "".
func notApplicable(docs []doc) string {
	if len(docs) == 0 {
		return "no YAML documents"
	}
	var reasons []string
	for _, d := range docs {
		group, _, _ := strings.Cut(d.APIVersion, "/")
		switch {
		case d.APIVersion == "" || d.Kind == "":
			reasons = append(reasons, "not a Kubernetes object (no apiVersion/kind)")
		case notServerObjects[group] != "":
			reasons = append(reasons, fmt.Sprintf("%s %s is %s", d.APIVersion, d.Kind, notServerObjects[group]))
		}
	}
	if len(reasons) == 0 {
		return ""
	}
	if len(reasons) != len(docs) {
		// kubectl would fail on the file as a whole: say so in the test.
		return ""
	}
	return strings.Join(slices.Compact(reasons), "; ")
}

// yamlFiles lists the *.yaml and *.yml files under dir, sorted.
func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func createNamespaces(t *testing.T, kube kubernetes.Interface, names map[string]bool) {
	t.Helper()
	for name := range names {
		_, err := kube.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", name, err)
		}
	}
}

func mapValues(m map[string]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return vs
}

// testGateInstall renders deploy/gate and applies it (server-side dry run,
// strict: the webhook's matchConditions compile as CEL on this API server),
// and checks what keeps the gate from hurting the cluster: the webhook sees
// opted-in pods only, outside the system's namespaces; the gate runs as two
// replicas spread over nodes, kept by a PodDisruptionBudget, with a priority
// class and bounded resources.
func testGateInstall(t *testing.T, e *testenv.Env, k *kubectl, root string) {
	createNamespaces(t, e.Kube, map[string]bool{"danki-gate": true}) // a dry run creates no Namespace
	out, err := k.run("kustomize", filepath.Join(root, "deploy", "gate"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/gate: %v\n%s", err, out)
	}
	rendered := filepath.Join(t.TempDir(), "gate.yaml")
	if err := os.WriteFile(rendered, out, 0o644); err != nil {
		t.Fatal(err)
	}
	raws, err := testenv.YAMLDocuments(rendered)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var (
		deploy  appsv1.Deployment
		pdb     policyv1.PodDisruptionBudget
		webhook admissionregistrationv1.MutatingWebhookConfiguration
		prio    schedulingv1.PriorityClass
	)
	for _, raw := range raws {
		var d doc
		if err := yaml.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		kinds[d.Kind]++
		var into any
		switch d.Kind {
		case "Deployment":
			into = &deploy
		case "PodDisruptionBudget":
			into = &pdb
		case "MutatingWebhookConfiguration":
			into = &webhook
		case "PriorityClass":
			into = &prio
		}
		if into != nil {
			if err := yaml.UnmarshalStrict(raw, into); err != nil {
				t.Fatalf("%s: %v", d.Kind, err)
			}
		}
	}
	want := map[string]int{"Namespace": 1, "ServiceAccount": 2, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 3, "RoleBinding": 3,
		"PriorityClass": 1, "Deployment": 1, "PodDisruptionBudget": 1, "Service": 1, "MutatingWebhookConfiguration": 1}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("kubectl kustomize deploy/gate renders %v, want %v", kinds, want)
	}
	k.applyDryRun(t, rendered, len(raws))

	pod := deploy.Spec.Template
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas < 2 {
		t.Errorf("Deployment replicas %v: want at least 2", deploy.Spec.Replicas)
	}
	if pod.Spec.PriorityClassName != prio.Name || prio.Value <= 0 || prio.Value >= 1000000000 || prio.GlobalDefault {
		t.Errorf("priorityClassName %q, PriorityClass %s value %d (global default %v): want the gate's own, above workloads, below the system's",
			pod.Spec.PriorityClassName, prio.Name, prio.Value, prio.GlobalDefault)
	}
	anti := pod.Spec.Affinity
	if anti == nil || anti.PodAntiAffinity == nil || len(anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 ||
		anti.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("no pod anti-affinity spreading the replicas over nodes: %+v", anti)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(pod.Labels)) ||
		pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("PodDisruptionBudget %+v does not keep one of the Deployment's pods (%v)", pdb.Spec, err)
	}
	for _, c := range pod.Spec.Containers {
		r := c.Resources
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Cpu().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("container %s: requests %v, limits %v; want CPU and memory in both", c.Name, r.Requests, r.Limits)
		}
	}
	if len(webhook.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(webhook.Webhooks))
	}
	wh := webhook.Webhooks[0]
	if len(wh.MatchConditions) == 0 || !strings.Contains(wh.MatchConditions[0].Expression, "danki.dev/warm-up") {
		t.Errorf("webhook matchConditions %+v: want the API server to send only opted-in pods", wh.MatchConditions)
	}
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy %v: want Ignore (a gate that is down must not block pod creation)", wh.FailurePolicy)
	}
	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []labels.Set{
		{"kubernetes.io/metadata.name": "kube-system"},
		{"kubernetes.io/metadata.name": "danki-gate"},
		{"kubernetes.io/metadata.name": "istio-system", "danki.dev/warm-gate": "disabled"},
	} {
		if sel.Matches(ns) {
			t.Errorf("the webhook's namespaceSelector selects namespace %v", ns)
		}
	}
	if !sel.Matches(labels.Set{"kubernetes.io/metadata.name": "shop"}) {
		t.Error("the webhook's namespaceSelector leaves out an ordinary namespace")
	}
}
