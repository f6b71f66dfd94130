// Package testutil holds test helpers shared by danki's packages, so that
// each fake lives in one place: a cold-starting HTTP server (ColdServer)
// that plays a JVM pod warming up, with latency curves for it (Decaying,
// Flat, NeverSettling); a fake Prometheus HTTP API (Prometheus); and
// WaitFor, which waits for an eventual state with a deadline.
//
// Only tests import it.
package testutil
