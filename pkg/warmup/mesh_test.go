package warmup

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

var (
	dankiID = testutil.MeshSPIFFEID("danki-system", "danki")
	cartID  = testutil.MeshSPIFFEID("shop", "cart")
)

// meshPolicy is p with danki's Mesh in test mesh m (danki runs as
// danki-system/danki; the root from a file).
func meshPolicy(t *testing.T, m *testutil.Mesh, p policy.Policy) *policy.Policy {
	t.Helper()
	p.Mesh = mtls.NewMesh(mtls.MeshConfig{CAAddress: m.CAAddress, RootFile: m.RootFile(),
		Namespace: "danki-system", ServiceAccount: "danki", Client: m.Client})
	t.Cleanup(p.Mesh.Close)
	return &p
}

// meshPod is pod cart-1 of ServiceAccount cart in namespace shop, at addr
// (127.0.0.1:port), with Istio's sidecar label; its port is named name.
func meshPod(t *testing.T, addr, name string) *corev1.Pod {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-1", Labels: map[string]string{mtls.TLSModeLabel: mtls.TLSModeIstio}},
		Spec: corev1.PodSpec{ServiceAccountName: "cart", Containers: []corev1.Container{
			{Name: "app", Ports: []corev1.ContainerPort{{Name: name, ContainerPort: int32(n)}}},
			{Name: mtls.ProxyContainer},
		}},
		Status: corev1.PodStatus{PodIP: host},
	}
}

func podTarget(t *testing.T, p *corev1.Pod) Target {
	t.Helper()
	tg, err := PodTarget(p, intstr.IntOrString{})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// newStrictApp is an HTTP app behind a STRICT sidecar that is id: every
// path answers 200, or with deny every path but /healthz answers as
// Envoy's RBAC filter does when an AuthorizationPolicy denies the caller.
func newStrictApp(m *testutil.Mesh, id string, deny bool) *testutil.StrictPod {
	return m.StrictPod(id, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if deny && r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("RBAC: access denied"))
		}
	}))
}

func TestWarmupOverMTLSToAStrictPod(t *testing.T) {
	m := testutil.NewMesh(t)
	app := newStrictApp(m, cartID, false)
	cfg := fastConfig()
	// The command line's policy: no checked dialer is needed for the
	// network, but the pod's mTLS still goes through danki's own dial.
	cfg.Policy = meshPolicy(t, m, *fastPolicy)
	tg := podTarget(t, meshPod(t, app.Addr, "http"))

	res, err := Run(context.Background(), cfg, []Target{tg}, Options{})
	if err != nil {
		t.Fatalf("warm-up over mTLS: %v\n%s", err, table(res))
	}
	seen := app.Callers()
	if len(seen) != 1 || int64(seen[dankiID]) < res.Requests() {
		t.Errorf("the pod saw callers %v; want every request (%d) from %s", seen, res.Requests(), dankiID)
	}
	if got := app.Offered.Last(); len(got) == 0 || got[0] != "istio-http/1.1" {
		t.Errorf("ALPN offered %q; want istio-http/1.1 first", got)
	}
	if res.Mesh != dankiID || res.Targets[0].Target.Peer != cartID || tg.Peer != "" {
		t.Errorf("Result.Mesh %q, target's peer %q (caller's %q); want %s, %s and the caller's untouched", res.Mesh, res.Targets[0].Target.Peer, tg.Peer, dankiID, cartID)
	}
	if want := "over Istio mTLS as " + dankiID + " to " + cartID; !strings.Contains(res.Summary(), want) {
		t.Errorf("summary %q does not say %q", res.Summary(), want)
	}
}

func TestGRPCWarmupOverMTLS(t *testing.T) {
	m := testutil.NewMesh(t)
	var offered testutil.ALPNLog
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true, grpc.Creds(credentials.NewTLS(m.ServerTLS(cartID, &offered))))
	srv.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get", Message: `{"id": "a"}`})
	cfg.Policy = meshPolicy(t, m, *fastPolicy)
	pod := meshPod(t, strings.TrimPrefix(srv.URL, "http://"), "grpc")

	res, err := Run(context.Background(), cfg, []Target{podTarget(t, pod)}, Options{})
	if err != nil {
		t.Fatalf("gRPC warm-up over mTLS: %v\n%s", err, table(res))
	}
	calls := srv.Seen()
	if len(calls) == 0 || int64(len(calls)) != res.Requests() {
		t.Fatalf("server saw %d calls, danki counted %d", len(calls), res.Requests())
	}
	for i, c := range calls {
		if c.Client != dankiID || c.ALPN != "h2" {
			t.Fatalf("call %d came from %q over %q; want %s over h2", i, c.Client, c.ALPN, dankiID)
		}
	}
	if srv.HealthChecks.Load() == 0 {
		t.Error("no gRPC health check went over mTLS")
	}
	if got := offered.Last(); len(got) == 0 || got[0] != "istio-h2" {
		t.Errorf("ALPN offered %q; want istio-h2 first", got)
	}
}

func TestMTLSOffAgainstAStrictPodFailsFastAndSaysWhy(t *testing.T) {
	m := testutil.NewMesh(t)
	app := newStrictApp(m, cartID, false)
	cfg := fastConfig()
	cfg.Policy = meshPolicy(t, m, *fastPolicy)
	cfg.MTLS = mtls.Off
	cfg.HealthTimeout, cfg.Deadline = config.Duration(time.Minute), config.Duration(2*time.Minute)

	res, err := Run(context.Background(), cfg, []Target{podTarget(t, meshPod(t, app.Addr, "http"))}, Options{})
	if err == nil {
		t.Fatal("plaintext to a STRICT pod succeeded")
	}
	for _, want := range []string{"PeerAuthentication in STRICT mode", "set mtls to auto or istio"} {
		if !strings.Contains(err.Error(), want) || !strings.Contains(res.Reason, want) {
			t.Errorf("error %q (reason %q) does not say %q", err, res.Reason, want)
		}
	}
	// Given up at the first reset, not at healthTimeout, and says so.
	if !strings.Contains(err.Error(), "gave up at once") || strings.Contains(err.Error(), "healthTimeout") {
		t.Errorf("error %q: want it to say it gave up at once, not name a time limit", err)
	}
	if res.Elapsed >= time.Minute/2 {
		t.Errorf("took %s: the health wait ran on after a STRICT reset", res.Elapsed)
	}
	if res.Mesh != "" || len(m.Signed()) != 0 {
		t.Errorf("mtls off minted danki's identity (%q, %d signed)", res.Mesh, len(m.Signed()))
	}
}

func TestAPodProvingAnotherIdentityIsRefusedWithWantAndSeen(t *testing.T) {
	m := testutil.NewMesh(t)
	payments := testutil.MeshSPIFFEID("shop", "payments")
	app := newStrictApp(m, payments, false) // the address is another workload's now
	cfg := fastConfig()
	cfg.Policy = meshPolicy(t, m, *fastPolicy)
	cfg.HealthTimeout, cfg.Deadline = config.Duration(time.Minute), config.Duration(2*time.Minute)

	res, err := Run(context.Background(), cfg, []Target{podTarget(t, meshPod(t, app.Addr, "http"))}, Options{})
	if want := "want " + cartID + ", the pod presented " + payments; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want %q", err, want)
	}
	if res.Elapsed >= time.Minute/2 {
		t.Errorf("took %s: the health wait ran on after an identity mismatch", res.Elapsed)
	}
	if seen := app.Callers(); len(seen) != 0 {
		t.Errorf("requests reached the other workload: %v", seen)
	}
}

func TestAnAuthorizationPolicyDenialNamesDankisPrincipal(t *testing.T) {
	m := testutil.NewMesh(t)
	app := newStrictApp(m, cartID, true)
	cfg := fastConfig()
	cfg.Policy = meshPolicy(t, m, *fastPolicy)

	_, err := Run(context.Background(), cfg, []Target{podTarget(t, meshPod(t, app.Addr, "http"))}, Options{})
	if want := `allow principal "cluster.local/ns/danki-system/sa/danki"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want the denial naming %s", err, want)
	}
}

func TestThePolicyRefusesTheAddressBeforeAnyTLS(t *testing.T) {
	m := testutil.NewMesh(t)
	app := newStrictApp(m, cartID, false)
	cfg := fastConfig()
	// A tenant's policy: loopback (the test pod's address) is refused.
	cfg.Policy = meshPolicy(t, m, policy.Policy{Limits: fastPolicy.Limits})
	cfg.HealthTimeout = config.Duration(time.Second)

	_, err := Run(context.Background(), cfg, []Target{podTarget(t, meshPod(t, app.Addr, "http"))}, Options{})
	if err == nil || !strings.Contains(err.Error(), "is loopback") {
		t.Fatalf("got %v; want the policy's refusal of loopback", err)
	}
	if got := app.Offered.Last(); got != nil {
		t.Errorf("a TLS ClientHello reached the refused address (ALPN %q)", got)
	}
}

func TestMTLSIstioRefusesExplicitURLs(t *testing.T) {
	m := testutil.NewMesh(t)
	p := meshPolicy(t, m, *fastPolicy)
	_, err := ParseStepConfig([]byte(`{"mtls": "istio", "urls": ["http://10.0.0.5:8080"]}`), *p)
	if err == nil || !strings.Contains(err.Error(), "mtls: istio with explicit urls") {
		t.Errorf("step config: got %v; want the mtls field named", err)
	}
	if _, err := ParseStepConfig([]byte(`{"mtls": "auto", "urls": ["http://10.0.0.5:8080"]}`), *p); err != nil {
		t.Errorf("auto with URLs: %v", err)
	}
	_, err = ParseStepConfig([]byte(`{"mtls": "strict"}`), *p)
	if err == nil || !strings.Contains(err.Error(), "mtls") || !strings.Contains(err.Error(), "auto, istio or off") {
		t.Errorf("a bad mode: got %v; want the field and its values", err)
	}

	// Run, as the command line calls it: a URL target under istio.
	cfg := fastConfig()
	cfg.Policy, cfg.MTLS = p, mtls.Istio
	_, err = Run(context.Background(), cfg, []Target{{Name: "u", URL: "http://10.0.0.5:8080"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "is no pod (an explicit URL)") {
		t.Errorf("Run: got %v", err)
	}
}

func TestMTLSHealthURLsOnTheAgentsPortsArePlaintext(t *testing.T) {
	m := testutil.NewMesh(t)
	cfg := fastConfig()
	cfg.Policy = meshPolicy(t, m, *fastPolicy)
	pod := meshPod(t, "10.0.0.5:8080", "http")
	rewritten := podTarget(t, pod)
	rewritten.HealthURL = "http://10.0.0.5:15020/app-health/app/readyz" // Istio's probe rewrite
	other := podTarget(t, pod)
	other.URL, other.HealthURL = "http://10.0.0.6:8080", "http://10.0.0.6:8081/ready" // another port, through the sidecar
	routes, err := cfg.resolvePeers(context.Background(), []Target{rewritten, other})
	if err != nil {
		t.Fatal(err)
	}
	var mtlsAddrs []string
	for a, id := range routes.peers {
		if id != cartID {
			t.Errorf("%s: peer %s", a, id)
		}
		mtlsAddrs = append(mtlsAddrs, a)
	}
	slices.Sort(mtlsAddrs)
	if want := []string{"10.0.0.5:8080", "10.0.0.6:8080", "10.0.0.6:8081"}; !slices.Equal(mtlsAddrs, want) {
		t.Errorf("dialled with mTLS: %v; want %v (not the agent's 15020)", mtlsAddrs, want)
	}
}

func TestGRPCWithMTLSOffAgainstAStrictPodFailsFastAndSaysWhy(t *testing.T) {
	m := testutil.NewMesh(t)
	srv := testutil.NewGRPCServer(t, nil, true, grpc.Creds(credentials.NewTLS(m.ServerTLS(cartID, nil))))
	srv.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get", Message: `{"id": "a"}`})
	cfg.Policy, cfg.MTLS = meshPolicy(t, m, *fastPolicy), mtls.Off
	cfg.HealthTimeout, cfg.Deadline = config.Duration(time.Minute), config.Duration(2*time.Minute)
	pod := meshPod(t, strings.TrimPrefix(srv.URL, "http://"), "grpc")

	res, err := Run(context.Background(), cfg, []Target{podTarget(t, pod)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "PeerAuthentication in STRICT mode") {
		t.Fatalf("got %v; want the STRICT reset explained", err)
	}
	if res.Elapsed >= time.Minute/2 {
		t.Errorf("took %s: the gRPC health wait ran on after a STRICT reset", res.Elapsed)
	}
}
