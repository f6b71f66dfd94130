package rollouts

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/warmupstep"
)

// tenantPolicy is an operator's policy that lets tenants' configs name the
// test servers on 127.0.0.1 and nothing else.
func tenantPolicy() policy.Policy {
	return policy.Policy{Network: policy.Network{AllowLoopback: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}
}

// loadStops waits (with a deadline) until srv gets no more requests: two
// looks 200 ms apart see the same count.
func loadStops(t *testing.T, srv *testutil.ColdServer, within time.Duration) {
	t.Helper()
	testutil.WaitFor(t, within, func() bool {
		before := srv.All()
		time.Sleep(200 * time.Millisecond)
		return srv.All() == before
	})
}

// Argo Rollouts calls neither Abort nor Terminate for a Rollout that is
// deleted: the warm-up finds out itself, and its load stops. The same when
// the Rollout is created again under the same name (another UID) or moves
// to another canary revision.
func TestStepLoadStopsWhenTheRolloutIsGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(ctx context.Context, c *argofake.Clientset, ro *v1alpha1.Rollout) error
		want   string
	}{
		{"deleted", func(ctx context.Context, c *argofake.Clientset, ro *v1alpha1.Rollout) error {
			return c.ArgoprojV1alpha1().Rollouts(ro.Namespace).Delete(ctx, ro.Name, metav1.DeleteOptions{})
		}, "Rollout shop/cart was deleted"},
		{"created again", func(ctx context.Context, c *argofake.Clientset, ro *v1alpha1.Rollout) error {
			// Deleted and created again between two of the warm-up's
			// reads: replaced in one step in the fake's store (a Delete
			// then a Create let a read land between them, and the
			// warm-up rightly saw it deleted).
			again := ro.DeepCopy()
			again.UID = "uid-2"
			return c.Tracker().Update(v1alpha1.SchemeGroupVersion.WithResource("rollouts"), again, ro.Namespace)
		}, "created again (UID uid-2, the warm-up's was uid-1)"},
		{"new revision", func(ctx context.Context, c *argofake.Clientset, ro *v1alpha1.Rollout) error {
			next := ro.DeepCopy()
			next.Status.CurrentPodHash = "h2"
			_, err := c.ArgoprojV1alpha1().Rollouts(ro.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
			return err
		}, "canary is now revision h2, not h1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newStepLoadServer(t, testutil.Flat(time.Millisecond))
			impl := newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), tenantPolicy())
			impl.step.OwnerEvery = 50 * time.Millisecond
			ro := stepRollout("cart", "h1", 0)
			ro.UID = k8stypes.UID("uid-1")
			argo := argofake.NewSimpleClientset(ro.DeepCopy())
			impl.argo = argo
			p := warmupStepClient(t, impl)
			// Never converges by itself within the test.
			cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"minRequests": 200000, "maxRequests": 200000, "qps": 100, "deadline": "5m"})
			res, _ := p.Run(ro, &types.RpcStepContext{Config: cfg})
			if res.Phase != types.PhaseRunning {
				t.Fatalf("Run: %s %s", res.Phase, res.Message)
			}
			testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 20 })

			if err := tc.change(context.Background(), argo, ro); err != nil {
				t.Fatal(err)
			}
			key := warmupRunKey(ro)
			var st warmupstep.Status
			testutil.WaitFor(t, 10*time.Second, func() bool {
				st, _ = impl.step.Supervisor.Status(key)
				return st.Phase.Final()
			})
			if st.Phase != warmupstep.PhaseStopped || !strings.Contains(st.Message, tc.want) {
				t.Fatalf("warm-up ended %s %q; want Stopped saying %q", st.Phase, st.Message, tc.want)
			}
			loadStops(t, srv, 5*time.Second)
		})
	}

	// A Rollout that stays as it was keeps its warm-up: the checks pass.
	t.Run("unchanged", func(t *testing.T) {
		srv := newStepLoadServer(t, stepDecay)
		impl := newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), tenantPolicy())
		impl.step.OwnerEvery = 20 * time.Millisecond
		ro := stepRollout("cart", "h1", 0)
		ro.UID = "uid-1"
		impl.argo = argofake.NewSimpleClientset(ro.DeepCopy())
		res, _ := runStepUntilDone(t, warmupStepClient(t, impl), ro, warmupConfigJSON(t, []string{srv.URL}, nil), nil, 30*time.Second)
		if res.Phase != types.PhaseSuccessful {
			t.Fatalf("%s: %s", res.Phase, res.Message)
		}
	})
}

// The warm-up's pod guard is the Rollout's own pods: the canary's and the
// stable's by pod-template hash and the Rollout's selector, each as the
// run found it. A target pod deleted, its IP handed to another pod, is
// refused once the guard has read the pods again.
func TestStepPodGuardIsTheRolloutsOwnPods(t *testing.T) {
	pod := func(name, app, hash, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: k8stypes.UID(name + "-uid"),
			Labels: map[string]string{"app": app, warmup.PodTemplateHashLabel: hash}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	}
	target := func(name, ip string) warmup.Target { return warmup.Target{Name: name, URL: "http://" + ip + ":8080"} }
	kube := fake.NewClientset(pod("cart-h1-a", "cart", "h1", "10.0.0.1"), pod("cart-h1-b", "cart", "h1", "10.0.0.2"),
		pod("cart-old-s", "cart", "old", "10.0.1.1"), pod("other-h1", "other", "h1", "10.0.0.9"))
	impl := newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), tenantPolicy())
	impl.kube, impl.step.GuardEvery = kube, 20*time.Millisecond
	ro := stepRollout("cart", "h1", 0) // stable: "old"

	if impl.step.PodGuard(impl.rollout(ro), warmupstep.StepConfig{TargetConfig: warmup.TargetConfig{URLs: []string{"http://127.0.0.1:1"}, StableURLs: []string{"http://127.0.0.1:2"}}}) != nil {
		t.Error("a guard for a run with no pod targets")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	build := impl.step.PodGuard(impl.rollout(ro), warmupstep.StepConfig{})
	guard, err := build(ctx, []warmup.Target{target("cart-h1-a", "10.0.0.1"), target("cart-h1-b", "10.0.0.2"), target("other-h1", "10.0.0.9")},
		[]warmup.Target{target("cart-old-s", "10.0.1.1")})
	if err != nil {
		t.Fatal(err)
	}
	check := func(ip string) error { return guard(netip.MustParseAddr(ip)) }
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.1.1"} {
		if err := check(ip); err != nil {
			t.Errorf("%s: %v; want allowed", ip, err)
		}
	}
	if err := check("10.0.0.9"); err == nil {
		t.Error("another app's pod with the canary's hash is allowed")
	}

	pods := kube.CoreV1().Pods("shop")
	if err := pods.Delete(ctx, "cart-h1-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod("cart-h1-z", "cart", "h1", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return check("10.0.0.1") != nil })
	if err := check("10.0.0.1"); !strings.Contains(err.Error(), "pod shop/cart-h1-a is gone") {
		t.Errorf("refused with %q; want it to name the gone pod", err)
	}
	if err := check("10.0.0.2"); err != nil {
		t.Errorf("the other canary pod: %v", err)
	}
}
