// Package policy is what the operator allows danki to do on a tenant's
// behalf.
//
// danki's plugins run inside the Argo Rollouts controller and the warm gate
// holds cluster-wide pod rights; the configs they act on (a Rollout's step,
// an AnalysisTemplate, a pod's danki.dev/warm-up annotation) are written by
// tenants. A Policy comes from the operator — the plugins' args in
// argo-rollouts-config, the flags of `danki gate` — and everything that
// widens what danki may do lives here: the Prometheus servers it may query
// and their credentials, the addresses explicit URL targets may name, and
// the caps on every load knob. A tenant's config can only narrow it.
//
// The zero Policy is the strictest: no local files, no explicit URL
// targets, no Prometheus, the default caps. Local is the command line's,
// whose user is the operator.
//
// docs/security.md is the threat model this package implements.
package policy
