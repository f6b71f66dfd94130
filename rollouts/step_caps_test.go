package rollouts

import (
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"

	"github.com/danki-dev/danki/pkg/policy"
)

// TestWarmupStepTenantPolicyOverRPC: through the real plugin RPC, a
// tenant's step config is bound by the operator's policy — caps, explicit
// URLs, files — and the load's connections are checked on the address
// actually dialled ("localhost" is an allowed name but resolves to
// loopback).
func TestWarmupStepTenantPolicyOverRPC(t *testing.T) {
	srv := newStepLoadServer(t, stepDecay)
	u, _ := url.Parse(srv.URL)
	pol := policy.Policy{Network: policy.Network{AllowHosts: []string{"localhost"}}}
	p := warmupStepClient(t, newWarmupStep(slog.New(slog.NewTextHandler(io.Discard, nil)), pol))

	refused := map[string]map[string]any{
		"connections: 5000 is above the operator's cap of 64": {"connections": 5000},
		"is link-local": {"urls": []string{"http://169.254.169.254:80"}},
		"is outside the targets the operator allows":                                              {"urls": []string{"http://10.9.9.9:80"}},
		"grpcDescriptorSet: \"/var/run/secrets/kubernetes.io/serviceaccount/token\" names a file": {"grpcDescriptorSet": "/var/run/secrets/kubernetes.io/serviceaccount/token", "requests": []map[string]any{{"grpc": map[string]any{"method": "a.B/C"}}}},
		"X-HTTP-Method-Override makes many servers":                                               {"requests": []map[string]any{{"path": "/", "headers": map[string]string{"X-HTTP-Method-Override": "DELETE"}}}},
	}
	for want, extra := range refused {
		cfg := warmupConfigJSON(t, nil, extra)
		res, rerr := p.Run(stepRollout("cart", "h1", 0), &types.RpcStepContext{PluginName: WarmupPluginName, Config: cfg})
		if rerr.HasError() || res.Phase != types.PhaseFailed || !strings.Contains(res.Message, want) {
			t.Errorf("%s: %s %q (%v), want Failed naming %q", extra, res.Phase, res.Message, rerr, want)
		}
	}

	cfg := warmupConfigJSON(t, []string{"http://localhost:" + u.Port()}, map[string]any{"healthTimeout": "1s"})
	res, _ := runStepUntilDone(t, p, stepRollout("cart", "h2", 0), cfg, nil, 30*time.Second)
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "loopback") {
		t.Errorf("localhost under a tenant policy: %s %q, want the dial refused as loopback", res.Phase, res.Message)
	}
	if n := srv.All(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}
