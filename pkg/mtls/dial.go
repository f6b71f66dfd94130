package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// Protocol is what danki speaks inside the TLS connection to a pod; it
// picks the ALPN the pod's sidecar expects.
type Protocol int

// The Protocol values.
const (
	// HTTP1 is HTTP/1.1 (ALPN istio-http/1.1).
	HTTP1 Protocol = iota
	// H2 is HTTP/2, gRPC's (ALPN istio-h2).
	H2
)

// ALPN is what a sidecar itself offers to another (Istio's
// pilot/pkg/xds/filters, mtlsHTTP11ALPN and mtlsHTTP2ALPN): an istio-*
// value lets a PERMISSIVE inbound listener pick its mTLS filter chain
// (harmless under STRICT); the standard one last is what the sidecar's TLS
// negotiates, and gRPC requires h2 to be negotiated.
func (p Protocol) ALPN() []string {
	if p == H2 {
		return []string{"istio-h2", "istio", "h2"}
	}
	return []string{"istio-http/1.1", "istio", "http/1.1"}
}

// ClientConfig is the TLS config for dialing one pod whose sidecar must
// prove to be want (PodSPIFFEID). It presents danki's current certificate
// at each handshake and checks the pod's certificate the way sidecars check
// each other: its chain against the mesh root and its SPIFFE URI SAN, with
// no hostname check (a sidecar's certificate names its workload, not a DNS
// name or the pod's IP). A pod that proves another identity fails the
// handshake with an *IdentityMismatchError.
func (id *Identity) ClientConfig(want string, p Protocol) *tls.Config {
	roots := id.Roots()
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		NextProtos:           p.ALPN(),
		GetClientCertificate: id.GetClientCertificate,
		// The standard check wants a DNS name or IP in the certificate;
		// VerifyConnection does the mesh's check instead, on every
		// connection (resumed ones too).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPeer(cs.PeerCertificates, roots, want, id.clock.Now())
		},
	}
}

// DialTLSContext dials addr (podIP:port) with a plain net.Dialer and
// completes Handshake over it. Load paths bound by the operator's network
// policy dial with their checked dialer and call Handshake themselves.
func (id *Identity) DialTLSContext(ctx context.Context, network, addr, want string, p Protocol) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	return id.Handshake(ctx, raw, addr, want, p)
}

// Handshake completes the TLS handshake of ClientConfig(want, p) over raw,
// a connection to addr (podIP:port) already dialled, with an error that
// names the likely cause when it fails: a pod with no sidecar answering in
// plaintext, a sidecar that does not trust danki's certificate, another
// identity than want. raw is closed when the handshake fails.
func (id *Identity) Handshake(ctx context.Context, raw net.Conn, addr, want string, p Protocol) (net.Conn, error) {
	c := tls.Client(raw, id.ClientConfig(want, p))
	err := c.HandshakeContext(ctx)
	if err == nil {
		return c, nil
	}
	raw.Close()
	var mismatch *IdentityMismatchError
	if errors.As(err, &mismatch) || errors.Is(err, errNotMeshRoot) {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return nil, explainHandshake(err, addr)
}

// errNotMeshRoot is a pod whose certificate another CA signed.
var errNotMeshRoot = errors.New("the pod's certificate does not verify against the mesh root (is the pod in this mesh?)")

// verifyPeer checks a pod's chain (leaf first) against the mesh root at now
// and that the leaf names want.
func verifyPeer(certs []*x509.Certificate, roots *x509.CertPool, want string, now time.Time) error {
	if len(certs) == 0 {
		return errors.New("mtls: the pod presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("mtls: %w: %w", errNotMeshRoot, err)
	}
	got := spiffeIDs(certs[0])
	if !slices.Contains(got, want) {
		return &IdentityMismatchError{Want: want, Got: got}
	}
	return nil
}
