package mtls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	securityv1alpha1 "istio.io/api/security/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"
)

// danki's own ServiceAccount in the tests.
const (
	dankiNS = "danki-system"
	dankiSA = "danki"
)

var dankiID = SPIFFEID("", dankiNS, dankiSA)

// testMesh is a mesh in one process: a root CA, an API server that issues
// tokens (a fake clientset), and istiod's certificate service, a real gRPC
// server over TLS on 127.0.0.1 that reviews the token and signs the CSR for
// the token's identity, as istiod does. Certificates are real; only time
// is fake (one clock for the CA, the pods and danki).
type testMesh struct {
	t       *testing.T
	clock   *testclock.FakeClock
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	rootPEM []byte
	roots   *x509.CertPool
	client  *fake.Clientset
	caAddr  string

	mu         sync.Mutex
	tokens     map[string]tokenInfo // issued tokens
	denyTokens bool                 // the API server forbids TokenRequest
	refuse     bool                 // the CA answers Unauthenticated
	signed     []*x509.Certificate  // every leaf the CA signed
	validities []int64              // ValidityDuration of each request
}

// tokenInfo is whom a token was issued for.
type tokenInfo struct {
	ns, sa    string
	audiences []string
}

func newTestMesh(t *testing.T) *testMesh {
	t.Helper()
	m := &testMesh{
		t:      t,
		clock:  testclock.NewFakeClock(time.Now().Truncate(time.Second)),
		tokens: map[string]tokenInfo{},
	}
	m.rootKey = newKey(t)
	now := m.clock.Now()
	m.root = m.sign(&x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, &m.rootKey.PublicKey, nil)
	m.rootPEM = pemOf(m.root)
	m.roots = x509.NewCertPool()
	m.roots.AddCert(m.root)

	m.client = fake.NewClientset()
	m.client.PrependReactor("create", "serviceaccounts", m.createToken)

	// istiod's serving certificate names the Service only (DNS SAN).
	serving := m.leaf(func(c *x509.Certificate) { c.DNSNames = []string{DefaultCAServerName} })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serving}})))
	securityv1alpha1.RegisterIstioCertificateServiceServer(srv, testCA{m: m})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	m.caAddr = lis.Addr().String()
	return m
}

// createToken is the API server's TokenRequest.
func (m *testMesh) createToken(a k8stesting.Action) (bool, runtime.Object, error) {
	create, ok := a.(k8stesting.CreateActionImpl)
	if !ok || a.GetSubresource() != "token" {
		return false, nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.denyTokens {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts/token"}, create.Name, errors.New("RBAC: access denied"))
	}
	tr := create.Object.(*authenticationv1.TokenRequest).DeepCopy()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	m.tokens[tok] = tokenInfo{ns: a.GetNamespace(), sa: create.Name, audiences: tr.Spec.Audiences}
	tr.Status.Token = tok
	return true, tr, nil
}

// testCA is istiod's IstioCertificateService.
type testCA struct {
	securityv1alpha1.UnimplementedIstioCertificateServiceServer
	m *testMesh
}

func (ca testCA) CreateCertificate(ctx context.Context, req *securityv1alpha1.IstioCertificateRequest) (*securityv1alpha1.IstioCertificateResponse, error) {
	m := ca.m
	md, _ := metadata.FromIncomingContext(ctx)
	tok, bearer := strings.CutPrefix(first(md.Get("authorization")), "Bearer ")
	m.mu.Lock()
	who, known := m.tokens[tok]
	refuse := m.refuse
	m.mu.Unlock()
	if refuse || !bearer || !known || !slices.Contains(who.audiences, TokenAudience) || first(md.Get("clusterid")) != DefaultClusterID {
		return nil, status.Error(codes.Unauthenticated, "request authenticate failure")
	}
	block, _ := pem.Decode([]byte(req.GetCsr()))
	if block == nil {
		return nil, status.Error(codes.InvalidArgument, "no CSR")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// The identity is the token's, whatever the CSR asks for; the
	// certificate starts 2 minutes back (istiod's ClockSkewGracePeriod).
	id, _ := url.Parse(SPIFFEID("", who.ns, who.sa))
	now := m.clock.Now()
	leaf := m.sign(&x509.Certificate{
		NotBefore:   now.Add(-2 * time.Minute),
		NotAfter:    now.Add(time.Duration(req.GetValidityDuration()) * time.Second),
		URIs:        []*url.URL{id},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, csr.PublicKey, m.root)
	m.mu.Lock()
	m.signed = append(m.signed, leaf)
	m.validities = append(m.validities, req.GetValidityDuration())
	m.mu.Unlock()
	return &securityv1alpha1.IstioCertificateResponse{CertChain: []string{string(pemOf(leaf)), string(m.rootPEM)}}, nil
}

// sign issues tmpl for pub under the root (self-signed when parent is nil).
func (m *testMesh) sign(tmpl *x509.Certificate, pub any, parent *x509.Certificate) *x509.Certificate {
	m.t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		m.t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, m.rootKey)
	if err != nil {
		m.t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		m.t.Fatal(err)
	}
	return cert
}

// leaf is a serving certificate under the root, valid around the fake
// clock's start, shaped by edit.
func (m *testMesh) leaf(edit func(*x509.Certificate)) tls.Certificate {
	key := newKey(m.t)
	now := m.clock.Now()
	tmpl := &x509.Certificate{
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(48 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	edit(tmpl)
	cert := m.sign(tmpl, &key.PublicKey, m.root)
	return tls.Certificate{Certificate: [][]byte{cert.Raw, m.root.Raw}, PrivateKey: key, Leaf: cert}
}

// workloadCert is the certificate a pod's sidecar presents: its SPIFFE ID
// as a URI SAN, no DNS or IP SANs.
func (m *testMesh) workloadCert(id string) tls.Certificate {
	u, err := url.Parse(id)
	if err != nil {
		m.t.Fatal(err)
	}
	return m.leaf(func(c *x509.Certificate) { c.URIs = []*url.URL{u} })
}

// ca is a client of the mesh's CA with danki's token source.
func (m *testMesh) ca(token TokenSource) CA {
	return CA{Address: m.caAddr, Roots: m.roots, Token: token}
}

func (m *testMesh) token() ServiceAccountToken {
	return ServiceAccountToken{Client: m.client, Namespace: dankiNS, Name: dankiSA}
}

// identity mints danki's identity with the given validity.
func (m *testMesh) identity(validity time.Duration) *Identity {
	m.t.Helper()
	id, err := NewIdentity(context.Background(), Config{
		Namespace: dankiNS, ServiceAccount: dankiSA,
		CA: m.ca(m.token()), Validity: validity, Clock: m.clock,
	})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(id.Close)
	return id
}

// serverTLS is a STRICT sidecar's inbound TLS: id's certificate, a client
// certificate from the mesh root required, the ALPN each client offered
// recorded.
func (m *testMesh) serverTLS(id string, offered *alpnLog) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.workloadCert(id)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.roots,
		Time:         m.clock.Now,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			offered.add(hello.SupportedProtos)
			return nil, nil
		},
	}
}

type alpnLog struct {
	mu     sync.Mutex
	offers [][]string
}

func (l *alpnLog) add(p []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offers = append(l.offers, slices.Clone(p))
}

func (l *alpnLog) last() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.offers) == 0 {
		return nil
	}
	return l.offers[len(l.offers)-1]
}

// strictPod is an HTTP pod behind a STRICT sidecar: mTLS only, and a
// connection that fails the handshake (plaintext) is reset, as Envoy does.
// Each response says who called, as x-forwarded-client-cert does:
// "By=<pod>;URI=<client>", and the client certificate's serial.
type strictPod struct {
	addr    string
	offered alpnLog
}

func (m *testMesh) strictPod(id string) *strictPod {
	m.t.Helper()
	p := &strictPod{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.t.Fatal(err)
	}
	cfg := m.serverTLS(id, &p.offered)
	cfg.NextProtos = []string{"h2", "http/1.1"} // Envoy's inbound TLS context
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := r.Context().Value(connKey{}).(*strictConn)
			client := c.ConnectionState().PeerCertificates[0]
			w.Header().Set("X-Client-Serial", client.SerialNumber.String())
			fmt.Fprintf(w, "By=%s;URI=%s", id, strings.Join(spiffeIDs(client), ","))
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	go func() { _ = srv.Serve(strictListener{Listener: lis, cfg: cfg}) }()
	m.t.Cleanup(func() { _ = srv.Close() })
	p.addr = lis.Addr().String()
	return p
}

type connKey struct{}

// strictListener hands out TLS connections that http.Server cannot
// recognise as TLS, so it does not answer plaintext with its friendly 400:
// the connection is reset instead, as a STRICT sidecar does.
type strictListener struct {
	net.Listener
	cfg *tls.Config
}

func (l strictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &strictConn{Conn: tls.Server(c, l.cfg), raw: c.(*net.TCPConn)}, nil
}

type strictConn struct {
	*tls.Conn
	raw  *net.TCPConn
	once sync.Once
	err  error
}

func (c *strictConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		if c.err = c.Handshake(); c.err != nil {
			_ = c.raw.SetLinger(0) // close with a reset
			_ = c.raw.Close()
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}

// eventually waits, within a bound, for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
