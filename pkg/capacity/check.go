package capacity

import (
	"context"
	"fmt"
	"strings"

	"github.com/danki-dev/danki/internal/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Check is the danki/warmup step's capacity block: once the canary pods are
// warm, at weight 0 with no user on them, find one pod's knee and fail the
// step — before any user weight — when it is below MinQPS.
type Check struct {
	Config
	// MinQPS is the rate one pod must sustain: peak traffic ÷ replicas ×
	// headroom. Required. MaxQPS defaults to 4 × MinQPS here, so the ramp
	// stops well past the floor instead of looking for a knee nobody needs.
	MinQPS float64 `json:"minQPS"`
}

// ParseCheck decodes (strictly), defaults and validates a capacity block;
// errors name the field under "capacity.".
func ParseCheck(raw []byte) (Check, error) {
	var c Check
	if err := config.Decode(raw, &c); err != nil {
		return c, fmt.Errorf("capacity: %w", err)
	}
	if c.MaxQPS == 0 && c.MinQPS > 0 {
		c.MaxQPS = 4 * c.MinQPS
	}
	c.Config = c.Config.WithDefaults()
	var errs config.Errors
	if c.MinQPS <= 0 {
		errs.Addf("capacity.minQPS", "required: the rate one pod must sustain (peak ÷ replicas × headroom), e.g. 150")
	} else if c.MinQPS > c.MaxQPS {
		errs.Addf("capacity.maxQPS", "%g is below minQPS %g", c.MaxQPS, c.MinQPS)
	}
	errs.Add("capacity", c.Config.Validate())
	return c, errs.Err()
}

// Run finds target's knee and judges it; the summary names the knee, the
// error the knee, the floor and the step that broke, with the curve.
func (c Check) Run(ctx context.Context, target warmup.Target, report func(string)) (string, error) {
	res, err := Run(ctx, c.Config, target, func(s Step) {
		verdict := "ok"
		if s.Broke != "" {
			verdict = "broke: " + s.Broke
		}
		report(fmt.Sprintf("capacity check on %s: %s qps asked, %s served, p99 %s: %s", target, formatQPS(s.AskedQPS), formatQPS(s.AchievedQPS), latency.Format(s.P99), verdict))
	})
	if err != nil {
		return "", fmt.Errorf("capacity check on %s: %w", target, err)
	}
	if res.KneeQPS < c.MinQPS {
		return "", fmt.Errorf("capacity check on %s: knee %s qps is below minQPS %g — %s; curve: %s", target, formatQPS(res.KneeQPS), c.MinQPS, res.Reason, curve(res))
	}
	return fmt.Sprintf("capacity: knee %s qps ≥ minQPS %g on %s (%s)", formatQPS(res.KneeQPS), c.MinQPS, target, res.Reason), nil
}

// curve is the steps on one line: "20 ok, 30 ok, 45 broke".
func curve(r *Result) string {
	parts := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		v := "ok"
		if s.Broke != "" {
			v = "broke"
		}
		parts[i] = fmt.Sprintf("%s qps p99 %s %s", formatQPS(s.AskedQPS), latency.Format(s.P99), v)
	}
	return strings.Join(parts, ", ")
}
