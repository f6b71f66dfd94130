// Package testutil holds test helpers shared by danki's packages, so that
// each fake lives in one place: a cold-starting HTTP server (ColdServer)
// that plays a JVM pod warming up, with latency curves for it (Decaying,
// Flat, NeverSettling); a fake Prometheus HTTP API (Prometheus); an Istio
// mesh in one process (Mesh: istiod's CA over TLS gRPC, an API server that
// issues tokens, workload certificates, pods behind a STRICT sidecar),
// which imports nothing of danki's so that pkg/mtls's own tests use it
// too; DashboardQueries, the panel queries of a Grafana dashboard (the
// shipped one is run against real Prometheus servers); and WaitFor, which
// waits for an eventual state with a deadline.
//
// Only tests import it.
package testutil
