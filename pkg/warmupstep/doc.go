// Package warmupstep is the danki/warmup step, plain Go (no Argo types):
// StepConfig is its config, decoded once (capacity and mirror blocks typed)
// with one field-path error list (config.go); Step assembles a Rollout's
// warm-up job — its targets and pod guard, the owner check on the Rollout,
// the users' latency on stable from the router's gate for the neighbour
// guard, the capacity check and its record on the Rollout, the mirror —
// (step.go, mirror.go); the Supervisor runs those jobs in the background on
// a pkg/jobs Runner, idempotent per RunKey and resumed after a plugin
// restart (supervisor.go); Status is the progress Argo stores and hands
// back, whose JSON is a stored wire format (status.go). The warm-up itself
// is pkg/warmup's engine; rollouts/step.go translates Argo's step RPC to
// this package, with the Rollout as a Rollout and its clients as Clients.
package warmupstep
