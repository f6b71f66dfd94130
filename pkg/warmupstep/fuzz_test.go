package warmupstep

import (
	"encoding/json"
	"testing"

	"github.com/danki-dev/danki/pkg/policy"
)

// FuzzParseStepConfig: a tenant's step config (a Rollout's) never panics
// the plugin, and whatever it accepts is within the operator's caps and
// names no file; seeds are docs/warmup.md's examples.
func FuzzParseStepConfig(f *testing.F) {
	for _, seed := range []string{
		"",
		"null",
		`{}`,
		// docs/warmup.md, Step plugin
		"port: http\nhealthPath: /actuator/health/readiness\nrequests:\n- path: /api/products/{{randInt 1 20000}}\n  weight: 6\n- path: /api/search?q={{pick \"shoes\" \"coat\" | urlquery}}\n  weight: 3\ncompareToStable: true\n",
		// docs/warmup.md, gRPC
		"port: grpc\nhealthService: shop.Catalog\nrequests:\n- grpc:\n    method: shop.Catalog/GetItem\n    message: '{\"id\": \"{{randInt 1 20000}}\"}'\n    metadata: {x-tenant: '{{pick \"eu\" \"us\"}}'}\n  weight: 6\ngrpcSafeMethods: [shop.Catalog/Search]\nqps: 50\nconnections: 4\n",
		`{"qps": 1e308, "connections": 9999999, "maxRequests": 9223372036854775807, "deadline": "9999h"}`,
		`{"urls": ["http://169.254.169.254"], "grpcDescriptorSet": "/dev/zero"}`,
		`{"allowSideEffects": true, "markerHeader": "X-Other", "requests": [{"method": "POST", "path": "/?_method=DELETE", "body": "{{randInt 9 1}}"}]}`,
		`{"untilConverged": false, "maxRequests": 1, "connections": 64, "startQPS": -1}`,
	} {
		f.Add([]byte(seed))
	}
	for text := range hostileTemplates { // hostile_template_test.go
		seed, _ := json.Marshal(map[string]any{"requests": []any{map[string]string{"path": text}}})
		f.Add(seed)
	}
	tenant := policy.Policy{Network: policy.Network{AllowHosts: []string{"cart.shop"}}}
	l := tenant.Limits.WithDefaults()
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseStepConfig(raw, tenant)
		if err != nil {
			return
		}
		switch {
		case c.QPS > l.QPS || c.StartQPS > l.QPS || c.StableQPS > l.QPS:
			t.Fatalf("qps %g/%g/%g above the cap %g", c.QPS, c.StartQPS, c.StableQPS, l.QPS)
		case c.Connections > l.Connections || c.Connections < 1:
			t.Fatalf("connections %d outside 1..%d", c.Connections, l.Connections)
		case c.MaxRequests > l.Requests || c.MinRequests > l.Requests:
			t.Fatalf("requests %d/%d above the cap %d", c.MinRequests, c.MaxRequests, l.Requests)
		case c.Deadline.D() > l.Deadline || c.HealthTimeout.D() > l.HealthTimeout || c.Timeout.D() > l.Timeout:
			t.Fatalf("durations %s/%s/%s above the caps", c.Deadline, c.HealthTimeout, c.Timeout)
		case c.GRPCDescriptorSet != "":
			t.Fatalf("a tenant's descriptor set accepted: %q", c.GRPCDescriptorSet)
		case c.Policy == nil || c.Policy.LocalFiles:
			t.Fatalf("the parsed config lost the tenant's policy: %+v", c.Policy)
		}
		for _, u := range append(append([]string(nil), c.URLs...), c.StableURLs...) {
			if err := tenant.Network.CheckURL("urls", u); err != nil {
				t.Fatalf("URL outside the allow-list accepted: %v", err)
			}
		}
		if err := c.Config.Validate(); err != nil {
			t.Fatalf("accepted, but its Config does not validate again: %v", err)
		}
	})
}
