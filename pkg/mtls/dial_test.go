package mtls

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/danki-dev/danki/internal/testutil"
)

var cartID = SPIFFEID("", "shop", "cart")

// get fetches url over tr (nil: plaintext), within a bound.
func get(t *testing.T, tr http.RoundTripper, url string) (string, error) {
	t.Helper()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// expectDanki sends one HTTP/1.1 request over c, an mTLS connection to a
// test pod that echoes the caller, closes c and wants danki's SPIFFE ID in
// the answer.
func expectDanki(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: cart\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "URI="+dankiID) {
		t.Errorf("response %q", b)
	}
}

func TestMTLSToAStrictPod(t *testing.T) {
	m := newTestMesh(t)
	pod := m.StrictPod(cartID, nil)
	id := m.identity(0)

	t.Run("the right identity: the pod sees danki's", func(t *testing.T) {
		body, err := get(t, &http.Transport{TLSClientConfig: id.ClientConfig(cartID, HTTP1)}, "https://"+pod.Addr+"/")
		if err != nil {
			t.Fatal(err)
		}
		if want := "By=" + cartID + ";URI=" + dankiID; body != want {
			t.Errorf("the pod saw %q; want %q", body, want)
		}
		if got := pod.Offered.Last(); !slices.Equal(got, []string{"istio-http/1.1", "istio", "http/1.1"}) {
			t.Errorf("ALPN offered %q", got)
		}
	})

	t.Run("another identity: want and seen named", func(t *testing.T) {
		want := SPIFFEID("", "shop", "payments")
		_, err := get(t, &http.Transport{TLSClientConfig: id.ClientConfig(want, HTTP1)}, "https://"+pod.Addr+"/")
		var mismatch *IdentityMismatchError
		if !errors.As(err, &mismatch) || mismatch.Want != want || !slices.Equal(mismatch.Got, []string{cartID}) {
			t.Fatalf("got %v; want an IdentityMismatchError", err)
		}
		if msg := fmt.Sprintf("want %s, the pod presented %s", want, cartID); !strings.Contains(err.Error(), msg) {
			t.Errorf("error %q does not say %q", err, msg)
		}

		_, err = id.DialTLSContext(context.Background(), "tcp", pod.Addr, want, HTTP1)
		if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), pod.Addr) {
			t.Errorf("DialTLSContext: %v", err)
		}
	})

	t.Run("plaintext: reset, and the error names STRICT", func(t *testing.T) {
		_, err := get(t, nil, "http://"+pod.Addr+"/")
		if err == nil {
			t.Fatal("a plaintext request got through")
		}
		explained := ExplainPlaintextReset(err)
		for _, want := range []string{err.Error(), "PeerAuthentication in STRICT mode", "set mtls to auto or istio"} {
			if !strings.Contains(explained.Error(), want) {
				t.Errorf("%q does not say %q", explained, want)
			}
		}
		if !errors.Is(explained, err) {
			t.Error("the explanation does not wrap the error")
		}
	})

	t.Run("DialTLSContext", func(t *testing.T) {
		c, err := id.DialTLSContext(context.Background(), "tcp", pod.Addr, cartID, HTTP1)
		if err != nil {
			t.Fatal(err)
		}
		expectDanki(t, c)
	})
}

func TestMTLSToAPodWithoutASidecarSaysItAnsweredInPlaintext(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(0)
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	addr := strings.TrimPrefix(plain.URL, "http://")
	_, err := id.DialTLSContext(context.Background(), "tcp", addr, cartID, HTTP1)
	if err == nil || !strings.Contains(err.Error(), "answered in plaintext") || !strings.Contains(err.Error(), "mtls to auto or off") {
		t.Fatalf("got %v", err)
	}
}

func TestAPodUnderAnotherRootIsRefused(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(0)
	other := newTestMesh(t)
	pod := other.StrictPod(cartID, nil) // its own mesh, the same SPIFFE ID
	_, err := id.DialTLSContext(context.Background(), "tcp", pod.Addr, cartID, HTTP1)
	if !errors.Is(err, errNotMeshRoot) || !strings.HasPrefix(err.Error(), pod.Addr+": mtls: the pod's certificate does not verify against the mesh root") {
		t.Fatalf("got %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("%v does not wrap x509's error", err)
	}
}

func TestGRPCOverMTLSWithIstioH2(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(0)

	var offered testutil.ALPNLog
	var mu sync.Mutex
	var negotiated, caller string
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(m.ServerTLS(cartID, &offered))),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			ti := p.AuthInfo.(credentials.TLSInfo)
			mu.Lock()
			negotiated, caller = ti.State.NegotiatedProtocol, strings.Join(spiffeIDs(ti.State.PeerCertificates[0]), ",")
			mu.Unlock()
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig(cartID, H2))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v", resp, err)
	}
	mu.Lock()
	if negotiated != "h2" || caller != dankiID {
		t.Errorf("the server negotiated %q with %q; want h2 with %s", negotiated, caller, dankiID)
	}
	mu.Unlock()
	if got := offered.Last(); len(got) == 0 || got[0] != "istio-h2" || !slices.Contains(got, "h2") {
		t.Errorf("ALPN offered %q; want istio-h2 first, and h2", got)
	}

	// The wrong identity fails the call with the mismatch in its message.
	bad, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig(dankiID, H2))))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = healthpb.NewHealthClient(bad).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "want "+dankiID+", the pod presented "+cartID) {
		t.Errorf("wrong identity: %v", err)
	}
}

func TestExplainPlaintextResetLeavesOtherErrorsAlone(t *testing.T) {
	if ExplainPlaintextReset(nil) != nil {
		t.Error("nil explained")
	}
	other := errors.New("dial tcp 10.0.0.1:8080: connect: connection refused")
	if ExplainPlaintextReset(other) != other {
		t.Error("connection refused explained as a reset")
	}
	// gRPC flattens the cause into its status message.
	flat := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`)
	if err := ExplainPlaintextReset(flat); !strings.Contains(err.Error(), "STRICT") || status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC's EOF: %v", err)
	}
	if err := ExplainPlaintextReset(io.ErrUnexpectedEOF); !strings.Contains(err.Error(), "STRICT") {
		t.Errorf("unexpected EOF: %v", err)
	}
}

func TestDenialsNameThePrincipalToAllow(t *testing.T) {
	if got, want := Principal(dankiID), "cluster.local/ns/danki-system/sa/danki"; got != want {
		t.Errorf("Principal = %s, want %s", got, want)
	}
	err := DeniedHTTP(http.StatusForbidden, []byte("RBAC: access denied"), dankiID)
	if err == nil || !strings.Contains(err.Error(), `allow principal "cluster.local/ns/danki-system/sa/danki"`) {
		t.Errorf("HTTP denial: %v", err)
	}
	if err := DeniedHTTP(http.StatusForbidden, []byte("forbidden by the app"), dankiID); err != nil {
		t.Errorf("the app's own 403: %v", err)
	}
	if err := DeniedHTTP(http.StatusOK, []byte("RBAC: access denied"), dankiID); err != nil {
		t.Errorf("a 200: %v", err)
	}

	denied := status.Error(codes.PermissionDenied, "RBAC: access denied")
	err = ExplainDenied(denied, dankiID)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `allow principal "cluster.local/ns/danki-system/sa/danki"`) {
		t.Errorf("gRPC denial: %v", err)
	}
	other := status.Error(codes.PermissionDenied, "the app says no")
	if ExplainDenied(other, dankiID) != other || ExplainDenied(nil, dankiID) != nil {
		t.Error("other errors explained as a denial")
	}
}
