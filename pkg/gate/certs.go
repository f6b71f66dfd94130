package gate

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Files of a certificate directory, as cert-manager writes a Secret of type
// kubernetes.io/tls (mounted) and controller-runtime's webhook server reads.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// DefaultCertValidity is how long a self-managed CA and serving certificate
// are valid. They are renewed at two thirds of it (Certs.RenewAt).
const DefaultCertValidity = 365 * 24 * time.Hour

// selfManagedCA is the self-managed CA's common name: a serving certificate
// issued by it is the gate's to renew; any other (cert-manager's) is not.
const selfManagedCA = "danki gate CA"

// Certs is a serving certificate, its key and the CA bundle that verifies
// it (the webhook configuration's caBundle).
type Certs struct {
	CertPEM, KeyPEM, CABundle []byte
	Leaf                      *x509.Certificate
}

// SelfSignedCerts makes a self-managed CA and a serving certificate signed
// by it for hosts (DNS names or IPs), valid for DefaultCertValidity, and
// writes them to dir (tls.crt, tls.key and the CA as ca.crt). It returns the
// CA certificate in PEM: the caBundle of the webhook configuration.
func SelfSignedCerts(dir string, hosts []string) ([]byte, error) {
	c, err := NewCerts(hosts, DefaultCertValidity, time.Now(), nil)
	if err != nil {
		return nil, err
	}
	if err := c.Write(dir); err != nil {
		return nil, err
	}
	return c.CABundle, nil
}

// NewCerts makes a new self-managed CA and a serving certificate signed by
// it for hosts, both valid for validity from now. The CA bundle is the new
// CA followed by the CAs of previous that are still valid at now: a client
// that got the bundle keeps trusting the serving certificate it replaces.
func NewCerts(hosts []string, validity time.Duration, now time.Time, previous []byte) (*Certs, error) {
	return issue(selfManagedCA, hosts, validity, now, previous)
}

// issue makes a CA named caName and a serving certificate signed by it.
func issue(caName string, hosts []string, validity time.Duration, now time.Time, previous []byte) (*Certs, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate validity %s: must be positive", validity)
	}
	// Backdated a little for clocks behind ours; a tenth of a short
	// validity at most, so that a test's seconds-long one stays short.
	notBefore := now.Add(-min(time.Hour, validity/10))
	notAfter := now.Add(validity)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caSerial, err := serial()
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: caSerial, Subject: pkix.Name{CommonName: caName, SerialNumber: caSerial.Text(16)},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	leafSerial, err := serial()
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: leafSerial, Subject: pkix.Name{CommonName: "danki gate webhook"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if h == "" {
			continue // --webhook-host "" (all interfaces): no name
		}
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	leafCert, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return nil, fmt.Errorf("parse serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal serving key: %w", err)
	}
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	old, _ := parseCerts(previous) // a bundle that does not parse is dropped
	for _, c := range old {
		if now.Before(c.NotAfter) {
			bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	return &Certs{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CABundle: bundle,
		Leaf:     leafCert,
	}, nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// ReadCerts reads the certificates of dir: tls.crt and tls.key, and ca.crt
// when there is one.
func ReadCerts(dir string) (*Certs, error) {
	var c Certs
	var err error
	if c.CertPEM, err = os.ReadFile(filepath.Join(dir, CertFile)); err != nil {
		return nil, fmt.Errorf("read serving certificate: %w", err)
	}
	if c.KeyPEM, err = os.ReadFile(filepath.Join(dir, KeyFile)); err != nil {
		return nil, fmt.Errorf("read serving key: %w", err)
	}
	if c.CABundle, err = os.ReadFile(filepath.Join(dir, CAFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	leaf, err := parseCerts(c.CertPEM)
	if err != nil || len(leaf) == 0 {
		return nil, fmt.Errorf("parse %s in %s: %w", CertFile, dir, cmpErr(err, errors.New("no certificate")))
	}
	c.Leaf = leaf[0]
	return &c, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// Write writes the certificates to dir: the key, then the certificate, then
// the CA bundle, each replaced whole (a temporary file renamed), so the
// webhook server's certificate watcher never reads half a file.
func (c *Certs) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{KeyFile, c.KeyPEM}, {CertFile, c.CertPEM}, {CAFile, c.CABundle}} {
		tmp, err := os.CreateTemp(dir, "."+f.name+"-")
		if err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
		_, err = tmp.Write(f.data)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(dir, f.name))
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}

// SelfManaged reports whether the serving certificate was issued by the
// gate's self-managed CA (and so is the gate's to renew).
func (c *Certs) SelfManaged() bool { return c.Leaf.Issuer.CommonName == selfManagedCA }

// RenewAt is when the serving certificate is renewed: at two thirds of its
// life, leaving a third for a renewal that fails to be retried.
func (c *Certs) RenewAt() time.Time {
	return c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 3 * 2)
}

// Covers reports whether the serving certificate is valid for every host.
func (c *Certs) Covers(hosts []string) bool {
	for _, h := range hosts {
		if h != "" && c.Leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// EnsureCerts makes sure dir holds a serving certificate for hosts that is
// not due for renewal. A directory without tls.crt gets a self-managed CA
// and certificate. A self-managed one (from an earlier run, a persisted
// --cert-dir) is renewed if it is past RenewAt at now or does not cover
// hosts; its CA stays in the new bundle while valid. A certificate from
// elsewhere (cert-manager's Secret, mounted) is left alone: its issuer
// renews it and the webhook server reloads it. It returns the certificates
// in dir and whether it wrote them.
func EnsureCerts(dir string, hosts []string, validity time.Duration, now time.Time) (*Certs, bool, error) {
	cur, err := ReadCerts(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cur = nil
	case err != nil:
		return nil, false, err
	case !cur.SelfManaged():
		return cur, false, nil
	case now.Before(cur.RenewAt()) && cur.Covers(hosts):
		return cur, false, nil
	}
	var previous []byte
	if cur != nil {
		previous = cur.CABundle
	}
	c, err := NewCerts(hosts, validity, now, previous)
	if err != nil {
		return nil, false, err
	}
	if err := c.Write(dir); err != nil {
		return nil, false, err
	}
	return c, true, nil
}

// parseCerts parses the PEM certificates of a bundle.
func parseCerts(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return out, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
}

// maxBundle bounds the CAs MergeCABundle keeps: replicas of the gate each
// have their own self-managed CA, and one that restarted leaves its old CA
// behind until it expires.
const maxBundle = 8

// MergeCABundle is the caBundle that trusts ours (a PEM bundle) as well as
// the certificates of current still valid at now, without duplicates: ours
// first, then current's newest first, at most maxBundle in all. Other
// replicas of the gate each add their own CA the same way.
func MergeCABundle(current, ours []byte, now time.Time) ([]byte, error) {
	mine, err := parseCerts(ours)
	if err != nil {
		return nil, fmt.Errorf("our CA bundle: %w", err)
	}
	if len(mine) == 0 {
		return nil, errors.New("our CA bundle holds no certificate")
	}
	theirs, _ := parseCerts(current) // what does not parse is dropped
	slices.SortStableFunc(theirs, func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })
	var out []byte
	var kept []*x509.Certificate
	for _, c := range append(mine, theirs...) {
		if !now.Before(c.NotAfter) || len(kept) >= max(maxBundle, len(mine)) ||
			slices.ContainsFunc(kept, func(k *x509.Certificate) bool { return bytes.Equal(k.Raw, c.Raw) }) {
			continue
		}
		kept = append(kept, c)
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out, nil
}
