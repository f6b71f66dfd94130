package warmup

// session is one run's config together with what Run worked out for it
// once the targets were known: how each address is dialled (meshRoutes).
// The user's Config stays as written; the transports (load, health, gRPC,
// the JIT signal) take the session.
type session struct {
	*Config
	routes meshRoutes
}

// meshRoutes say how a run dials each address: peers maps the addresses
// (host:port) dialled with mTLS to the SPIFFE ID the pod there must
// prove; plain holds the plaintext addresses of pods with a sidecar
// (resolvePeers).
type meshRoutes struct {
	peers map[string]string
	plain map[string]bool
}
