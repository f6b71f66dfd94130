package mtls

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net/url"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultValidity is the lifetime danki asks for, as Istio's agent does
// (SECRET_TTL); istiod caps it at its own maximum.
const DefaultValidity = 24 * time.Hour

// maxRetry bounds the wait between failed renewals: a certificate that
// fails to renew is retried often enough to recover well before it expires.
const maxRetry = time.Minute

// Config is what an Identity needs.
type Config struct {
	// Namespace and ServiceAccount are danki's own. The CSR names their
	// SPIFFE ID, for CAs that hold the CSR to the token (cert-manager's
	// istio-csr); istiod ignores it and takes the identity from the token.
	Namespace      string
	ServiceAccount string
	// TrustDomain is the mesh's, for the CSR; empty is DefaultTrustDomain.
	TrustDomain string
	// CA signs the certificates; its Roots are also the pods' root.
	CA CA
	// Validity is the lifetime asked for; zero is DefaultValidity.
	Validity time.Duration
	// Clock schedules renewals and judges expiry; nil is the real clock.
	Clock clock.Clock
}

// Identity is danki's workload certificate: minted by NewIdentity, renewed
// in the background at 50–80 % of its lifetime (jittered, so that many
// danki processes do not renew together) until Close. It is safe for
// concurrent use; each new TLS connection presents the certificate current
// at its handshake (GetClientCertificate), so a renewal needs no change to
// the tls.Config of a transport already built.
type Identity struct {
	cfg   Config
	clock clock.Clock

	mu      sync.RWMutex
	cert    *tls.Certificate // Leaf set
	id      string           // the leaf's SPIFFE ID
	renewAt time.Time
	lastErr error // of the last renewal; nil once one succeeds

	stop context.CancelFunc
	done chan struct{}
}

// NewIdentity mints the first certificate (ctx bounds that call only) and
// starts renewing it; Close stops the renewals.
func NewIdentity(ctx context.Context, c Config) (*Identity, error) {
	id := &Identity{cfg: c, clock: c.Clock, done: make(chan struct{})}
	if id.clock == nil {
		id.clock = clock.RealClock{}
	}
	if err := id.renew(ctx); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	id.stop = stop
	go id.run(runCtx)
	return id, nil
}

// Close stops the renewals and waits for a renewal under way to end. The
// last certificate stays usable until it expires.
func (id *Identity) Close() {
	id.stop()
	<-id.done
}

// ID is danki's SPIFFE ID as the CA wrote it in the certificate (from the
// token: it names the mesh's real trust domain).
func (id *Identity) ID() string {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.id
}

// TrustDomain is the trust domain of ID: the one the CA signs for, so the
// one the pods' SPIFFE IDs carry.
func (id *Identity) TrustDomain() string {
	td, _ := TrustDomainOf(id.ID()) // checked when the certificate came
	return td
}

// Roots is the mesh root the pods' certificates are verified against.
func (id *Identity) Roots() *x509.CertPool { return id.cfg.CA.Roots }

// Certificate is the current certificate (Leaf set), expired or not.
func (id *Identity) Certificate() *tls.Certificate {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.cert
}

// GetClientCertificate serves the current certificate to a handshake
// (tls.Config.GetClientCertificate). Once it has expired, because renewals
// failed, the handshake fails with the last renewal's error rather than
// presenting a certificate every sidecar would refuse.
func (id *Identity) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if now := id.clock.Now(); now.After(id.cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("mtls: danki's mesh certificate (%s) expired at %s; its last renewal: %w",
			id.id, id.cert.Leaf.NotAfter.Format(time.RFC3339), cmp.Or(id.lastErr, errors.New("none has run yet")))
	}
	return id.cert, nil
}

// run renews at renewAt, and after a failure retries with a doubling wait
// (1s … maxRetry), until ctx ends.
func (id *Identity) run(ctx context.Context) {
	defer close(id.done)
	var retry time.Duration
	for {
		wait := retry
		if wait == 0 {
			id.mu.RLock()
			wait = id.renewAt.Sub(id.clock.Now())
			id.mu.RUnlock()
		}
		if wait > 0 {
			t := id.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err := id.renew(ctx); err != nil {
			id.mu.Lock()
			id.lastErr = err
			id.mu.Unlock()
			retry = min(max(2*retry, time.Second), maxRetry)
			continue
		}
		retry = 0
	}
}

// renew makes a new key and CSR, has the CA sign it, checks the answer and
// makes it the current certificate.
func (id *Identity) renew(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("mtls: generating a key: %w", err)
	}
	tmpl := &x509.CertificateRequest{}
	if id.cfg.Namespace != "" && id.cfg.ServiceAccount != "" {
		u, err := url.Parse(SPIFFEID(id.cfg.TrustDomain, id.cfg.Namespace, id.cfg.ServiceAccount))
		if err != nil {
			return fmt.Errorf("mtls: the CSR's SPIFFE ID: %w", err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return fmt.Errorf("mtls: making the CSR: %w", err)
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	chain, err := id.cfg.CA.Sign(ctx, csr, cmp.Or(id.cfg.Validity, DefaultValidity))
	if err != nil {
		return err
	}
	cert, spiffe, err := id.check(key, chain)
	if err != nil {
		return fmt.Errorf("mtls: the certificate from istiod's CA at %s: %w", cmp.Or(id.cfg.CA.Address, DefaultCAAddress), err)
	}
	// Counted from now, not from NotBefore: istiod backdates NotBefore by
	// two minutes (clock skew), which for a short validity would put the
	// renewal in the past and renew at once, again and again.
	now := id.clock.Now()
	renewAt := now.Add(time.Duration((0.5 + 0.3*mathrand.Float64()) * float64(cert.Leaf.NotAfter.Sub(now))))
	id.mu.Lock()
	id.cert, id.id, id.renewAt, id.lastErr = cert, spiffe, renewAt, nil
	id.mu.Unlock()
	return nil
}

// check holds the CA's answer to what the pods will check: the leaf is for
// our key, chains to the mesh root (a CA under another root would mint
// certificates no sidecar accepts) and names a SPIFFE ID.
func (id *Identity) check(key *ecdsa.PrivateKey, chain []*x509.Certificate) (*tls.Certificate, string, error) {
	leaf := chain[0]
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, "", errors.New("the leaf is not for the CSR's key")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         id.cfg.CA.Roots,
		Intermediates: inter,
		CurrentTime:   id.clock.Now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, "", fmt.Errorf("it does not verify against the mesh root (is the root the mesh's?): %w", err)
	}
	ids := spiffeIDs(leaf)
	if len(ids) != 1 {
		return nil, "", fmt.Errorf("want one SPIFFE ID in it, got %q", ids)
	}
	if _, err := TrustDomainOf(ids[0]); err != nil {
		return nil, "", err
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: leaf}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	return cert, ids[0], nil
}
