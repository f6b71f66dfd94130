package rollouts

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/jobs"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/test/testenv"
)

// On a real API server: a warm-up of a Rollout's pods (found by the
// Rollout's selector and canary hash, guarded by the pod guard) stops when
// the Rollout is deleted, and a source: load measurement when its
// AnalysisRun is. Nothing calls Abort, Terminate or GarbageCollect; there is
// no garbage collector either, so the pods stay, as a reused address would.
func TestLoadStopsWhenItsOwnerIsDeletedOnAPIServer(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("Rollout", func(t *testing.T) {
		srv := newStepLoadServer(t, testutil.Flat(time.Millisecond))
		u, _ := url.Parse(srv.URL)
		port, _ := strconv.Atoi(u.Port())

		ro := stepRollout("cart", "", 0)
		ro.Status = v1alpha1.RolloutStatus{}
		ro.Spec.Template = corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cart"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "cart:v2"}}},
		}
		stored, err := e.Argo.ArgoprojV1alpha1().Rollouts("shop").Create(ctx, ro, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		step := int32(0)
		stored.Status.CurrentPodHash, stored.Status.StableRS, stored.Status.CurrentStepIndex = "h1", "h0", &step
		if stored, err = e.Argo.ArgoprojV1alpha1().Rollouts("shop").UpdateStatus(ctx, stored, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-h1-a", Labels: map[string]string{"app": "cart", warmup.PodTemplateHashLabel: "h1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "cart:v2", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}},
		}
		if pod, err = e.Kube.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if _, err = e.Kube.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		impl := newWarmupStep(quietLog, tenantPolicy())
		impl.kube, impl.argo = e.Kube, e.Argo
		impl.step.OwnerEvery, impl.step.GuardEvery = 100*time.Millisecond, 100*time.Millisecond
		p := warmupStepClient(t, impl)
		cfg := warmupConfigJSON(t, nil, map[string]any{"port": "http", "minRequests": 200000, "maxRequests": 200000, "qps": 100, "deadline": "5m"})
		res, _ := p.Run(stored, &types.RpcStepContext{Config: cfg})
		if res.Phase != types.PhaseRunning {
			t.Fatalf("Run: %s %s", res.Phase, res.Message)
		}
		testutil.WaitFor(t, 20*time.Second, func() bool { return srv.Load() > 20 })

		if err := e.Argo.ArgoprojV1alpha1().Rollouts("shop").Delete(ctx, "cart", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var st warmupstep.Status
		testutil.WaitFor(t, 10*time.Second, func() bool {
			st, _ = impl.step.Supervisor.Status(warmupRunKey(stored))
			return st.Phase.Final()
		})
		if st.Phase != warmupstep.PhaseStopped || !strings.Contains(st.Message, "Rollout shop/cart was deleted") {
			t.Fatalf("warm-up ended %s %q; want Stopped, the Rollout deleted", st.Phase, st.Message)
		}
		loadStops(t, srv, 5*time.Second)
	})

	t.Run("AnalysisRun", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		srv.HealthPath = "/healthz"
		metric := loadMetric(srv.URL, `"duration": "5m", "deadline": "10m", "qps": 100`)
		run := &v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pre-promotion"},
			Spec: v1alpha1.AnalysisRunSpec{Metrics: []v1alpha1.Metric{metric}}}
		run, err := e.Argo.ArgoprojV1alpha1().AnalysisRuns("shop").Create(ctx, run, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mp, impl := dispenseOwnerWatchedLatency(t, e.Argo)
		impl.loads.ownerEvery = 100 * time.Millisecond
		if m := mp.Run(run, metric); m.Phase != v1alpha1.AnalysisPhaseRunning {
			t.Fatalf("Run: %s %q", m.Phase, m.Message)
		}
		waitLoad(t, srv, 50)
		if err := e.Argo.ArgoprojV1alpha1().AnalysisRuns("shop").Delete(ctx, run.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r, _ := impl.loads.Get(measurementID(run, metric))
		testutil.WaitFor(t, 10*time.Second, func() bool { _, done := jobs.Result(r); return done })
		if v, _ := jobs.Result(r); !strings.Contains(v.Summary, "AnalysisRun shop/pre-promotion was deleted") {
			t.Fatalf("verdict %s %q; want the AnalysisRun deleted", v.Phase, v.Summary)
		}
		loadStops(t, srv, 5*time.Second)
	})
}
