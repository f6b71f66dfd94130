package mtls

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Where istiod publishes the mesh root: it writes this ConfigMap into every
// namespace when its CA is on (the sidecars read it the same way).
const (
	RootConfigMap    = "istio-ca-root-cert"
	RootConfigMapKey = "root-cert.pem"
)

// RootsFromPEM reads the mesh root (one or more PEM certificates; during a
// root rotation istiod publishes old and new together) into a pool. It
// fails when pemData holds no certificate, so that a wrong file is caught
// before the first dial rather than as "unknown authority" on every pod.
func RootsFromPEM(pemData []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := pemData; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("mtls: mesh root: certificate %d: %w", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errors.New("mtls: mesh root: no PEM CERTIFICATE found")
	}
	return pool, nil
}

// RootsFromConfigMap reads the mesh root from the istio-ca-root-cert
// ConfigMap of namespace ns (danki's own, usually: istiod writes it there
// too).
func RootsFromConfigMap(ctx context.Context, client kubernetes.Interface, ns string) (*x509.CertPool, error) {
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, RootConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("mtls: mesh root: ConfigMap %s/%s not found: istiod writes it into every namespace when its CA is on; with an external CA, give the root PEM instead: %w", ns, RootConfigMap, err)
	}
	if err != nil {
		return nil, fmt.Errorf("mtls: mesh root: reading ConfigMap %s/%s: %w", ns, RootConfigMap, err)
	}
	data, ok := cm.Data[RootConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("mtls: mesh root: ConfigMap %s/%s has no key %s", ns, RootConfigMap, RootConfigMapKey)
	}
	pool, err := RootsFromPEM([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", ns, RootConfigMap, err)
	}
	return pool, nil
}
