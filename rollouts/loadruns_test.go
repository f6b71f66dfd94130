package rollouts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	argofake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	goplugin "github.com/hashicorp/go-plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/jobs"
)

// dispenseTenantLatency serves danki/latency with a tenant's policy
// through go-plugin's real net/rpc plumbing; its load runs check
// AnalysisRuns in argo every 50 ms.
func dispenseOwnerWatchedLatency(t *testing.T, argo argoclient.Interface) (rpc.MetricProviderPlugin, *latencyProvider) {
	t.Helper()
	f := factories[KindMetricProvider]
	plugin := f.build(quietLog, tenantPolicy(), nil)
	impl := plugin.(*rpc.RpcMetricProviderPlugin).Impl.(*latencyProvider)
	impl.loads.argo = func() (argoclient.Interface, error) { return argo, nil }
	impl.loads.ownerEvery = 50 * time.Millisecond
	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{f.mapKey: plugin}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(f.mapKey)
	if err != nil {
		t.Fatal(err)
	}
	mp := raw.(rpc.MetricProviderPlugin)
	if e := mp.InitPlugin(); e.HasError() {
		t.Fatalf("InitPlugin: %v", e)
	}
	return mp, impl
}

// Argo calls neither Terminate nor GarbageCollect for an AnalysisRun that
// is deleted: a source: load measurement finds out itself and its load
// stops. Created again under the same name (another UID) is gone too; an
// AnalysisRun that stays keeps its load.
func TestLoadMeasurementStopsWhenTheAnalysisRunIsGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(ctx context.Context, c *argofake.Clientset, run *v1alpha1.AnalysisRun) error
		want   string
	}{
		{"deleted", func(ctx context.Context, c *argofake.Clientset, run *v1alpha1.AnalysisRun) error {
			return c.ArgoprojV1alpha1().AnalysisRuns(run.Namespace).Delete(ctx, run.Name, metav1.DeleteOptions{})
		}, "AnalysisRun default/pre-promotion was deleted"},
		{"created again", func(ctx context.Context, c *argofake.Clientset, run *v1alpha1.AnalysisRun) error {
			if err := c.ArgoprojV1alpha1().AnalysisRuns(run.Namespace).Delete(ctx, run.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			_, err := c.ArgoprojV1alpha1().AnalysisRuns(run.Namespace).Create(ctx, analysisRunFor("uid-2"), metav1.CreateOptions{})
			return err
		}, "created again (UID uid-2, the load's was uid-1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
			srv.HealthPath = "/healthz"
			run := analysisRunFor("uid-1")
			argo := argofake.NewSimpleClientset(run.DeepCopy())
			mp, impl := dispenseOwnerWatchedLatency(t, argo)
			metric := loadMetric(srv.URL, `"duration": "5m", "deadline": "10m", "qps": 100`)
			if m := mp.Run(run, metric); m.Phase != v1alpha1.AnalysisPhaseRunning {
				t.Fatalf("Run: %s %q", m.Phase, m.Message)
			}
			waitLoad(t, srv, 50)
			if err := tc.change(context.Background(), argo, run); err != nil {
				t.Fatal(err)
			}
			r, _ := impl.loads.Get(measurementID(run, metric))
			testutil.WaitFor(t, 10*time.Second, func() bool { _, done := jobs.Result(r); return done })
			v, _ := jobs.Result(r)
			if !strings.Contains(v.Summary, tc.want) {
				t.Fatalf("verdict %s %q; want it to say %q", v.Phase, v.Summary, tc.want)
			}
			loadStops(t, srv, 5*time.Second)
		})
	}

	t.Run("unchanged", func(t *testing.T) {
		srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
		srv.HealthPath = "/healthz"
		run := analysisRunFor("uid-1")
		mp, _ := dispenseOwnerWatchedLatency(t, argofake.NewSimpleClientset(run.DeepCopy()))
		metric := loadMetric(srv.URL, `"count": 600, "qps": 300, "connections": 16`)
		m := resumeUntilDone(t, mp, run, metric, mp.Run(run, metric))
		// A verdict on all its requests (the SLO is not what this tests:
		// under -race the loopback server may miss it), not a stop.
		if m.Phase == v1alpha1.AnalysisPhaseError || strings.Contains(m.Message, "stopped") || srv.Load() < 600 {
			t.Fatalf("measurement %s %q after %d requests; want a verdict after 600", m.Phase, m.Message, srv.Load())
		}
	})
}
