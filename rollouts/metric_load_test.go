package rollouts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func analysisRunFor(uid string) *v1alpha1.AnalysisRun {
	return &v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Name: "pre-promotion", Namespace: "default", UID: types.UID(uid)}}
}

func loadMetric(url, load string) v1alpha1.Metric {
	return latencyMetric("load-test", fmt.Sprintf(`{"source": "load",
	  "load": {"urls": [%q], "healthPath": "/healthz", "warmUp": false, %s},
	  "slo": {"p99": "30ms", "maxErrorRate": "1%%"}}`, url, load))
}

// resumeUntilDone plays Argo's part: Resume the Running measurement until it
// completes, checking that every Running answer asks to be resumed.
func resumeUntilDone(t *testing.T, mp rpc.MetricProviderPlugin, run *v1alpha1.AnalysisRun, metric v1alpha1.Metric, m v1alpha1.Measurement) v1alpha1.Measurement {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for m.Phase == v1alpha1.AnalysisPhaseRunning {
		if m.ResumeAt == nil || m.FinishedAt != nil {
			t.Fatalf("running measurement without resumeAt or with finishedAt: %+v", m)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after a minute: %s", m.Message)
		}
		time.Sleep(50 * time.Millisecond)
		m = mp.Resume(run, metric, m)
	}
	return m
}

func TestLoadMeasurementThroughRPC(t *testing.T) {
	good := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	slow := testutil.NewColdServer(t, testutil.Flat(40*time.Millisecond))
	good.HealthPath, slow.HealthPath = "/healthz", "/healthz"
	mp, _ := dispenseLatency(t, time.Now())

	for _, tc := range []struct {
		srv  *testutil.ColdServer
		want v1alpha1.AnalysisPhase
	}{{good, v1alpha1.AnalysisPhaseSuccessful}, {slow, v1alpha1.AnalysisPhaseFailed}} {
		run, metric := analysisRunFor("uid-"+string(tc.want)), loadMetric(tc.srv.URL, `"count": 600, "qps": 300, "connections": 16`)
		m := mp.Run(run, metric)
		if m.Phase != v1alpha1.AnalysisPhaseRunning || !strings.Contains(m.Message, "load test started") {
			t.Fatalf("Run: %s %q; want Running, the load test started", m.Phase, m.Message)
		}
		m = resumeUntilDone(t, mp, run, metric, m)
		if m.Phase != tc.want || m.FinishedAt == nil || m.Metadata["canaryP99Ms"] == "" {
			t.Fatalf("measurement %s (%s), metadata %v; want %s with the figures", m.Phase, m.Message, m.Metadata, tc.want)
		}
		if tc.srv.Unmarked() != 0 || tc.srv.Load() < 600 {
			t.Fatalf("server saw %d requests, %d unmarked; want ≥ 600, all marked", tc.srv.Load(), tc.srv.Unmarked())
		}
		t.Logf("%s: %s", m.Phase, m.Message)
		// A completed measurement stays as it is.
		if again := mp.Resume(run, metric, m); again.Phase != m.Phase || again.Message != m.Message {
			t.Fatalf("Resume of a completed measurement changed it: %s → %s", m.Phase, again.Phase)
		}
	}
}

func TestLoadMeasurementTerminateStopsLoad(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	srv.HealthPath = "/healthz"
	mp, _ := dispenseLatency(t, time.Now())
	run, metric := analysisRunFor("uid-terminate"), loadMetric(srv.URL, `"duration": "5m", "deadline": "10m", "qps": 200`)
	m := mp.Run(run, metric)
	waitLoad(t, srv, 100)
	start := time.Now()
	m = mp.Terminate(run, metric, m)
	took := time.Since(start)
	if m.Phase != v1alpha1.AnalysisPhaseInconclusive || took > time.Second {
		t.Fatalf("Terminate: %s after %s; want Inconclusive within a second", m.Phase, took)
	}
	assertLoadStopped(t, srv)
	if m = mp.Resume(run, metric, m); m.Phase != v1alpha1.AnalysisPhaseInconclusive {
		t.Fatalf("Resume after Terminate: %s", m.Phase)
	}
}

func TestLoadMeasurementGarbageCollectStopsLoadOfAFinishedRun(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	srv.HealthPath = "/healthz"
	mp, _ := dispenseLatency(t, time.Now())
	run, metric := analysisRunFor("uid-gc"), loadMetric(srv.URL, `"duration": "5m", "deadline": "10m", "qps": 200`)
	mp.Run(run, metric)
	waitLoad(t, srv, 100)
	// While the run goes on, trimming old measurements leaves the load alone.
	if e := mp.GarbageCollect(run, metric, 10); e.HasError() {
		t.Fatal(e)
	}
	n := srv.Load()
	waitLoad(t, srv, n+50)
	run.Status.Phase = v1alpha1.AnalysisPhaseFailed
	if e := mp.GarbageCollect(run, metric, 10); e.HasError() {
		t.Fatal(e)
	}
	assertLoadStopped(t, srv)
}

// A plugin process that restarts mid-measurement has lost the load: the
// next Resume is an Error naming that, never Running for ever.
func TestLoadMeasurementAfterPluginRestart(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	srv.HealthPath = "/healthz"
	first, _ := dispenseLatency(t, time.Now())
	run, metric := analysisRunFor("uid-restart"), loadMetric(srv.URL, `"duration": "2s", "qps": 50`)
	m := first.Run(run, metric)
	restarted, _ := dispenseLatency(t, time.Now())
	m = restarted.Resume(run, metric, m)
	if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, "plugin process restarted") {
		t.Fatalf("Resume in a new process: %s %q; want Error naming the restart", m.Phase, m.Message)
	}
}

func waitLoad(t *testing.T, srv *testutil.ColdServer, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for srv.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d load requests in 20s; want %d", srv.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func assertLoadStopped(t *testing.T, srv *testutil.ColdServer) {
	t.Helper()
	n := srv.Load()
	time.Sleep(300 * time.Millisecond)
	if m := srv.Load(); m != n {
		t.Fatalf("load went on after it was stopped: %d → %d requests", n, m)
	}
}
