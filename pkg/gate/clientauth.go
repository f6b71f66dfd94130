package gate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// webhookClientAuth is the webhook server's TLS option that serves only
// clients presenting a certificate issued by the CAs in caFile — the API
// server, configured to present one to the gate's webhook (its
// admission-control configuration's kubeconfig: docs/gate.md, "Who may
// call the webhook") — and, when names is not empty, naming one of them
// (the certificate's common name or a DNS name). Without it the webhook
// answers whoever reaches its port: its answers then carry nothing a
// caller can use on a pod of its own (the record's signature is bound to
// the pod's creation, docs/gate.md). The CA file is read once, at start.
func webhookClientAuth(caFile string, names []string) (func(*tls.Config), error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("webhook client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("webhook client CA %s: no PEM certificate in it", caFile)
	}
	return func(c *tls.Config) {
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if len(names) == 0 {
			return
		}
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && clientNamed(chain[0], names) {
					return nil
				}
			}
			return errClientNotAllowed
		}
	}, nil
}

var errClientNotAllowed = errors.New("webhook client certificate names none of --webhook-client-name")

// clientNamed reports whether the certificate's common name or one of its
// DNS names is in names.
func clientNamed(c *x509.Certificate, names []string) bool {
	if slices.Contains(names, c.Subject.CommonName) {
		return true
	}
	for _, n := range c.DNSNames {
		if slices.Contains(names, n) {
			return true
		}
	}
	return false
}
