package mtls

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultTrustDomain is Istio's default trust domain (meshConfig
// trustDomain).
const DefaultTrustDomain = "cluster.local"

// SPIFFEID is the identity Istio gives a workload running as ServiceAccount
// sa in namespace ns: spiffe://<trustDomain>/ns/<ns>/sa/<sa>. An empty
// trustDomain is DefaultTrustDomain.
func SPIFFEID(trustDomain, ns, sa string) string {
	return "spiffe://" + cmp.Or(trustDomain, DefaultTrustDomain) + "/ns/" + ns + "/sa/" + sa
}

// PodSPIFFEID is the identity pod's sidecar presents: its ServiceAccount's
// SPIFFE ID ("default" when the pod names none, as the API server does).
func PodSPIFFEID(trustDomain string, pod *corev1.Pod) string {
	return SPIFFEID(trustDomain, pod.Namespace, cmp.Or(pod.Spec.ServiceAccountName, "default"))
}

// TrustDomainOf returns the trust domain of a SPIFFE ID
// ("spiffe://cluster.local/ns/a/sa/b" → "cluster.local").
func TrustDomainOf(id string) (string, error) {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	td, _, _ := strings.Cut(rest, "/")
	if !ok || td == "" {
		return "", fmt.Errorf("mtls: %q is not a SPIFFE ID (want spiffe://<trust domain>/ns/<ns>/sa/<sa>)", id)
	}
	return td, nil
}

// spiffeIDs returns a certificate's spiffe:// URI SANs, the identities
// Istio puts in workload certificates (which carry no DNS or IP SANs).
func spiffeIDs(cert *x509.Certificate) []string {
	var ids []string
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			ids = append(ids, u.String())
		}
	}
	return ids
}
