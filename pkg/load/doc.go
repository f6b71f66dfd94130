// Package load sends paced HTTP load with fortio, for the warm-up
// (pkg/warmup) and the demo's user traffic (lab/traffic).
//
// A Runner is fortio's periodic runner driving one fortio std client per
// connection, with danki's settings: paced to QPS without catch-up bursts
// after a stall (NoCatchUp), connections staggered (Uniform), running until
// Stop, fortio's report sent nowhere (RunnerOptions.Out defaults to stdout,
// which belongs to go-plugin in `danki plugin`) and fortio's own logging
// kept to real trouble. Every request goes to the Options.Recorder
// (periodic's AccessLogger), the first on each connection included: the
// Runner drives periodic with its own Runnable, so there is no unrecorded
// warm-up call as in `fortio load`.
//
// With a Pace instead of a fixed QPS, the rate may change while the Runner
// runs (the warm-up ramps a cold pod's pace up and backs off for its
// neighbours): periodic then drives the connections unpaced and each waits
// for its turn at the Pace, with the same no-burst rule; the Recorder still
// gets every request sent, timed without the wait.
package load
