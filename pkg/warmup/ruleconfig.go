package warmup

import "github.com/danki-dev/danki/pkg/warmup/rule"

// ruleConfig is the stopping rule's config from c (defaulted and
// validated): the user's knobs, and how this run judges its targets —
// reject: a slower version fails the warm-up (rejecting); judgeStable:
// stable is the warm answer and rejects nothing (Options.JudgeAgainstStable).
func (c *Config) ruleConfig(reject, judgeStable bool) rule.Config {
	maxErrorRatio := DefaultMaxErrorRatio
	if c.MaxErrorRatio != nil {
		maxErrorRatio = *c.MaxErrorRatio
	}
	return rule.Config{
		Window:             c.Window,
		StableWindows:      c.StableWindows,
		MinRequests:        c.MinRequests,
		MaxRequests:        c.MaxRequests,
		Tolerance:          c.Tolerance,
		AbsoluteTolerance:  c.AbsoluteTolerance.D(),
		MaxErrorRatio:      maxErrorRatio,
		StableRatio:        c.StableRatio,
		RejectRatio:        c.RejectRatio,
		RejectFloor:        c.RejectFloor.D(),
		CompareToStable:    c.CompareToStable,
		AcceptNearStable:   c.AcceptNearStable != nil && *c.AcceptNearStable,
		Reject:             reject,
		JudgeAgainstStable: judgeStable,
	}
}

// newRule is the stopping rule of a run with config c (see ruleConfig).
func (c *Config) newRule(reject, judgeStable bool) (*rule.Rule, error) {
	return rule.New(c.ruleConfig(reject, judgeStable))
}

// MinStop is the fewest requests per target after which the stopping rule
// can call a pod warm: MinRequests, and two blocks of windows.
func (c *Config) MinStop() int64 {
	rc := c.ruleConfig(false, false)
	return rc.MinStop()
}
