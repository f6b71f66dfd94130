package capacity

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// DefaultMinRatioToPrevious fails a canary whose knee fell below 0.8× the
// knee its stable revision had as a canary.
const DefaultMinRatioToPrevious = 0.8

// Check is the danki/warmup step's capacity block: once the canary pods are
// warm, at weight 0 with no user on them, find one pod's knee and fail the
// step — before any user weight — when it is below MinQPS, or below
// MinRatioToPrevious × the knee recorded for the stable revision.
type Check struct {
	Config
	// MinQPS is the rate one pod must sustain: peak traffic ÷ replicas ×
	// headroom. Required. MaxQPS defaults to 4 × MinQPS here, so the ramp
	// stops well past the floor instead of looking for a knee nobody needs.
	MinQPS float64 `json:"minQPS"`
	// MinRatioToPrevious fails a knee below this share of the stable
	// revision's, as recorded when it was the canary (wellknown.CapacityKneesAnnotation).
	// Default 0.8; 0 compares with minQPS only. The first rollout, with
	// nothing recorded, passes this part with a note.
	MinRatioToPrevious *float64 `json:"minRatioToPrevious,omitempty"`
}

// ParseCheck decodes (strictly), defaults and validates a capacity block;
// errors name the field under "capacity.".
func ParseCheck(raw []byte, p policy.Policy) (Check, error) {
	var c Check
	if err := config.Decode(raw, &c); err != nil {
		return c, fmt.Errorf("capacity: %w", err)
	}
	return c.Resolve(p)
}

// Resolve readies a decoded check under the operator's policy p: c keeps p,
// takes its defaults (maxQPS never above p's cap) and is checked, every
// problem in one error list naming its field (capacity.…). The danki/warmup
// step decodes its capacity block with the rest of its config and calls
// this.
func (c Check) Resolve(p policy.Policy) (Check, error) {
	c.Policy = &p
	if c.MaxQPS == 0 && c.MinQPS > 0 {
		// A default: never above the operator's cap (a minQPS above it is
		// then named as above maxQPS).
		c.MaxQPS = min(4*c.MinQPS, c.limits().QPS)
	}
	c.Config = c.Config.WithDefaults()
	if c.MinRatioToPrevious == nil {
		r := DefaultMinRatioToPrevious
		c.MinRatioToPrevious = &r
	}
	var errs config.Errors
	if r := *c.MinRatioToPrevious; r < 0 || r > 1 {
		errs.Addf("capacity.minRatioToPrevious", "must be between 0 (off) and 1: the share of the stable revision's knee the canary must reach (got %g)", r)
	}
	if c.MinQPS <= 0 {
		errs.Addf("capacity.minQPS", "required: the rate one pod must sustain (peak ÷ replicas × headroom), e.g. 150")
	} else if c.MinQPS > c.MaxQPS {
		errs.Addf("capacity.maxQPS", "%g is below minQPS %g", c.MaxQPS, c.MinQPS)
	}
	errs.Add("capacity", c.Config.Validate())
	return c, errs.Err()
}

// Inherit fills what the capacity block leaves unset — the request mix (with
// its side-effect permission), the marker header, the health path, mtls — from the
// warm-up's, so a step describes its requests once.
func (c Check) Inherit(w warmup.Config) Check {
	if len(c.Requests) == 0 {
		c.Requests, c.AllowSideEffects = w.Requests, c.AllowSideEffects || w.AllowSideEffects
	}
	if c.MarkerHeader == "" {
		c.MarkerHeader, c.MarkerHeaderConfirm = w.MarkerHeader, w.MarkerHeaderConfirm
	}
	if c.HealthPath == "" {
		c.HealthPath = w.HealthPath
	}
	if c.MTLS == "" {
		c.MTLS = w.MTLS // the pod is dialled as the warm-up dialled it
	}
	// The operator's policy and the step's guard bind the check as they
	// bind the warm-up: Run validates the caps again under it, before any
	// load, and every connection goes through its dialer.
	if c.Policy == nil {
		c.Policy = w.Policy
	}
	if c.Guard == nil {
		c.Guard = w.Guard
	}
	return c
}

// Run finds target's knee and judges it against MinQPS and, when given, the
// stable revision's recorded knee. It returns the summary and the knee to
// record (Revision left for the caller); the error names the knee, the bound
// it broke and the step that broke, with the curve.
func (c Check) Run(ctx context.Context, target warmup.Target, previous *Knee, report func(string)) (string, Knee, error) {
	res, err := Run(ctx, c.Config, target, func(s Step) {
		verdict := "ok"
		if s.Broke != "" {
			verdict = "broke: " + s.Broke
		}
		report(fmt.Sprintf("capacity check on %s: %s qps asked, %s served, p99 %s: %s", target, formatQPS(s.AskedQPS), formatQPS(s.AchievedQPS), latency.Format(s.P99), verdict))
	})
	if err != nil {
		return "", Knee{}, fmt.Errorf("capacity check on %s: %w", target, err)
	}
	knee := Knee{QPS: res.KneeQPS, Capped: capped(res), At: time.Now().UTC()}
	if res.KneeQPS < c.MinQPS {
		return "", knee, fmt.Errorf("capacity check on %s: knee %s qps is below minQPS %g — %s; curve: %s", target, formatQPS(res.KneeQPS), c.MinQPS, res.Reason, curve(res))
	}
	vsPrevious, err := c.comparePrevious(knee, previous)
	if err != nil {
		return "", knee, fmt.Errorf("capacity check on %s: %w — %s; curve: %s", target, err, res.Reason, curve(res))
	}
	return fmt.Sprintf("capacity: knee %s qps ≥ minQPS %g on %s; %s (%s)", formatQPS(res.KneeQPS), c.MinQPS, target, vsPrevious, res.Reason), knee, nil
}

// capped says the ramp reached maxQPS without a broken step.
func capped(r *Result) bool {
	for _, s := range r.Steps {
		if s.Broke != "" {
			return false
		}
	}
	return len(r.Steps) > 0
}

// comparePrevious judges knee against the stable revision's, returning what
// to say when it passes.
func (c Check) comparePrevious(knee Knee, previous *Knee) (string, error) {
	ratio := *c.MinRatioToPrevious
	switch {
	case ratio == 0:
		return "no comparison with the stable revision (minRatioToPrevious 0)", nil
	case previous == nil:
		return "no knee recorded for the stable revision yet (its first capacity check): compared with minQPS only", nil
	}
	bound := ratio * previous.QPS
	at := previous.At.Format(time.DateOnly)
	if knee.QPS >= bound {
		return fmt.Sprintf("%.2f× the stable revision %s's knee %s qps (%s; bound %g×)", knee.QPS/previous.QPS, previous.Revision, formatQPS(previous.QPS), at, ratio), nil
	}
	if knee.Capped {
		// The ramp stopped at maxQPS before reaching the bound: not a
		// finding about the canary, but nothing shows it keeps up either.
		return "", fmt.Errorf("the ramp stopped at maxQPS %s qps, below %g × the stable revision %s's knee %s qps: raise capacity.maxQPS above %s to compare", formatQPS(c.MaxQPS), ratio, previous.Revision, formatQPS(previous.QPS), formatQPS(bound))
	}
	return "", fmt.Errorf("knee %s qps is %.2f× the stable revision %s's knee %s qps (%s), below minRatioToPrevious %g", formatQPS(knee.QPS), knee.QPS/previous.QPS, previous.Revision, formatQPS(previous.QPS), at, ratio)
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
