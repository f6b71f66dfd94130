package gate

import (
	"testing"

	"github.com/danki-dev/danki/pkg/policy"
)

// FuzzParseConfig: a pod's annotation (any tenant's) never panics the gate,
// and whatever it accepts is within the operator's caps; seeds are
// docs/gate.md's examples.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"true", "false", "", "{}",
		"qps: 50\nonFailure: becomeReady\nretries: 1\nport: http\n",
		`{"healthPath": "/healthz", "qps": 200, "retries": 2, "retryBackoff": "1s", "onFailure": "stayUnready"}`,
		"cpuBudget: 50%\nyieldCPU: fromStart\n",
		"requests:\n- path: /api/products/{{randInt 1 20000}}\n  weight: 6\nmaxRequests: 3000\n",
		`{"retries": 1000000, "qps": 1e9, "connections": 100000, "grpcDescriptorSet": "/var/run/secrets/kubernetes.io/serviceaccount/token"}`,
	} {
		f.Add(seed)
	}
	var p policy.Policy // the strictest: the gate's default
	l := p.Limits.WithDefaults()
	f.Fuzz(func(t *testing.T, annotation string) {
		c, err := ParseConfig(annotation, p)
		if err != nil {
			return
		}
		switch {
		case c.Retries < 1 || c.Retries > l.Retries:
			t.Fatalf("retries %d outside 1..%d", c.Retries, l.Retries)
		case c.QPS > l.QPS || c.StartQPS > l.QPS:
			t.Fatalf("qps %g/%g above the cap %g", c.QPS, c.StartQPS, l.QPS)
		case c.Connections > l.Connections:
			t.Fatalf("connections %d above the cap %d", c.Connections, l.Connections)
		case c.MaxRequests > l.Requests || c.MinRequests > l.Requests:
			t.Fatalf("requests %d/%d above the cap %d", c.MinRequests, c.MaxRequests, l.Requests)
		case c.Deadline.D() > l.Deadline || c.HealthTimeout.D() > l.HealthTimeout || c.Timeout.D() > l.Timeout:
			t.Fatalf("durations %s/%s/%s above the caps", c.Deadline, c.HealthTimeout, c.Timeout)
		case c.GRPCDescriptorSet != "":
			t.Fatalf("a pod's descriptor set accepted: %q", c.GRPCDescriptorSet)
		case c.Policy == nil || c.Policy.LocalFiles:
			t.Fatalf("the parsed config lost the policy: %+v", c.Policy)
		}
	})
}
