// Package shift reads and changes the canary weight on an Istio
// VirtualService, and ramps it gradually, gated on tail latency.
//
// It is plain Go over the Istio client (networking.istio.io/v1): no Argo
// types. The danki/istio Argo Rollouts traffic-router plugin (package
// rollouts) and the `danki shift` command are thin front ends to it.
//
// What it manages. A Target names a VirtualService and the routes on it that
// split traffic between a stable and a canary destination, either by host (two
// Services) or by subset (one host, two DestinationRule subsets). Only those
// routes' weights change, and only their stable, canary and additional (Argo
// experiment) destinations; every other route, field, match and destination
// stays exactly as it was. A managed route's weights always sum to 100.
// Header and mirror routes (Argo's setHeaderRoute and setMirrorRoute steps)
// are added above the primary routes in managed-route order and removed
// cleanly. Every route danki adds carries the primary route's headers block
// and strips the warm-up marker header; danki removes, replaces, reorders
// or reweighs an added route only when its content proves it danki's (route
// names and annotations are the tenant's to write: owned.go).
//
// Safety. Every change is validated in full before anything is written, then
// written in one Update; a 409 Conflict is retried with a fresh read, so a
// stale spec is never written and nothing is half-applied.
//
// The ramp. Ramp raises the canary weight from where it is to a target in
// increments, no faster than an interval, holding each weight until a Gate
// passes. On a breach it goes back to the last good weight and halves the
// increment; after MaxBreaches it fails. Its state lives in the
// danki.dev/ramp annotation on the VirtualService, so a restarted plugin
// carries on where the last one stopped. Plan.Next is the pure decision; Ramp
// reads the VirtualService, asks Plan.Next and writes the result, one move per
// call, so the plugin (called repeatedly) and the CLI (which loops) drive the
// same logic.
//
// The router. Router is the danki/istio plugin's logic for a caller that
// calls repeatedly and concurrently for many rollouts: RouterConfig is its
// configuration (Bind decodes it strictly and resolves it against the
// rollout's Scope), calls are serialised per VirtualService, each
// rollout's gate is built once, and a failed ramp aborts the rollout and
// records Warning events through the Aborter and Recorder the front end
// implements (package rollouts: Argo's status patch and core Events).
package shift
