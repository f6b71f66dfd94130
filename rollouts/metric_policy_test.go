package rollouts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/pkg/policy"
	goplugin "github.com/hashicorp/go-plugin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// These tests drive the danki/latency plugin through the real plugin RPC
// under a tenant policy (the operator's --prometheus and --allow-target):
// an AnalysisTemplate is a tenant's, and must not make the controller send
// its own files or reach what the operator did not allow.

// dispenseTenantLatency serves the metric provider built with pol (as
// `danki plugin` builds it) over go-plugin's net/rpc connection; kube, when
// not nil, is the plugin's Kubernetes client.
func dispenseTenantLatency(t *testing.T, now time.Time, pol policy.Policy, kube kubernetes.Interface) rpc.MetricProviderPlugin {
	t.Helper()
	plugin := factories[KindMetricProvider].build(quietLog, pol, nil)
	impl := plugin.(*rpc.RpcMetricProviderPlugin).Impl.(*latencyProvider)
	impl.now = func() time.Time { return now }
	if kube != nil {
		impl.kube = func() (kubernetes.Interface, error) { return kube, nil }
	}
	client, _ := goplugin.TestPluginRPCConn(t, map[string]goplugin.Plugin{"RpcMetricProviderPlugin": plugin}, nil)
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense("RpcMetricProviderPlugin")
	if err != nil {
		t.Fatal(err)
	}
	mp := raw.(rpc.MetricProviderPlugin)
	if e := mp.InitPlugin(); e.HasError() {
		t.Fatal(e)
	}
	return mp
}

// controllerToken writes a stand-in for the controller's ServiceAccount
// token: a file on the plugin's machine.
func controllerToken(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("controller-sa-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tenantRun(ns string) *v1alpha1.AnalysisRun {
	started := metav1.NewTime(time.Date(2025, 6, 1, 11, 55, 0, 0, time.UTC))
	return &v1alpha1.AnalysisRun{ObjectMeta: metav1.ObjectMeta{Name: "app-7d9f-2", Namespace: ns},
		Status: v1alpha1.AnalysisRunStatus{StartedAt: &started}}
}

func promBlock(address, extra string) string {
	return `{"source":"istio","prometheus":{"address":"` + address + `"` + extra + `},
	  "istio":{"canary":{"service":"app-canary.default.svc.cluster.local"},"stable":{"service":"app-stable.default.svc.cluster.local"}},
	  "slo":{"p99":"250ms","maxErrorRate":"1%"}}`
}

// TestTenantPrometheusRefusesControllerFilesThroughRPC is the reproduced
// case: prometheus.bearerTokenFile named the controller's token, and the
// plugin sent it as "Authorization: Bearer" to whatever prometheus.address
// said.
func TestTenantPrometheusRefusesControllerFilesThroughRPC(t *testing.T) {
	evil := latencyProm(t)    // records every Authorization header
	allowed := latencyProm(t) // the operator's Prometheus
	token := controllerToken(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	pol := policy.Policy{Prometheus: []policy.Prometheus{{Address: allowed.URL}}}
	mp := dispenseTenantLatency(t, now, pol, nil)

	for _, tc := range []struct {
		name, config string
		phase        v1alpha1.AnalysisPhase
		want         []string
	}{
		{"token file to any server", promBlock(evil.URL, `,"bearerTokenFile":"`+token+`"`), v1alpha1.AnalysisPhaseError,
			[]string{"prometheus.bearerTokenFile", "bearerTokenSecret", "prometheus.address", evil.URL, allowed.URL}},
		{"token file to the allowed server", promBlock(allowed.URL, `,"bearerTokenFile":"`+token+`"`), v1alpha1.AnalysisPhaseError,
			[]string{"prometheus.bearerTokenFile", "bearerTokenSecret", "--prometheus"}},
		{"CA file", promBlock(allowed.URL, `,"caFile":"`+token+`"`), v1alpha1.AnalysisPhaseError,
			[]string{"prometheus.caFile", "--prometheus"}},
		{"address outside the allow-list", promBlock(evil.URL, ""), v1alpha1.AnalysisPhaseError,
			[]string{"prometheus.address", evil.URL, "is not a Prometheus the operator allows", allowed.URL}},
		{"inline token to the allowed server", promBlock(allowed.URL, `,"bearerToken":"tenant-token"`), v1alpha1.AnalysisPhaseSuccessful, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mp.Run(tenantRun("shop"), latencyMetric("latency", tc.config))
			if m.Phase != tc.phase {
				t.Fatalf("phase %s, want %s: %s", m.Phase, tc.phase, m.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(m.Message, w) {
					t.Errorf("message %q does not contain %q", m.Message, w)
				}
			}
		})
	}
	if n := len(evil.Queries()); n != 0 {
		t.Errorf("the server outside the allow-list got %d queries (Authorization %q), want none", n, evil.Authorizations())
	}
	for _, a := range allowed.Authorizations() {
		if strings.Contains(a, "controller-sa-token") {
			t.Fatalf("the controller's token was sent: %q", a)
		}
		if a != "Bearer tenant-token" {
			t.Errorf("Authorization %q, want only the tenant's inline token", a)
		}
	}
}

// TestTenantPrometheusUsesTheOperatorsCredentials: an allowed address gets
// the operator's token (--prometheus ADDRESS,bearerTokenFile=PATH), and
// only that address.
func TestTenantPrometheusUsesTheOperatorsCredentials(t *testing.T) {
	allowed := latencyProm(t)
	token := controllerToken(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	prom, err := policy.ParsePrometheus(allowed.URL + "/,bearerTokenFile=" + token)
	if err != nil {
		t.Fatal(err)
	}
	mp := dispenseTenantLatency(t, now, policy.Policy{Prometheus: []policy.Prometheus{prom}}, nil)
	m := mp.Run(tenantRun("shop"), latencyMetric("latency", promBlock(allowed.URL, "")))
	if m.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("phase %s: %s", m.Phase, m.Message)
	}
	auth := allowed.Authorizations()
	if len(auth) == 0 || auth[0] != "Bearer controller-sa-token" {
		t.Fatalf("Authorization %q, want the operator's token", auth)
	}
}

// TestTenantPrometheusBearerTokenSecretFromTheRunsNamespace: the Secret is
// read from the AnalysisRun's namespace, never another one.
func TestTenantPrometheusBearerTokenSecretFromTheRunsNamespace(t *testing.T) {
	allowed := latencyProm(t)
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	secret := func(ns, token string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom-token", Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}}
	}
	kube := kubefake.NewClientset(secret("shop", "shop-token"), secret("kube-system", "admin-token"))
	mp := dispenseTenantLatency(t, now, policy.Policy{Prometheus: []policy.Prometheus{{Address: allowed.URL}}}, kube)
	metric := latencyMetric("latency", promBlock(allowed.URL, `,"bearerTokenSecret":{"name":"prom-token","key":"token"}`))

	m := mp.Run(tenantRun("shop"), metric)
	if m.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("phase %s: %s", m.Phase, m.Message)
	}
	auth := allowed.Authorizations()
	if len(auth) == 0 {
		t.Fatal("no request")
	}
	for _, a := range auth {
		if a != "Bearer shop-token" {
			t.Fatalf("Authorization %q, want the shop namespace's Secret", a)
		}
	}
	// The same template run in a namespace without the Secret: an Error,
	// and no other namespace's Secret is looked at.
	kube.ClearActions()
	m = mp.Run(tenantRun("payments"), metric)
	if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, "prometheus.bearerTokenSecret") || !strings.Contains(m.Message, "payments/prom-token") {
		t.Fatalf("phase %s %q, want an Error naming prometheus.bearerTokenSecret and payments/prom-token", m.Phase, m.Message)
	}
	for _, a := range kube.Actions() {
		if a.GetNamespace() != "payments" {
			t.Errorf("read %s %s in namespace %q, want only the run's namespace", a.GetVerb(), a.GetResource().Resource, a.GetNamespace())
		}
	}
	if n := len(allowed.Authorizations()); n != len(auth) {
		t.Errorf("%d more queries without the Secret, want none", n-len(auth))
	}
}

// TestTenantLoadNamespacePinnedThroughRPC: load.namespace may only be the
// AnalysisRun's own (the controller can list pods everywhere).
func TestTenantLoadNamespacePinnedThroughRPC(t *testing.T) {
	kube := kubefake.NewClientset()
	mp := dispenseTenantLatency(t, time.Now(), policy.Policy{}, kube)
	metric := latencyMetric("load-test", `{"source":"load","load":{"service":"payments-api","namespace":"payments","warmUp":false},"slo":{"p99":"30ms"}}`)
	m := mp.Run(analysisRunFor("uid-pin"), metric)
	if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, "load.namespace") || !strings.Contains(m.Message, `"payments"`) || !strings.Contains(m.Message, `"default"`) {
		t.Fatalf("phase %s %q, want an Error naming load.namespace, payments and the run's default", m.Phase, m.Message)
	}
	if a := kube.Actions(); len(a) != 0 {
		t.Fatalf("the plugin called the API server: %v", a)
	}
}

// TestTenantLoadURLsCheckedThroughRPC: load.urls must be within the
// operator's --allow-target; the caps hold.
func TestTenantLoadURLsCheckedThroughRPC(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mu.Lock(); hits++; mu.Unlock() }))
	t.Cleanup(srv.Close)
	mp := dispenseTenantLatency(t, time.Now(), policy.Policy{Network: policy.Network{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}, nil)
	for _, tc := range []struct{ load, want string }{
		{`"urls":["` + srv.URL + `"]`, "load.urls[0]"},
		{`"urls":["http://10.0.0.5:8080"],"stableURLs":["http://169.254.169.254"]`, "load.stableURLs[0]"},
		{`"urls":["http://10.0.0.5:8080"],"deadline":"5h"`, "--max-deadline"},
		{`"urls":["http://10.0.0.5:8080"],"qps":5000`, "--max-qps"},
	} {
		m := mp.Run(analysisRunFor("uid-urls"), latencyMetric("load-test", `{"source":"load","load":{`+tc.load+`,"warmUp":false},"slo":{"p99":"30ms"}}`))
		if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, tc.want) {
			t.Errorf("%s: phase %s %q, want an Error naming %s", tc.load, m.Phase, m.Message, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Fatalf("the loopback server got %d requests", hits)
	}
}

// TestTenantFortioThroughRPC: fortio result paths are the controller's
// files; URLs are checked and dialled under the network policy.
func TestTenantFortioThroughRPC(t *testing.T) {
	token := controllerToken(t)
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mu.Lock(); hits++; mu.Unlock() }))
	t.Cleanup(srv.Close)
	mp := dispenseTenantLatency(t, time.Now(), policy.Policy{Network: policy.Network{AllowHosts: []string{"localhost"}}}, nil)
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, tc := range []struct{ canary, want string }{
		{token, "fortio.canary"},
		{srv.URL + "/result.json", "fortio.canary"},
		// Allowed by name, but it resolves to loopback: refused at dial.
		{"http://localhost" + port + "/result.json", "loopback"},
	} {
		m := mp.Run(tenantRun("shop"), latencyMetric("latency", `{"source":"fortio","fortio":{"canary":"`+tc.canary+`"},"slo":{"p99":"30ms"}}`))
		if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, tc.want) || strings.Contains(m.Message, "controller-sa-token") {
			t.Errorf("%s: phase %s %q, want an Error naming %s", tc.canary, m.Phase, m.Message, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Fatalf("the loopback server got %d requests", hits)
	}
}

var _ = context.Background
