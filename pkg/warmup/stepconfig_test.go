package warmup

import (
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// testStepConfig is the warm-up part of a danki/warmup step config.
type testStepConfig struct {
	Config
	TargetConfig
	PollInterval config.Duration `json:"pollInterval,omitempty"`
}

// ParseStepConfig parses a step config's warm-up part as
// pkg/warmupstep.ParseStepConfig does: a strict decode, then Resolve (the
// policy kept, defaults, Config and TargetConfig checked). pkg/warmupstep
// imports this package, so this package's tests cannot call it.
func ParseStepConfig(raw []byte, p policy.Policy) (testStepConfig, error) {
	var c testStepConfig
	if len(raw) > 0 && string(raw) != "null" {
		if err := config.Decode(raw, &c); err != nil {
			return c, err
		}
	}
	var err error
	c.Config, c.TargetConfig, err = Resolve(c.Config, c.TargetConfig, p)
	return c, err
}
