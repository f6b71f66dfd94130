package warmup

import (
	"cmp"
	"encoding/json"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
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
// are, and how often the step is polled. docs/warmup.md documents every
// field.
type StepConfig struct {
	Config
	TargetConfig
	// PollInterval is how often the step is polled while running. Default 15s.
	PollInterval config.Duration `json:"pollInterval,omitempty"`
	// Capacity, if set, is a capacity check run on one canary pod once all
	// converged, at weight 0 (pkg/capacity.Check, docs/capacity.md); the
	// step plugin decodes it.
	Capacity json.RawMessage `json:"capacity,omitempty"`
	// Mirror, if set, warms the canary on mirrored user traffic
	// (pkg/mirror.Config, docs/warmup.md "Mirrored traffic"); the step
	// plugin decodes it.
	Mirror json.RawMessage `json:"mirror,omitempty"`
}

// ParseStepConfig decodes (strictly, JSON or YAML), defaults and validates
// a step config under the operator's policy p, which the returned
// Config keeps (Config.Policy: its caps, files, and the addresses its
// connections may go to). An empty or null config takes every default.
// Errors name the field path.
func ParseStepConfig(raw []byte, p policy.Policy) (StepConfig, error) {
	var c StepConfig
	if len(raw) > 0 && string(raw) != "null" {
		if err := config.Decode(raw, &c); err != nil {
			return c, err
		}
	}
	c.Config.Policy = &p
	c.Config, c.TargetConfig = c.Config.WithDefaults(), c.TargetConfig.WithDefaults()
	c.PollInterval = cmp.Or(c.PollInterval, config.Duration(DefaultPollInterval))
	var errs config.Errors
	errs.Add("", c.Config.Validate())
	errs.Add("", c.TargetConfig.Validate(p))
	if c.PollInterval.D() <= MinPollInterval {
		errs.Addf("pollInterval", "%s is too short: Argo Rollouts ignores requeue intervals of 10s or less (and waits 30s); use e.g. \"15s\"", c.PollInterval)
	}
	return c, errs.Err()
}
