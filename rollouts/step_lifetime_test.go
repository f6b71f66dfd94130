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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
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
			if err := c.ArgoprojV1alpha1().Rollouts(ro.Namespace).Delete(ctx, ro.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			again := ro.DeepCopy()
			again.UID = "uid-2"
			_, err := c.ArgoprojV1alpha1().Rollouts(ro.Namespace).Create(ctx, again, metav1.CreateOptions{})
			return err
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
			impl.ownerEvery = 50 * time.Millisecond
			ro := stepRollout("cart", "h1", 0)
			ro.UID = k8stypes.UID("uid-1")
			argo := argofake.NewSimpleClientset(ro.DeepCopy())
			impl.argo = argo
			p := warmupStepClient(t, impl)
			// Never converges by itself within the test.
			cfg := warmupConfigJSON(t, []string{srv.URL}, map[string]any{"minRequests": 1000000, "maxRequests": 1000000, "qps": 100, "deadline": "5m"})
			res, _ := p.Run(ro, &types.RpcStepContext{Config: cfg})
			if res.Phase != types.PhaseRunning {
				t.Fatalf("Run: %s %s", res.Phase, res.Message)
			}
			testutil.WaitFor(t, 10*time.Second, func() bool { return srv.Load() > 20 })

			if err := tc.change(context.Background(), argo, ro); err != nil {
				t.Fatal(err)
			}
			key := warmupRunKey(ro)
			var st warmup.Status
			testutil.WaitFor(t, 10*time.Second, func() bool {
				st, _ = impl.supervisor.Status(key)
				return st.Phase.Final()
			})
			if st.Phase != warmup.PhaseStopped || !strings.Contains(st.Message, tc.want) {
				t.Fatalf("warm-up ended %s %q; want Stopped saying %q", st.Phase, st.Message, tc.want)
			}
			loadStops(t, srv, 5*time.Second)
		})
	}

	// A Rollout that stays as it was keeps its warm-up: the checks pass.
	t.Run("unchanged", func(t *testing.T) {
		srv := newStepLoadServer(t, stepDecay)
		impl := newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), tenantPolicy())
		impl.ownerEvery = 20 * time.Millisecond
		ro := stepRollout("cart", "h1", 0)
		ro.UID = "uid-1"
		impl.argo = argofake.NewSimpleClientset(ro.DeepCopy())
		res, _ := runStepUntilDone(t, warmupStepClient(t, impl), ro, warmupConfigJSON(t, []string{srv.URL}, nil), nil, 30*time.Second)
		if res.Phase != types.PhaseSuccessful {
			t.Fatalf("%s: %s", res.Phase, res.Message)
		}
	})
}
