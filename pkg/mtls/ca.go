package mtls

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	securityv1alpha1 "istio.io/api/security/v1alpha1"
)

// Where istiod's CA listens, and the name its serving certificate carries
// (DNS SANs only: a client that dials an IP still verifies this name).
const (
	DefaultCAAddress    = "istiod.istio-system.svc:15012"
	DefaultCAServerName = "istiod.istio-system.svc"
	// DefaultClusterID is the cluster ID istiod knows the local cluster by
	// (its CLUSTER_ID); it picks the API server that reviews the token.
	DefaultClusterID = "Kubernetes"
)

// CA is istiod's certificate service, as a client. The zero values of
// Address, ServerName and ClusterID are the defaults above; Roots (the mesh
// root, which also signed istiod's serving certificate) and Token are
// required.
type CA struct {
	Address    string
	ServerName string
	Roots      *x509.CertPool
	ClusterID  string
	Token      TokenSource
	// Timeout bounds one call, dial included; zero is 30s.
	Timeout time.Duration
}

// Sign asks the CA to sign csrPEM for validity (the CA may shorten it) and
// returns the chain as the CA sends it: the leaf first, the root last. The
// identity in the leaf is the one the token proves, whatever the CSR says.
func (c CA) Sign(ctx context.Context, csrPEM []byte, validity time.Duration) ([]*x509.Certificate, error) {
	if c.Roots == nil || c.Token == nil {
		return nil, errors.New("mtls: CA: Roots and Token are required")
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, 30*time.Second))
	defer cancel()
	token, err := c.Token.Token(ctx)
	if err != nil {
		return nil, err
	}
	addr, serverName := cmp.Or(c.Address, DefaultCAAddress), cmp.Or(c.ServerName, DefaultCAServerName)
	clusterID := cmp.Or(c.ClusterID, DefaultClusterID)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs:    c.Roots,
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		return nil, fmt.Errorf("mtls: istiod's CA at %s: %w", addr, err)
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx,
		"authorization", "Bearer "+token,
		"ClusterID", clusterID)
	resp, err := securityv1alpha1.NewIstioCertificateServiceClient(conn).CreateCertificate(ctx, &securityv1alpha1.IstioCertificateRequest{
		Csr:              string(csrPEM),
		ValidityDuration: int64(validity / time.Second),
	})
	if err != nil {
		return nil, explainCAError(err, addr, serverName, clusterID, c.Token)
	}
	chain, err := parseChain(resp.GetCertChain())
	if err != nil {
		return nil, fmt.Errorf("mtls: istiod's CA at %s answered: %w", addr, err)
	}
	return chain, nil
}

// parseChain reads the CA's answer: one PEM certificate per element as
// istiod sends it, though an element may hold several (older CAs).
func parseChain(elems []string) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	for _, e := range elems {
		for rest := []byte(e); ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate %d of the chain: %w", len(chain)+1, err)
			}
			chain = append(chain, cert)
		}
	}
	if len(chain) == 0 {
		return nil, errors.New("no certificate in the chain")
	}
	return chain, nil
}
