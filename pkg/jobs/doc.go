// Package jobs runs keyed background jobs for plugin calls that poll: the
// danki/warmup step's supervised warm-ups (pkg/warmupstep) and the
// danki/latency provider's source: load measurements (rollouts). A Runner
// starts a job under a key (a second start of the key replaces the first),
// finds it again for the next poll, stops every job under a key prefix
// (waiting, within a bound, for their work to end) and forgets a finished
// job Keep after it ended: one set of start, stop and expiry rules for both.
// Progress is a job value for jobs that only report a message and a result.
package jobs
