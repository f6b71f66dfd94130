package mtls

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/danki-dev/danki/internal/testutil"
)

// danki's own ServiceAccount in the tests.
const (
	dankiNS = "danki-system"
	dankiSA = "danki"
)

var dankiID = SPIFFEID("", dankiNS, dankiSA)

// testMesh is the shared in-process mesh (testutil.Mesh: istiod's CA over
// TLS, a token-issuing API server, workload certificates, STRICT pods)
// with this package's clients of it.
type testMesh struct {
	*testutil.Mesh
	t *testing.T
}

func newTestMesh(t *testing.T) *testMesh {
	t.Helper()
	return &testMesh{Mesh: testutil.NewMesh(t), t: t}
}

// ca is a client of the mesh's CA with the given token source.
func (m *testMesh) ca(token TokenSource) CA {
	return CA{Address: m.CAAddress, Roots: m.Roots, Token: token}
}

// token is danki's own token source.
func (m *testMesh) token() ServiceAccountToken {
	return ServiceAccountToken{Client: m.Client, Namespace: dankiNS, Name: dankiSA}
}

// identity mints danki's identity with the given validity.
func (m *testMesh) identity(validity time.Duration) *Identity {
	m.t.Helper()
	id, err := NewIdentity(context.Background(), Config{
		Namespace: dankiNS, ServiceAccount: dankiSA,
		CA: m.ca(m.token()), Validity: validity, Clock: m.Clock,
	})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(id.Close)
	return id
}

// mesh is danki's Mesh in this test mesh, with the root given as a file.
func (m *testMesh) mesh(mode Mode) *Mesh {
	m.t.Helper()
	mesh := NewMesh(MeshConfig{
		Mode: mode, CAAddress: m.CAAddress, RootFile: m.RootFile(),
		Namespace: dankiNS, ServiceAccount: dankiSA, Client: m.Client, Clock: m.Clock,
	})
	m.t.Cleanup(mesh.Close)
	return mesh
}

// eventually waits, within a bound, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	t.Logf("waiting for %s", what)
	testutil.WaitFor(t, 10*time.Second, cond)
}

// tokenRequests counts the TokenRequests the API server answered: one per
// mint.
func (m *testMesh) tokenRequests() int {
	n := 0
	for _, a := range m.Client.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "token" {
			n++
		}
	}
	return n
}

func TestMeshMintsNothingBeforeTheFirstNeed(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-1"}}
	if id, err := mesh.PeerID(context.Background(), Auto, plain); id != "" || err != nil {
		t.Fatalf("PeerID of a pod without a sidecar = %q, %v", id, err)
	}
	if mesh.Self() != "" || m.tokenRequests() != 0 || len(m.Signed()) != 0 {
		t.Fatalf("minted before any need: self %q, %d token requests, %d signed", mesh.Self(), m.tokenRequests(), len(m.Signed()))
	}
	if _, err := mesh.PeerID(context.Background(), Istio, plain); err != nil {
		t.Fatal(err)
	}
	if mesh.Self() != dankiID || len(m.Signed()) != 1 {
		t.Errorf("after the first need: self %q, %d signed; want %s, 1", mesh.Self(), len(m.Signed()), dankiID)
	}
}

func TestMeshOneMintForConcurrentCallers(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	const callers = 8
	ids := make([]*Identity, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { ids[i], errs[i] = mesh.Identity(context.Background()) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("caller %d: %p, %v; want the one identity %p", i, ids[i], errs[i], ids[0])
		}
	}
	if n := len(m.Signed()); n != 1 || m.tokenRequests() != 1 {
		t.Errorf("%d certificates signed, %d tokens asked for; want 1 and 1", n, m.tokenRequests())
	}
}

func TestMeshAFailedMintIsKeptForRetryAfterThenRetried(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	m.SetRefuse(true)
	_, first := mesh.Identity(context.Background())
	if first == nil || !strings.Contains(first.Error(), "refused") {
		t.Fatalf("first mint: %v; want the CA's refusal explained", first)
	}
	m.SetRefuse(false) // the CA is back, but the error is kept a while
	m.Clock.Step(RetryAfter - time.Second)
	if _, err := mesh.Identity(context.Background()); err != first {
		t.Fatalf("within RetryAfter: %v; want the same error, without asking the CA", err)
	}
	if n := m.tokenRequests(); n != 1 {
		t.Errorf("%d token requests within RetryAfter; want 1", n)
	}
	m.Clock.Step(time.Second)
	id, err := mesh.Identity(context.Background())
	if err != nil || id.ID() != dankiID {
		t.Fatalf("after RetryAfter: %v, %v; want a new mint", id, err)
	}
}

func TestMeshPeerIDByMode(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	pod := func(labels map[string]string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-1", Labels: labels},
			Spec: corev1.PodSpec{ServiceAccountName: "cart"}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
		}
		return p
	}
	cart := SPIFFEID("", "shop", "cart")
	for _, c := range []struct {
		name string
		mesh *Mesh
		mode Mode
		pod  *corev1.Pod
		want string
	}{
		{"auto, tlsMode istio", mesh, Auto, pod(map[string]string{TLSModeLabel: TLSModeIstio}, "app"), cart},
		{"auto, tlsMode disabled despite a proxy", mesh, Auto, pod(map[string]string{TLSModeLabel: "disabled"}, "app", ProxyContainer), ""},
		{"auto, no label, an istio-proxy container", mesh, Auto, pod(nil, "app", ProxyContainer), cart},
		{"auto, no label, no proxy", mesh, Auto, pod(nil, "app"), ""},
		{"istio, no sidecar", mesh, Istio, pod(nil, "app"), cart},
		{"off, a sidecar", mesh, Off, pod(map[string]string{TLSModeLabel: TLSModeIstio}, "app", ProxyContainer), ""},
		{"nil Mesh", nil, Istio, pod(nil, ProxyContainer), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.mesh.PeerID(context.Background(), c.mesh.Resolve(c.mode), c.pod)
			if err != nil || got != c.want {
				t.Errorf("PeerID = %q, %v; want %q", got, err, c.want)
			}
		})
	}
	if (*Mesh)(nil).Resolve(Istio) != Off || mesh.Resolve("") != Auto || mesh.Resolve(Off) != Off {
		t.Error("Resolve: a nil Mesh is off; an empty mode is the operator's default; a set one is kept")
	}
}

func TestMeshDial(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	pod := m.StrictPod(cartID, nil)
	var dialled []string
	checked := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	ctx := context.Background()

	t.Run("no want: the plain dial", func(t *testing.T) {
		c, err := mesh.Dial(ctx, checked, "tcp", pod.Addr, "", HTTP1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, ok := c.(*net.TCPConn); !ok || mesh.Self() != "" {
			t.Errorf("got a %T, self %q; want the caller's own connection and no identity minted", c, mesh.Self())
		}
	})
	t.Run("want: the pod verified, danki's identity seen", func(t *testing.T) {
		c, err := mesh.Dial(ctx, checked, "tcp", pod.Addr, cartID, HTTP1)
		if err != nil {
			t.Fatal(err)
		}
		expectDanki(t, c)
	})
	t.Run("want another identity: refused with want and seen", func(t *testing.T) {
		other := SPIFFEID("", "shop", "payments")
		_, err := mesh.Dial(ctx, checked, "tcp", pod.Addr, other, HTTP1)
		var mismatch *IdentityMismatchError
		if !errors.As(err, &mismatch) || mismatch.Want != other {
			t.Fatalf("got %v; want an IdentityMismatchError", err)
		}
	})
	t.Run("the checked dial refuses: no handshake", func(t *testing.T) {
		refused := errors.New("address refused by the policy")
		_, err := mesh.Dial(ctx, func(context.Context, string, string) (net.Conn, error) { return nil, refused }, "tcp", pod.Addr, cartID, HTTP1)
		if !errors.Is(err, refused) {
			t.Fatalf("got %v; want the policy's refusal", err)
		}
	})
	if len(dialled) != 3 {
		t.Errorf("the checked dialer saw %d dials; want every one of the 3", len(dialled))
	}
}

// TestMeshACancelledCallerLeavesTheMintToOthers: one process serves every
// tenant's warm-ups, so the first caller's run being cancelled mid-mint
// (its rollout aborted) must neither end the mint nor become the answer
// the next tenant gets for RetryAfter.
func TestMeshACancelledCallerLeavesTheMintToOthers(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	entered, release := m.holdTokenRequests()
	first, cancel := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := mesh.Identity(first)
		firstErr <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-firstErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled caller got %v; want its own context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the cancelled caller still waits for the mint: its ctx does not bound its wait")
	}
	close(release)
	id, err := mesh.Identity(context.Background())
	if err != nil || id.ID() != dankiID {
		t.Fatalf("the next caller got %v, %v; want danki's certificate, not the cancelled caller's error", id, err)
	}
	if n := m.tokenRequests(); n != 1 || len(m.Signed()) != 1 {
		t.Errorf("%d token requests, %d signed; want the one mint, carried on after the first caller left", n, len(m.Signed()))
	}
}

// TestMeshCloseDuringAMintKeepsNothing: a mint that ends after Close is
// dropped (its renewals stopped), and its waiters are told.
func TestMeshCloseDuringAMintKeepsNothing(t *testing.T) {
	m := newTestMesh(t)
	mesh := m.mesh(Auto)
	entered, release := m.holdTokenRequests()
	got := make(chan error, 1)
	go func() {
		_, err := mesh.Identity(context.Background())
		got <- err
	}()
	<-entered
	closed := make(chan struct{})
	go func() { mesh.Close(); close(closed) }()
	close(release) // the fake API server does not see the mint's ctx end
	<-closed
	if err := <-got; err == nil {
		t.Error("a caller got an identity minted across Close")
	}
	if mesh.Self() != "" {
		t.Errorf("Self %q after Close: the late mint was kept", mesh.Self())
	}
}

// holdTokenRequests makes the TokenRequest behind a mint wait (before the
// API server's own reactor): entered is closed when the first one arrives,
// and closing release lets them through.
func (m *testMesh) holdTokenRequests() (entered <-chan struct{}, release chan struct{}) {
	in, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m.Client.PrependReactor("create", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(in) })
		<-release
		return false, nil, nil
	})
	return in, release
}
