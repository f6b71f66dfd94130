package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/test/testenv"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The gRPC lab example (lab/manifests/grpc).
const (
	grpcRollout       = "app-grpc"
	grpcWarmupStep    = 1 // steps: setCanaryScale, danki/warmup, setWeight 50, pause
	grpcSetWeightStep = 2
	grpcMetricsPort   = 8081
	getItem           = "/danki.sample.v1.Catalog/GetItem"
)

// TestLabGRPCWarmup is the gRPC warm-up end to end (issue 19): the real Argo
// Rollouts controller runs danki/warmup on the gRPC sample app (a grpc-java
// JVM per pod, examples/sample-app-grpc). The canary pod is health-checked
// over grpc.health.v1 and warmed with GetItem calls (messages from the app's
// reflection service) at weight 0; the step succeeds only once its latency
// converged, its windows show the cold start, the pod counted the warm-up's
// calls by their metadata marker, and only then does the canary get weight.
func TestLabGRPCWarmup(t *testing.T) {
	// Registered before startLab's lab down, so it runs after it (cleanups
	// run last-in first-out); only for a lab this test brought up.
	var up bool
	t.Cleanup(func() {
		if up {
			assertNoJVM(t, "sample-app-grpc.jar")
		}
	})
	l := startLab(t)
	up = true
	dir := filepath.Join(l.root, "lab", "manifests")
	l.apply(t, filepath.Join(dir, "20-gateway.yaml"), filepath.Join(dir, "grpc"))
	rollouts := l.argo.ArgoprojV1alpha1().Rollouts("default")
	getRO := func() (*v1alpha1.Rollout, error) { return rollouts.Get(l.ctx, grpcRollout, metav1.GetOptions{}) }
	l.waitHealthy(t, grpcRollout, 2)

	ro, err := getRO()
	if err != nil {
		t.Fatal(err)
	}
	if step := ro.Spec.Strategy.Canary.Steps[grpcWarmupStep].Plugin; step == nil || step.Name != "danki/warmup" || !strings.Contains(string(step.Config), `"grpc"`) {
		t.Fatalf("step %d of lab/manifests/grpc is not a danki/warmup with gRPC requests", grpcWarmupStep)
	}

	if l.controllerInstalledAsPod(t) {
		l.removedTokenRuleFailsLoudly(t)
	} else {
		t.Log("the controller runs as a local process with the admin kubeconfig (LAB_ARGO_INSTALL=process): no RBAC to take a rule from")
	}

	t.Log("image → danki.dev/sample-app-grpc:v2")
	setImage(t, l, "danki.dev/sample-app-grpc:v2")

	st, ro := l.awaitOneCanaryWarm(t, grpcRollout, "app-grpc-canary", 7*time.Minute, "gRPC")

	// The canary JVM itself saw the warm-up: GetItem calls carrying the
	// metadata x-danki-warmup, answered OK, at least as many as the step
	// reports.
	canary := grpcPods(t, l, ro.Status.CurrentPodHash)
	if len(canary) != 1 {
		t.Fatalf("%d canary pods (hash %s), want 1", len(canary), ro.Status.CurrentPodHash)
	}
	m := podMetrics(t, l, &canary[0])
	marked := m[`sample_app_warmup_calls_total{method="`+getItem+`"}`]
	ok := m[`sample_app_requests_total{path="`+getItem+`",code="0"}`]
	t.Logf("canary pod %s: %.0f GetItem calls with x-danki-warmup, %.0f GetItem calls OK", canary[0].Name, marked, ok)
	// (Calls in flight when the warm-up stops end CANCELLED: a few may
	// not be OK.)
	if marked < float64(st.Requests) || ok < 0.99*marked {
		t.Errorf("canary pod %s counted %.0f marked GetItem calls (%.0f OK): want ≥ the %d requests the warm-up reports, ≥ 99 %% OK", canary[0].Name, marked, ok, st.Requests)
	}
	if n := m[`sample_app_warmup_calls_total{method="/danki.sample.v1.Catalog/PlaceOrder"}`]; n != 0 {
		t.Errorf("the warm-up called the write method PlaceOrder %.0f times: only GetItem is in the request mix", n)
	}

	// Only after the warm-up does the canary get its weight.
	l.waitRollout(t, "default", grpcRollout, 2*time.Minute, "Rollout app-grpc paused at setWeight 50 after the warm-up", func(ro *v1alpha1.Rollout) (bool, string) {
		w, err := grpcCanaryWeight(l)
		if err != nil {
			return false, err.Error()
		}
		return ro.Status.Phase == v1alpha1.RolloutPhasePaused && ro.Status.CurrentStepIndex != nil && *ro.Status.CurrentStepIndex == grpcSetWeightStep+1 && w == 50,
			fmt.Sprintf("VirtualService canary weight %d; %s", w, describe(ro))
	})
}

// setImage sets the image of the gRPC Rollout's container and waits until
// the controller has taken the new revision as its canary (a status from
// the revision before, such as an aborted warm-up's, is then gone).
func setImage(t *testing.T, l *lab, image string) {
	t.Helper()
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"` + image + `"}]`
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Patch(l.ctx, grpcRollout, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("set image %s: %v", image, err)
	}
	before := ro.Status.CurrentPodHash
	l.waitRollout(t, "default", grpcRollout, time.Minute, image+" is the canary", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.ObservedGeneration == strconv.FormatInt(ro.Generation, 10) && ro.Status.CurrentPodHash != before && ro.Status.CurrentPodHash != ro.Status.StableRS,
			describe(ro)
	})
}

// controllerInstalledAsPod reports whether the lab runs the Argo Rollouts
// controller as users install it, under its own ServiceAccount and RBAC
// (lab/scripts/mesh.sh, LAB_ARGO_INSTALL).
func (l *lab) controllerInstalledAsPod(t *testing.T) bool {
	cache, err := testenv.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	mode, err := os.ReadFile(filepath.Join(cache, "lab", "run", "argo-install-mode"))
	if err != nil {
		t.Fatalf("how the lab runs the controller: %v", err)
	}
	return strings.TrimSpace(string(mode)) == "pod"
}

// removedTokenRuleFailsLoudly takes the rule that lets the plugins ask for
// a token of danki's mesh identity (deploy/rbac/mesh-identity.yaml) away
// and rolls out a version: the warm-up must fail at weight 0 with a message
// naming the missing rule, not warm in plaintext or hang. It runs before
// any warm-up, while the plugin process has no certificate yet (it keeps
// one once minted), and puts the rule back as the file has it.
func (l *lab) removedTokenRuleFailsLoudly(t *testing.T) {
	t.Helper()
	roles := l.kube.RbacV1().Roles("argo-rollouts")
	role, err := roles.Get(l.ctx, "danki-mesh-identity", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy/rbac's Role danki-mesh-identity: %v", err)
	}
	cut := role.DeepCopy()
	cut.Rules = slices.DeleteFunc(cut.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "serviceaccounts/token") })
	if len(cut.Rules) != len(role.Rules)-1 {
		t.Fatalf("Role danki-mesh-identity has %d rules on serviceaccounts/token, want 1", len(role.Rules)-len(cut.Rules))
	}
	if _, err := roles.Update(l.ctx, cut, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove the serviceaccounts/token rule: %v", err)
	}
	t.Log("Role argo-rollouts/danki-mesh-identity without its serviceaccounts/token rule; image → danki.dev/sample-app-grpc:v1-norule")
	setImage(t, l, "danki.dev/sample-app-grpc:v1-norule")
	ro := l.waitRollout(t, "default", grpcRollout, 4*time.Minute, "the warm-up fails and the rollout aborts", func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Abort, describe(ro)
	})
	msg := ro.Status.Message
	if !strings.Contains(msg, "danki/warmup") || !strings.Contains(msg, "serviceaccounts/token") || !strings.Contains(strings.ToLower(msg), "forbidden") {
		t.Errorf("rollout message %q: want danki/warmup failed, Forbidden, naming the serviceaccounts/token rule", msg)
	}
	if w, err := grpcCanaryWeight(l); err != nil || w != 0 {
		t.Errorf("canary weight %d (%v) after the failed warm-up: want 0", w, err)
	}
	l.apply(t, filepath.Join(l.root, "deploy", "rbac", "mesh-identity.yaml"))
	// The plugin retries a failed mint after mtls.RetryAfter.
	time.Sleep(mtls.RetryAfter)
}

// grpcCanaryWeight reads the canary's weight on VirtualService app-grpc.
func grpcCanaryWeight(l *lab) (int32, error) { return l.canaryWeight(grpcRollout, "app-grpc-canary") }

// canaryWeight reads the weight of the route to canaryHost on VirtualService
// vs (namespace default).
func (l *lab) canaryWeight(vs, canaryHost string) (int32, error) {
	v, err := l.istio.NetworkingV1().VirtualServices("default").Get(l.ctx, vs, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for _, r := range v.Spec.Http {
		for _, d := range r.Route {
			if d.Destination.Host == canaryHost {
				return d.Weight, nil
			}
		}
	}
	return 0, fmt.Errorf("VirtualService %s has no route to %s", vs, canaryHost)
}

// grpcPods lists the running gRPC sample-app pods of one ReplicaSet hash.
func grpcPods(t *testing.T, l *lab, hash string) []corev1.Pod {
	t.Helper()
	return runningPods(t, l, "app=sample-app-grpc,rollouts-pod-template-hash="+hash)
}

var promSample = regexp.MustCompile(`(?m)^(sample_app_[a-z_]+\{[^}]*\}) ([0-9.eE+-]+)$`)

// podMetrics reads the gRPC sample app's counters from its HTTP side port.
func podMetrics(t *testing.T, l *lab, pod *corev1.Pod) map[string]float64 {
	t.Helper()
	body, err := l.podGet(l.ctx, pod, grpcMetricsPort, "/metrics")
	if err != nil {
		t.Fatalf("pod %s metrics: %v", pod.Name, err)
	}
	m := map[string]float64{}
	for _, s := range promSample.FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseFloat(s[2], 64)
		if err == nil {
			m[s[1]] = v
		}
	}
	return m
}

// assertNoJVM checks that no process runs the lab's jar (the lab's bin
// directory in the cache: a copy of the same jar run elsewhere on the
// machine, a local test's JVM, is not the lab's) any more.
func assertNoJVM(t *testing.T, jar string) {
	t.Helper()
	cache, err := testenv.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cache, "lab", "bin", jar)
	if out, _ := exec.Command("pgrep", "-f", regexp.QuoteMeta(path)).Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("%s JVMs still running after lab down: pids %s", path, bytes.Fields(out))
	}
}
