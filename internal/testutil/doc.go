// Package testutil holds test helpers shared by danki's packages, so that
// each fake lives in one place: a cold-starting HTTP server (ColdServer)
// that plays a JVM pod warming up, and latency curves for it.
//
// Only tests import it.
package testutil
