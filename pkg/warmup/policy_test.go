package warmup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// countingServer counts the warm-up requests (not the health checks, nor
// the JIT signal's reads of the metrics page: it has none) it gets, each
// held for hold so connections overlap.
func countingServer(t *testing.T, hold time.Duration) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		if testutil.IsJITPage(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		n.Add(1)
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestMaxRequestsIsAHardCap: with connections ≫ maxRequests, exactly
// maxRequests requests arrive. It used to be checked as requests
// completed, so every connection had one in flight by then (`danki
// warmup --connections 5000 --max-requests 1` sent 5,000).
func TestMaxRequestsIsAHardCap(t *testing.T) {
	srv, n := countingServer(t, 50*time.Millisecond)
	fixed := false
	cfg := Config{HealthPath: "/healthz", QPS: 500, StartQPS: 500, Connections: 60, MaxRequests: 3, UntilConverged: &fixed, Window: 10}
	res, err := Run(context.Background(), cfg, []Target{{Name: "t", URL: srv.URL}}, Options{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := n.Load(); got != 3 {
		t.Errorf("%d requests arrived with maxRequests 3 and 60 connections", got)
	}
	if got := res.Requests(); got != 3 {
		t.Errorf("the result counts %d requests, want 3", got)
	}
}

// tenant is a tenant's policy (not the command line's) for tests whose
// servers run on this machine.
func tenant(n policy.Network) *policy.Policy { return &policy.Policy{Network: n} }

func TestCapsRefusedNamingTheOperatorFlag(t *testing.T) {
	cases := map[string]string{
		`{"qps": 501}`:                                   "qps: 501 is above the operator's cap of 500; lower it (the operator sets the cap with --max-qps",
		`{"qps": 100, "startQPS": 600}`:                  "startQPS: 600 is above",
		`{"compareToStable": true, "stableQPS": 900}`:    "stableQPS: 900 is above",
		`{"connections": 5000}`:                          "connections: 5000 is above the operator's cap of 64; lower it (the operator sets the cap with --max-connections",
		`{"maxRequests": 200001}`:                        "maxRequests: 200001 is above the operator's cap of 200000; lower it (the operator sets the cap with --max-requests",
		`{"minRequests": 300000, "maxRequests": 300000}`: "minRequests: 300000 is above",
		`{"deadline": "2h"}`:                             "deadline: 2h0m0s is above the operator's cap of 1h0m0s; lower it (the operator sets the cap with --max-deadline",
		`{"healthTimeout": "31m"}`:                       "healthTimeout: 31m0s is above the operator's cap of 30m0s; lower it (the operator sets the cap with --max-health-timeout",
		`{"timeout": "2m"}`:                              "timeout: 2m0s is above the operator's cap of 1m0s; lower it (the operator sets the cap with --max-timeout",
	}
	for raw, want := range cases {
		// Under a tenant's policy and the command line's alike: the caps
		// catch typos such as --connections 5000.
		for _, p := range []policy.Policy{{}, policy.Local()} {
			if _, err := ParseStepConfig([]byte(raw), p); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s (local files %v): %v, want %q", raw, p.LocalFiles, err, want)
			}
		}
	}
	// The operator's own caps, and defaults that never exceed them.
	low := policy.Policy{Limits: policy.Limits{QPS: 5, Connections: 2, Requests: 1000, Deadline: time.Minute, Timeout: time.Second, HealthTimeout: time.Minute}}
	c, err := ParseStepConfig(nil, low)
	if err != nil {
		t.Fatalf("defaults under low caps: %v", err)
	}
	if c.QPS != 5 || c.Connections != 2 || c.MaxRequests != 1000 || c.Deadline.D() != time.Minute || c.Timeout.D() != time.Second || c.HealthTimeout.D() != time.Minute || c.StableQPS != 5 {
		t.Errorf("defaults under low caps: %+v", c.Config)
	}
	if c.Policy == nil || c.Policy.Limits.QPS != 5 {
		t.Errorf("the parsed config does not keep the policy: %+v", c.Policy)
	}
	if _, err := ParseStepConfig([]byte(`{"qps": 6}`), low); err == nil || !strings.Contains(err.Error(), "qps: 6 is above the operator's cap of 5") {
		t.Errorf("qps 6 under a cap of 5: %v", err)
	}
}

// TestDialRefusesLoopbackUnderATenantPolicy: the address actually
// connected to is checked, not the URL's text: "localhost" is an allowed
// host name, but it resolves to 127.0.0.1, which a tenant may not load.
func TestDialRefusesLoopbackUnderATenantPolicy(t *testing.T) {
	skipLongLoad(t, "two health waits that time out")
	srv, n := countingServer(t, 0)
	u, _ := url.Parse(srv.URL)
	local := "http://localhost:" + u.Port()
	raw := fmt.Sprintf(`{"urls": [%q], "healthPath": "/healthz", "healthTimeout": "1s", "untilConverged": false, "maxRequests": 5, "window": 10}`, local)

	c, err := ParseStepConfig([]byte(raw), *tenant(policy.Network{AllowHosts: []string{"localhost"}}))
	if err != nil {
		t.Fatalf("localhost is an allowed host name: %v", err)
	}
	targets, err := URLTargets("urls", c.URLs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), c.Config, targets, Options{})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("run against localhost under a tenant policy: %v, want the dial refused as loopback", err)
	}
	if got := n.Load(); got != 0 {
		t.Errorf("%d requests reached the server", got)
	}

	// The load itself dials through the same check (the health wait
	// passes here: the guard only refuses the load's connections).
	c.Config.Policy = tenant(policy.Network{AllowHosts: []string{"localhost"}, AllowLoopback: true})
	var health atomic.Bool
	c.Config.Guard = func(a netip.Addr) error {
		if health.Load() {
			return errors.New("not a pod of this rollout any more")
		}
		return nil
	}
	res, _ := Run(context.Background(), c.Config, targets, Options{OnProgress: func(p Progress) {
		if p.Phase == PhaseLoad {
			health.Store(true)
		}
	}})
	if res == nil || res.Targets[0].Errors != 5 || !strings.Contains(res.Targets[0].LastError, "not a pod of this rollout any more") {
		t.Errorf("guard refusing the load's connections: %+v", res)
	}
	if got := n.Load(); got != 0 {
		t.Errorf("%d requests reached the server past the guard", got)
	}

	// With AllowLoopback (a local lab), and no guard, it works.
	c.Config.Guard = nil
	res, err = Run(context.Background(), c.Config, targets, Options{})
	if err != nil || n.Load() != 5 {
		t.Errorf("with AllowLoopback: %v, %d requests\n%s", err, n.Load(), table(res))
	}
}

func TestGRPCDialRefusesLoopbackUnderATenantPolicy(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true)
	srv.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get"})
	cfg.Policy = tenant(policy.Network{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	cfg.Policy.Limits.QPS = fastPolicy.Limits.QPS
	cfg.HealthTimeout = config.Duration(time.Second)
	_, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("gRPC health check against 127.0.0.1 under a tenant policy: %v, want the dial refused as loopback", err)
	}
	if n := srv.HealthChecks.Load(); n != 0 {
		t.Errorf("%d health checks reached the server", n)
	}
	// The reflection client and the load's channels dial the same way.
	cfg.Policy.Network.AllowLoopback = true
	cfg.HealthTimeout = config.Duration(5 * time.Second)
	fixed := false
	cfg.UntilConverged, cfg.MaxRequests = &fixed, 20
	if _, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{}); err != nil {
		t.Errorf("with AllowLoopback: %v", err)
	}
}

// TestDescriptorSetFiles: a tenant may not name a file (the answer must
// not say whether it exists); the command line reads only a regular file,
// within the size cap.
func TestDescriptorSetFiles(t *testing.T) {
	dir := t.TempDir()
	exists := dir + "/set.pb"
	if err := os.WriteFile(exists, []byte("not a set"), 0o600); err != nil {
		t.Fatal(err)
	}
	msg := func(path string) string {
		raw := fmt.Sprintf(`{"grpcDescriptorSet": %q, "requests": [{"grpc": {"method": "a.B/C"}}]}`, path)
		_, err := ParseStepConfig([]byte(raw), policy.Policy{})
		if err == nil {
			t.Fatalf("%s accepted under a tenant policy", path)
		}
		return strings.ReplaceAll(err.Error(), path, "PATH")
	}
	a, b, c := msg(exists), msg(dir+"/missing.pb"), msg(dir)
	if a != b || b != c || !strings.Contains(a, "grpcDescriptorSet") || !strings.Contains(a, "reflection") {
		t.Errorf("tenant errors differ by the file's existence or lack the fix:\n%s\n%s\n%s", a, b, c)
	}

	for _, path := range []string{"/dev/zero", dir} {
		start := time.Now()
		_, err := readDescriptorSet(policy.Local(), path)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), "grpcDescriptorSet") {
			t.Errorf("%s: %v, want it refused as not a regular file", path, err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s: took %s", path, time.Since(start))
		}
	}
	big := policy.Local()
	big.Limits.FileBytes = 4
	if _, err := readDescriptorSet(big, exists); err == nil || !strings.Contains(err.Error(), "above the limit") {
		t.Errorf("a file above FileBytes: %v", err)
	}
	if _, err := readDescriptorSet(policy.Policy{}, exists); err == nil || !strings.Contains(err.Error(), "may not read") {
		t.Errorf("a tenant's descriptor set at run time: %v", err)
	}
}

func TestExplicitURLsWithinThePolicy(t *testing.T) {
	ten := policy.Policy{Network: policy.Network{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, AllowHosts: []string{"cart.shop"}}}
	for raw, want := range map[string]string{
		`{"urls": ["http://10.2.0.1:8080"]}`:                                        `urls[0]: "http://10.2.0.1:8080" is outside the targets the operator allows`,
		`{"stableURLs": ["http://10.1.0.1:80", "http://metadata.google.internal"]}`: `stableURLs[1]: "http://metadata.google.internal" is outside`,
		`{"urls": ["http://169.254.169.254"]}`:                                      "link-local",
		`{"urls": ["http://127.0.0.1:80"]}`:                                         "loopback",
	} {
		if _, err := ParseStepConfig([]byte(raw), ten); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
		if _, err := ParseStepConfig([]byte(raw), policy.Local()); err != nil {
			t.Errorf("%s on the command line: %v", raw, err)
		}
	}
	if _, err := ParseStepConfig([]byte(`{"urls": ["http://10.1.2.3:8080", "http://cart.shop:80"]}`), ten); err != nil {
		t.Errorf("allowed URLs refused: %v", err)
	}
}

func TestSideEffectsThroughTheBackDoorRefused(t *testing.T) {
	for raw, want := range map[string]string{
		`{"requests": [{"path": "/items/1", "headers": {"X-HTTP-Method-Override": "DELETE"}}]}`: "requests[0].headers: X-HTTP-Method-Override makes many servers treat the request as the method it names",
		`{"requests": [{"path": "/", "headers": {"x-http-method": "PUT"}}]}`:                    "requests[0].headers: x-http-method",
		`{"requests": [{"path": "/", "headers": {"X-Method-Override": "PATCH"}}]}`:              "requests[0].headers: X-Method-Override",
		`{"requests": [{"path": "/items/1?_method=DELETE"}]}`:                                   "requests[0].path: \"/items/1?_method=DELETE\" has a _method query parameter",
		`{"requests": [{"path": "/items?{{\"_method\"}}=delete"}]}`:                             "requests[0].path: \"/items?_method=delete\" has a _method query parameter",
		`{"requests": [{"path": "/", "body": "{\"delete\": true}"}]}`:                           "requests[0].body: a GET request with a body may be read as a write",
		`{"requests": [{"method": "OPTIONS", "path": "/", "body": "x"}]}`:                       "requests[0].body: a OPTIONS request with a body",
	} {
		_, err := ParseStepConfig([]byte(raw), policy.Policy{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "allowSideEffects") {
			t.Errorf("%s: %v, want %q and the fix", raw, err, want)
		}
		allowed := strings.Replace(raw, `{"requests"`, `{"allowSideEffects": true, "requests"`, 1)
		if _, err := ParseStepConfig([]byte(allowed), policy.Policy{}); err != nil {
			t.Errorf("with allowSideEffects: %s: %v", allowed, err)
		}
	}
}

func TestCustomMarkerWithSideEffectsStatedTwice(t *testing.T) {
	post := `"allowSideEffects": true, "requests": [{"method": "POST", "path": "/orders"}]`
	for raw, want := range map[string]string{
		`{` + post + `, "markerHeader": "X-Other"}`:                                   `markerHeader: "X-Other" with allowSideEffects: the application must check this header, not X-Danki-Warmup`,
		`{` + post + `, "markerHeader": "X-Other", "markerHeaderConfirm": "X-Othre"}`: "markerHeaderConfirm: X-Other (got \"X-Othre\")",
		`{"markerHeader": "X-Other", "markerHeaderConfirm": "X-Else"}`:                `markerHeaderConfirm: "X-Else" differs from markerHeader "X-Other"`,
	} {
		if _, err := ParseStepConfig([]byte(raw), policy.Policy{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	for _, raw := range []string{
		`{` + post + `, "markerHeader": "X-Other", "markerHeaderConfirm": "x-other"}`,
		`{` + post + `}`,
		`{"markerHeader": "X-Other"}`, // GET only: nothing to keep free of side effects
	} {
		if _, err := ParseStepConfig([]byte(raw), policy.Policy{}); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

func TestTemplatesRenderedAtValidation(t *testing.T) {
	for raw, want := range map[string]string{
		`{"requests": [{"path": "/{{randInt 5 1}}"}]}`:                                                         "requests[0].path: fails when rendered",
		`{"requests": [{"path": "/{{.Missing}}"}]}`:                                                            "requests[0].path: fails when rendered",
		`{"requests": [{"path": "/", "headers": {"X-Id": "{{pick}}"}}]}`:                                       "requests[0].headers: fails when rendered",
		`{"requests": [{"method": "POST", "path": "/", "body": "{{randInt 2 1}}"}], "allowSideEffects": true}`: "requests[0].body: fails when rendered",
		`{"requests": [{"path": "/{{\"%zz\"}}"}]}`:                                                             "requests[0].path: renders to \"/%zz\"",
		`{"requests": [{"grpc": {"method": "a.B/C", "message": "{{randInt 3 1}}"}}]}`:                          "requests[0].grpc.message: fails when rendered",
		`{"requests": [{"grpc": {"method": "a.B/C", "message": "{{\"x\"}}"}}]}`:                                "requests[0].grpc.message: renders to \"x\", which is not JSON",
	} {
		if _, err := ParseStepConfig([]byte(raw), policy.Policy{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}

// TestEveryRequestFailingToRenderFailsTheRun: a template that renders at
// validation but fails on every draw of the run (randInt over a range
// drawn itself) sends nothing; the run must fail, not report success.
func TestEveryRequestFailingToRenderFailsTheRun(t *testing.T) {
	srv, n := countingServer(t, 0)
	fixed := false
	cfg := Config{HealthPath: "/healthz", QPS: 200, StartQPS: 200, Connections: 1, MaxRequests: 6, UntilConverged: &fixed, Window: 10}
	// Each fails on half the draws, on opposite ones: the sample at
	// validation passes one of them.
	for _, path := range []string{"/{{randInt 1 (randInt 0 1)}}", "/{{randInt (randInt 0 1) 0}}"} {
		if cfg.Requests = []RequestSpec{{Path: path}}; cfg.WithDefaults().Validate() == nil {
			break
		}
	}
	cfg = cfg.WithDefaults()
	set, err := newRequestSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A seed whose stream (target 0, connection 0) fails all six draws.
	for seed := int64(1); ; seed++ {
		g := set.newGenerator(uint64(seed), 0, &atomic.Int64{})
		fails := 0
		for range 6 {
			if _, err := g.next(); err != nil {
				fails++
			}
		}
		if fails == 6 {
			cfg.Seed = seed
			break
		}
	}
	res, err := Run(context.Background(), cfg, []Target{{Name: "t", URL: srv.URL}}, Options{})
	if !errors.Is(err, ErrTemplate) || res == nil || res.Converged || !strings.Contains(res.Reason, "render request template") {
		t.Errorf("run with every request failing to render: %v (%+v)", err, res)
	}
	if got := n.Load(); got != 0 {
		t.Errorf("%d requests arrived", got)
	}
}
