package testutil

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
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
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

// Istio's names the test mesh plays by. They are written out here, not
// taken from pkg/mtls, so that pkg/mtls's own tests can use this mesh (an
// import of pkg/mtls from here would be a cycle for them).
const (
	// MeshCAServerName is the name on istiod's serving certificate.
	MeshCAServerName = "istiod.istio-system.svc"
	// MeshClusterID is the ClusterID istiod expects (its CLUSTER_ID).
	MeshClusterID = "Kubernetes"
	// MeshTokenAudience is the audience istiod's CA accepts.
	MeshTokenAudience = "istio-ca"
)

// MeshSPIFFEID is the SPIFFE ID the test mesh (trust domain cluster.local)
// gives ServiceAccount sa of namespace ns.
func MeshSPIFFEID(ns, sa string) string {
	return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa
}

// Mesh is an Istio mesh in one process: a root CA, an API server that
// issues ServiceAccount tokens (a fake clientset), and istiod's
// certificate service, a real gRPC server over TLS on 127.0.0.1 that
// reviews the token and signs the CSR for the token's identity, as istiod
// does. Certificates are real; only time is fake (Clock, one for the CA,
// the pods and the client under test).
type Mesh struct {
	tb      testing.TB
	Clock   *testclock.FakeClock
	Root    *x509.Certificate
	RootPEM []byte
	Roots   *x509.CertPool
	// Client is the API server: TokenRequests (create
	// serviceaccounts/token) are answered, anything else is the fake's.
	Client *fake.Clientset
	// CAAddress is istiod's CA, host:port on 127.0.0.1.
	CAAddress string

	rootKey *ecdsa.PrivateKey

	mu         sync.Mutex
	tokens     map[string]meshToken // issued tokens
	denyTokens bool                 // the API server forbids TokenRequest
	refuse     bool                 // the CA answers Unauthenticated
	signed     []*x509.Certificate  // every leaf the CA signed
	validities []int64              // ValidityDuration of each request
}

// meshToken is whom a token was issued for.
type meshToken struct {
	ns, sa    string
	audiences []string
}

// NewMesh starts a mesh; its servers stop with the test.
func NewMesh(tb testing.TB) *Mesh {
	tb.Helper()
	m := &Mesh{
		tb:     tb,
		Clock:  testclock.NewFakeClock(time.Now().Truncate(time.Second)),
		tokens: map[string]meshToken{},
	}
	m.rootKey = newMeshKey(tb)
	now := m.Clock.Now()
	m.Root = m.sign(&x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, &m.rootKey.PublicKey, nil)
	m.RootPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Root.Raw})
	m.Roots = x509.NewCertPool()
	m.Roots.AddCert(m.Root)

	m.Client = fake.NewClientset()
	m.Client.PrependReactor("create", "serviceaccounts", m.createToken)

	// istiod's serving certificate names the Service only (DNS SAN).
	serving := m.Leaf(func(c *x509.Certificate) { c.DNSNames = []string{MeshCAServerName} })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serving}})))
	securityv1alpha1.RegisterIstioCertificateServiceServer(srv, meshCA{m: m})
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	m.CAAddress = lis.Addr().String()
	return m
}

// RootFile writes the mesh root as a PEM file (the operator's root file
// setting) and returns its path.
func (m *Mesh) RootFile() string {
	path := filepath.Join(m.tb.TempDir(), "root.pem")
	if err := os.WriteFile(path, m.RootPEM, 0o600); err != nil {
		m.tb.Fatal(err)
	}
	return path
}

// SetRefuse makes the CA answer Unauthenticated (true) or sign again.
func (m *Mesh) SetRefuse(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refuse = v
}

// SetDenyTokens makes the API server forbid TokenRequests (danki's RBAC
// lacks create on serviceaccounts/token).
func (m *Mesh) SetDenyTokens(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.denyTokens = v
}

// Signed returns the leaves the CA signed so far, in order.
func (m *Mesh) Signed() []*x509.Certificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.signed)
}

// Validities returns the ValidityDuration (seconds) of each signing
// request, in order.
func (m *Mesh) Validities() []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.validities)
}

// createToken is the API server's TokenRequest.
func (m *Mesh) createToken(a k8stesting.Action) (bool, runtime.Object, error) {
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
	m.tokens[tok] = meshToken{ns: a.GetNamespace(), sa: create.Name, audiences: tr.Spec.Audiences}
	tr.Status.Token = tok
	return true, tr, nil
}

// meshCA is istiod's IstioCertificateService.
type meshCA struct {
	securityv1alpha1.UnimplementedIstioCertificateServiceServer
	m *Mesh
}

func (ca meshCA) CreateCertificate(ctx context.Context, req *securityv1alpha1.IstioCertificateRequest) (*securityv1alpha1.IstioCertificateResponse, error) {
	m := ca.m
	md, _ := metadata.FromIncomingContext(ctx)
	tok, bearer := strings.CutPrefix(firstOf(md.Get("authorization")), "Bearer ")
	m.mu.Lock()
	who, known := m.tokens[tok]
	refuse := m.refuse
	m.mu.Unlock()
	if refuse || !bearer || !known || !slices.Contains(who.audiences, MeshTokenAudience) || firstOf(md.Get("clusterid")) != MeshClusterID {
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
	id, _ := url.Parse(MeshSPIFFEID(who.ns, who.sa))
	now := m.Clock.Now()
	leaf := m.sign(&x509.Certificate{
		NotBefore:   now.Add(-2 * time.Minute),
		NotAfter:    now.Add(time.Duration(req.GetValidityDuration()) * time.Second),
		URIs:        []*url.URL{id},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, csr.PublicKey, m.Root)
	m.mu.Lock()
	m.signed = append(m.signed, leaf)
	m.validities = append(m.validities, req.GetValidityDuration())
	m.mu.Unlock()
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	return &securityv1alpha1.IstioCertificateResponse{CertChain: []string{string(leafPEM), string(m.RootPEM)}}, nil
}

// sign issues tmpl for pub under the root (self-signed when parent is nil).
func (m *Mesh) sign(tmpl *x509.Certificate, pub any, parent *x509.Certificate) *x509.Certificate {
	m.tb.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		m.tb.Fatal(err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, m.rootKey)
	if err != nil {
		m.tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		m.tb.Fatal(err)
	}
	return cert
}

// Leaf is a certificate under the root for a new key, valid around the
// clock's start, for server and client auth, shaped by edit.
func (m *Mesh) Leaf(edit func(*x509.Certificate)) tls.Certificate {
	key := newMeshKey(m.tb)
	now := m.Clock.Now()
	tmpl := &x509.Certificate{
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(48 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	edit(tmpl)
	cert := m.sign(tmpl, &key.PublicKey, m.Root)
	return tls.Certificate{Certificate: [][]byte{cert.Raw, m.Root.Raw}, PrivateKey: key, Leaf: cert}
}

// WorkloadCert is the certificate a pod's sidecar presents: its SPIFFE ID
// as a URI SAN, no DNS or IP SANs.
func (m *Mesh) WorkloadCert(id string) tls.Certificate {
	u, err := url.Parse(id)
	if err != nil {
		m.tb.Fatal(err)
	}
	return m.Leaf(func(c *x509.Certificate) { c.URIs = []*url.URL{u} })
}

// ServerTLS is a STRICT sidecar's inbound TLS for a pod that is id: id's
// certificate, a client certificate from the mesh root required, the ALPN
// each client offered recorded in offered (when not nil).
func (m *Mesh) ServerTLS(id string, offered *ALPNLog) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.WorkloadCert(id)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.Roots,
		Time:         m.Clock.Now,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if offered != nil {
				offered.add(hello.SupportedProtos)
			}
			return nil, nil
		},
	}
}

// ALPNLog records the ALPN protocols each client offered.
type ALPNLog struct {
	mu     sync.Mutex
	offers [][]string
}

func (l *ALPNLog) add(p []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offers = append(l.offers, slices.Clone(p))
}

// Last is the latest client's offer.
func (l *ALPNLog) Last() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.offers) == 0 {
		return nil
	}
	return l.offers[len(l.offers)-1]
}

// StrictPod is an HTTP pod behind a STRICT sidecar: mTLS only, and a
// connection that fails the handshake (plaintext) is reset, as Envoy
// does. The handler sees the client's certificate through PeerOf.
type StrictPod struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// Offered is the ALPN each client offered.
	Offered ALPNLog

	mu      sync.Mutex
	callers map[string]int // the client's SPIFFE IDs → requests
}

// Callers counts the requests served by the client's SPIFFE IDs (joined
// with ","), as x-forwarded-client-cert would name them.
func (p *StrictPod) Callers() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.callers)
}

// StrictPod serves h behind a STRICT sidecar that is id (nil h: a handler
// answering "By=<id>;URI=<client's SPIFFE IDs>", as
// x-forwarded-client-cert says it, with the client certificate's serial
// in X-Client-Serial).
func (m *Mesh) StrictPod(id string, h http.Handler) *StrictPod {
	m.tb.Helper()
	p := &StrictPod{callers: map[string]int{}}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client := PeerOf(r)
			w.Header().Set("X-Client-Serial", client.SerialNumber.String())
			_, _ = w.Write([]byte("By=" + id + ";URI=" + strings.Join(SPIFFEIDs(client), ",")))
		})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		m.tb.Fatal(err)
	}
	cfg := m.ServerTLS(id, &p.Offered)
	cfg.NextProtos = []string{"h2", "http/1.1"} // Envoy's inbound TLS context
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.mu.Lock()
			p.callers[strings.Join(SPIFFEIDs(PeerOf(r)), ",")]++
			p.mu.Unlock()
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, strictConnKey{}, c)
		},
	}
	go func() { _ = srv.Serve(strictListener{Listener: lis, cfg: cfg}) }()
	m.tb.Cleanup(func() { _ = srv.Close() })
	p.Addr = lis.Addr().String()
	return p
}

// PeerOf is the client certificate of a request a StrictPod serves.
func PeerOf(r *http.Request) *x509.Certificate {
	c := r.Context().Value(strictConnKey{}).(*strictConn)
	return c.ConnectionState().PeerCertificates[0]
}

// SPIFFEIDs are a certificate's spiffe:// URI SANs.
func SPIFFEIDs(cert *x509.Certificate) []string {
	var ids []string
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			ids = append(ids, u.String())
		}
	}
	return ids
}

type strictConnKey struct{}

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

func newMeshKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
