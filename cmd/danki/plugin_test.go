package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/plugin/rpc"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	steprpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	routerrpc "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/rollouts"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// buildDanki builds the danki binary the way the controller runs it.
func buildDanki(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts the danki binary (skipped with -short)")
	}
	bin := filepath.Join(t.TempDir(), "danki")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestPluginBinaryServesAllThreeKinds starts the real binary as the Argo
// Rollouts controller does (go-plugin, Argo's handshake and plugin types) once
// per kind and talks to each plugin over net/rpc.
func TestPluginBinaryServesAllThreeKinds(t *testing.T) {
	bin := buildDanki(t)
	// A kubeconfig that parses but points nowhere: InitPlugin builds clients
	// without connecting.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}

	dispense := func(t *testing.T, kind, key string, p goplugin.Plugin) any {
		return startPlugin(t, bin, kubeconfig, kind, key, p, "plugin")
	}

	t.Run("step", func(t *testing.T) {
		p := dispense(t, rollouts.KindStep, "RpcStepPlugin", &steprpc.RpcStepPlugin{}).(steprpc.StepPlugin)
		if err := p.InitPlugin(); err.HasError() {
			t.Fatalf("InitPlugin: %v", err)
		}
		if got := p.Type(); got != "danki/warmup" {
			t.Fatalf("Type() = %q, want danki/warmup", got)
		}
	})
	t.Run("trafficrouter", func(t *testing.T) {
		p := dispense(t, rollouts.KindTrafficRouter, "RpcTrafficRouterPlugin", &routerrpc.RpcTrafficRouterPlugin{}).(routerrpc.TrafficRouterPlugin)
		if err := p.InitPlugin(); err.HasError() {
			t.Fatalf("InitPlugin: %v", err)
		}
		if got := p.Type(); got != "danki/istio" {
			t.Fatalf("Type() = %q, want danki/istio", got)
		}
	})
	t.Run("metricprovider", func(t *testing.T) {
		p := dispense(t, rollouts.KindMetricProvider, "RpcMetricProviderPlugin", &rpc.RpcMetricProviderPlugin{}).(rpc.MetricProviderPlugin)
		if err := p.InitPlugin(); err.HasError() {
			t.Fatalf("InitPlugin: %v", err)
		}
		if got := p.Type(); got != "danki/latency" {
			t.Fatalf("Type() = %q, want danki/latency", got)
		}
		// A measurement against a Prometheus that is not there is an Error
		// naming it, never a pass.
		metric := v1alpha1.Metric{Name: "latency", Provider: v1alpha1.MetricProvider{Plugin: map[string]json.RawMessage{
			"danki/latency": json.RawMessage(`{"source":"envoy","window":"5m","prometheus":{"address":"http://127.0.0.1:1"},"envoy":{"canaryCluster":"c","stableCluster":"s"},"slo":{"p99":"250ms"}}`),
		}}}
		m := p.Run(&v1alpha1.AnalysisRun{}, metric)
		if m.Phase != v1alpha1.AnalysisPhaseError || !strings.Contains(m.Message, "127.0.0.1:1") {
			t.Fatalf("Run against an absent Prometheus: phase %s message %q, want Error naming 127.0.0.1:1", m.Phase, m.Message)
		}
	})
}

// TestPluginStopsOnSIGTERM: a plugin process ends on SIGTERM, as the
// controller's children must when the controller (or the lab) stops them.
func TestPluginStopsOnSIGTERM(t *testing.T) {
	bin := buildDanki(t)
	cmd := exec.Command(bin, "plugin")
	cmd.Env = append(os.Environ(), "ARGO_ROLLOUTS_RPC_PLUGIN="+rollouts.KindStep, "PLUGIN_MIN_PORT=10000", "PLUGIN_MAX_PORT=25000", "PLUGIN_PROTOCOL_VERSIONS=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// go-plugin's handshake line on stdout says the server is up.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "1|1|") {
		t.Fatalf("plugin handshake: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("danki plugin still running 10 s after SIGTERM")
	}
}

func TestPluginCommandRefusesWithoutController(t *testing.T) {
	bin := buildDanki(t)
	cmd := exec.Command(bin, "plugin")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("danki plugin without the handshake variable succeeded: %s", out)
	}
	if !strings.Contains(string(out), "ARGO_ROLLOUTS_RPC_PLUGIN") || !strings.Contains(string(out), "argo-rollouts-config") {
		t.Fatalf("danki plugin error %q does not name the variable and the ConfigMap", out)
	}
}

// TestPluginServesItsMetrics starts the real binary as the controller starts
// a danki/latency entry with --metrics-address: go-plugin's handshake on
// stdout still works (the endpoint never writes there), and after a
// measurement against an absent Prometheus the endpoint counts its Error
// verdict and the unreachable query.
func TestPluginServesItsMetrics(t *testing.T) {
	bin := buildDanki(t)
	l := testutil.ListenLoopback(t)
	addr := l.Addr().String()
	_ = l.Close()
	raw := startPlugin(t, bin, filepath.Join(t.TempDir(), "none"), rollouts.KindMetricProvider, "RpcMetricProviderPlugin", &rpc.RpcMetricProviderPlugin{},
		"plugin", "--metrics-address", addr, "--prometheus", "http://127.0.0.1:1")
	p := raw.(rpc.MetricProviderPlugin)
	metric := v1alpha1.Metric{Name: "latency", Provider: v1alpha1.MetricProvider{Plugin: map[string]json.RawMessage{
		"danki/latency": json.RawMessage(`{"source":"envoy","window":"5m","prometheus":{"address":"http://127.0.0.1:1"},"envoy":{"canaryCluster":"c","stableCluster":"s"},"slo":{"p99":"250ms"}}`),
	}}}
	if m := p.Run(&v1alpha1.AnalysisRun{}, metric); m.Phase != v1alpha1.AnalysisPhaseError {
		t.Fatalf("Run against an absent Prometheus: %s %q", m.Phase, m.Message)
	} else if !strings.Contains(m.Message, "unreachable") {
		t.Fatalf("Run against an absent Prometheus: %q does not say it is unreachable", m.Message)
	}
	s := testutil.ScrapeMetrics(t, "http://"+addr+"/metrics")
	if got := s.MustValue(t, "danki_plugin_analysis_verdicts_total", "phase", "error"); got != 1 {
		t.Errorf("danki_plugin_analysis_verdicts_total{phase=error} = %v, want 1", got)
	}
	queries := s.MustValue(t, "danki_plugin_prometheus_queries_total")
	if got := s.MustValue(t, "danki_plugin_prometheus_query_errors_total", "kind", "unreachable"); got == 0 || got != queries {
		t.Errorf("danki_plugin_prometheus_query_errors_total{kind=unreachable} = %v of %v queries; want all of them", got, queries)
	}
	if _, ok := s.Value("process_start_time_seconds"); !ok {
		t.Error("no process metrics on the plugin's endpoint")
	}
	// danki_build_info names the version the binary prints.
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("danki --version: %v", err)
	}
	version := strings.Fields(string(out))[1] // danki <version> (<go>, <os/arch>)
	if got := s.MustValue(t, "danki_build_info", "version", version, "goversion", runtime.Version()); got != 1 {
		t.Errorf("danki_build_info{version=%q} = %v, want 1", version, got)
	}
}

// startPlugin starts bin with args as the Argo controller starts a plugin of
// kind (go-plugin, Argo's handshake), with KUBECONFIG=kubeconfig, and
// dispenses key. The process is killed when the test ends.
func startPlugin(t *testing.T, bin, kubeconfig, kind, key string, p goplugin.Plugin, args ...string) any {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: rollouts.ProtocolVersion, MagicCookieKey: rollouts.MagicCookieKey, MagicCookieValue: kind},
		Plugins:         map[string]goplugin.Plugin{key: p},
		Cmd:             cmd,
		Stderr:          &stderr,
		Logger:          hclog.NewNullLogger(),
	})
	t.Cleanup(client.Kill)
	conn, err := client.Client()
	if err != nil {
		t.Fatalf("start danki %v as %s: %v\nstderr: %s", args, kind, err, stderr.String())
	}
	raw, err := conn.Dispense(key)
	if err != nil {
		t.Fatalf("dispense %s: %v", key, err)
	}
	return raw
}
