package warmupstep

import (
	"cmp"
	"time"

	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Step polling: how often a caller that runs the warm-up as a job (the
// danki/warmup Argo step) asks for its status. Argo Rollouts ignores
// requeue intervals of 10 s or less (and then waits 30 s).
const (
	DefaultPollInterval = 15 * time.Second
	MinPollInterval     = 10 * time.Second
)

// StepConfig is the danki/warmup step's config (`plugin: {name:
// danki/warmup, config: {...}}` in a Rollout): what to send, where the pods
// are, how often the step is polled, and the optional capacity check and
// mirror source. docs/warmup.md documents every field.
type StepConfig struct {
	warmup.Config
	warmup.TargetConfig
	// PollInterval is how often the step is polled while running. Default 15s.
	PollInterval config.Duration `json:"pollInterval,omitempty"`
	// Capacity, if set, is a capacity check run on one canary pod once all
	// converged, at weight 0 (pkg/capacity.Check, docs/capacity.md). Parsed
	// with its defaults and the operator's policy; the warm-up's request
	// mix and health path are not inherited yet (Job assembly does that).
	Capacity *capacity.Check `json:"capacity,omitempty"`
	// Mirror, if set, warms the canary on mirrored user traffic
	// (pkg/mirror.Config, docs/warmup.md "Mirrored traffic"), with its
	// defaults.
	Mirror *mirror.Config `json:"mirror,omitempty"`
	// YieldCPU lowers each canary pod's CPU request in place to the
	// kernel's least weight while it warms (pods/resize, Kubernetes ≥
	// 1.33), so the stable pods serving users run first, and puts back its
	// template's request before the pod is reported warm (yield.go).
	// Default true. Warm while yielding is warm; a verdict against a pod
	// (slower than stable, not warm by half the deadline or half of
	// maxRequests) waits for its full weight, in the same run
	// (warmup.Yield). A pod that cannot yield (no pods/resize right, a
	// Guaranteed pod, a LimitRange-set request) warms at full weight, said
	// in the step's message. Unset with mirror mode only (no synthetic
	// load, so no judgement at full weight): no yield.
	YieldCPU *bool `json:"yieldCPU,omitempty"`
}

// ParseStepConfig decodes (strictly, JSON or YAML) the whole step config
// once, capacity and mirror blocks included, then defaults and validates it
// under the operator's policy p, which the returned Config keeps
// (Config.Policy: its caps, files, and the addresses its connections may go
// to). An empty or null config takes every default. Every problem is in
// one error list, each naming its field path (`capacity.minQPS: …`).
func ParseStepConfig(raw []byte, p policy.Policy) (StepConfig, error) {
	var c StepConfig
	if len(raw) > 0 && string(raw) != "null" {
		if err := config.Decode(raw, &c); err != nil {
			return c, err
		}
	}
	var errs config.Errors
	var err error
	c.Config, c.TargetConfig, err = warmup.Resolve(c.Config, c.TargetConfig, p)
	errs.Add("", err)
	c.PollInterval = cmp.Or(c.PollInterval, config.Duration(DefaultPollInterval))
	if c.PollInterval.D() <= MinPollInterval {
		errs.Addf("pollInterval", "%s is too short: Argo Rollouts ignores requeue intervals of 10s or less (and waits 30s); use e.g. \"15s\"", c.PollInterval)
	}
	if c.Capacity != nil {
		check, err := c.Capacity.Resolve(p)
		errs.Add("", err) // capacity's errors name "capacity.…" already
		c.Capacity = &check
	}
	if c.Mirror != nil {
		m := c.Mirror.WithDefaults()
		errs.Add("", m.Validate()) // named "mirror.…" already
		c.Mirror = &m
	}
	return c, errs.Err()
}
