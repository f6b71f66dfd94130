// Package mtls lets danki speak Istio mTLS itself: it obtains a mesh
// certificate for danki's own ServiceAccount from istiod's CA, renews it,
// and dials one chosen pod with it, verifying the pod as the SPIFFE ID of
// the pod's ServiceAccount. It is plain Go (client-go, grpc and Istio's API
// types; no Argo, no cobra) and imports nothing of danki's: every load path
// (the warm-up step, the gate, source: load, capacity, the CLI) can use it.
//
// Why it exists:
//   - Most production meshes run PeerAuthentication STRICT, and a STRICT
//     sidecar resets a plaintext connection. danki has no sidecar of its
//     own, so its warm-up load was refused.
//   - Per-pod warming needs podIP dialing: a cold pod must get the load,
//     not whichever pod a Service picks. A sidecar in danki's pod would route
//     the load by Service, where a cold pod hides behind warm ones, so danki
//     dials podIP:port and does the TLS itself, as a sidecar would.
//   - istiod takes the identity from the token, not from the CSR: the
//     certificate names the ServiceAccount the TokenRequest was made for,
//     whatever the CSR asks. So danki's RBAC needs only create on
//     serviceaccounts/token for its own ServiceAccount, and the app sees
//     danki's principal in x-forwarded-client-cert, which a user cannot
//     forge through the gateway.
//
// The map, one file per concern:
//   - mode.go: Mode (auto | istio | off), parsed with an error naming the
//     mtls field, and the per-pod choice: auto dials with mTLS when the pod
//     carries Istio's label security.istio.io/tlsMode: istio or, without
//     that label, an istio-proxy container (the label decides when set, as
//     for Istio's own clients).
//   - spiffe.go: SPIFFE IDs (spiffe://<trust domain>/ns/<ns>/sa/<sa>), for a
//     ServiceAccount and for a pod, and reading one from a certificate.
//   - roots.go: the mesh root, from the istio-ca-root-cert ConfigMap or a
//     PEM the operator gives, as an x509.CertPool.
//   - token.go: TokenSource and ServiceAccountToken, a TokenRequest for
//     danki's own ServiceAccount with audience istio-ca.
//   - ca.go: CA, one call of istio.v1.auth.IstioCertificateService/
//     CreateCertificate on istiod (TLS with the mesh root, bearer token,
//     ClusterID).
//   - identity.go: Identity, danki's workload certificate: an ECDSA P-256
//     key made in memory (never written), the CSR, renewal at 50–80 % of the
//     lifetime, and GetClientCertificate so that every new connection
//     presents the current certificate. Its ID and TrustDomain are read from
//     the certificate the CA signed, so the pods' SPIFFE IDs can use the
//     mesh's real trust domain rather than a configured guess.
//   - mesh.go: Mesh, one per danki process: the operator's MeshConfig, the
//     Identity minted on the first connection that needs it and shared by
//     every load path, PeerID (plaintext or the SPIFFE ID a pod must prove,
//     by Mode) and Dial (the caller's checked dial, then the handshake).
//   - dial.go: ClientConfig, Handshake and DialTLSContext for one pod: the client
//     certificate, Istio's ALPN (istio-http/1.1 or istio-h2), no hostname
//     check, the peer's chain verified against the mesh root and its URI SAN
//     held to the pod's SPIFFE ID.
//   - errors.go: errors that say what happened and what to change: a CA
//     refusal (token audience, RBAC), an identity mismatch (want vs seen),
//     ExplainPlaintextReset for a STRICT sidecar's reset, and an
//     AuthorizationPolicy's denial (DeniedHTTP, ExplainDenied) naming
//     danki's principal to allow.
package mtls
