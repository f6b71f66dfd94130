package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Defaults of Config.
const (
	DefaultStartQPS         = 10.0
	DefaultFactor           = 1.5
	DefaultHold             = 10 * time.Second
	DefaultConnections      = 64
	DefaultMaxQPS           = 5000.0
	DefaultP99Ratio         = 3.0
	DefaultMaxErrorRate     = 0.01
	DefaultMinAchievedRatio = 0.9
	DefaultRefine           = 3
	DefaultConfirm          = 1
)

// Config is what to send and when a step breaks.
type Config struct {
	// Requests, AllowSideEffects, MarkerHeader, HealthPath, Timeout: the
	// warm-up's (docs/warmup.md).
	Requests         []warmup.RequestSpec `json:"requests,omitempty"`
	AllowSideEffects bool                 `json:"allowSideEffects,omitempty"`
	MarkerHeader     string               `json:"markerHeader,omitempty"`
	HealthPath       string               `json:"healthPath,omitempty"`
	Timeout          config.Duration      `json:"timeout,omitempty"`
	// StartQPS is the first step's rate; each next step is Factor times the
	// last, up to MaxQPS. Defaults 10, 1.5, 5000.
	StartQPS float64 `json:"startQPS,omitempty"`
	Factor   float64 `json:"factor,omitempty"`
	MaxQPS   float64 `json:"maxQPS,omitempty"`
	// Hold is how long each step lasts. Default 10s.
	Hold config.Duration `json:"hold,omitempty"`
	// Connections bounds requests in flight (an open-loop load needs
	// rate × latency of them). Default 64.
	Connections int `json:"connections,omitempty"`
	// P99 breaks a step whose p99 is above it (absolute); P99Ratio one
	// whose p99 is above this many times the first step's. Default ratio 3.
	P99      config.Duration `json:"p99,omitempty"`
	P99Ratio float64         `json:"p99Ratio,omitempty"`
	// MaxErrorRate breaks a step with more failed requests. Default 0.01.
	MaxErrorRate *float64 `json:"maxErrorRate,omitempty"`
	// MinAchievedRatio breaks a step whose achieved rate is below this
	// share of the offered one: the pod no longer keeps up. Default 0.9.
	MinAchievedRatio float64 `json:"minAchievedRatio,omitempty"`
	// Refine is how many bisection steps refine the knee between the last
	// good and the first broken rate. Default 3 (to 1/8 of the gap).
	Refine *int `json:"refine,omitempty"`
	// Confirm is how many times a broken step is measured again before it
	// counts: a step breaks only if every repeat breaks too. A GC pause or
	// a busy neighbour spikes one step's p99 (a few hundred requests: p99
	// is their few slowest); an overload breaks every time. Default 1.
	Confirm *int `json:"confirm,omitempty"`
	// MarkerHeaderConfirm: the warm-up's (a custom markerHeader with
	// allowSideEffects must be stated twice).
	MarkerHeaderConfirm string `json:"markerHeaderConfirm,omitempty"`

	// MTLS is the warm-up's mtls (docs/warmup.md): auto, istio or off,
	// when the pod is dialled with Istio mTLS. Default: in the step, the
	// warm-up's; else the operator's.
	MTLS mtls.Mode `json:"mtls,omitempty"`

	// Policy and Guard: the warm-up engine's (warmup.Config): the
	// operator's caps bound maxQPS, connections and timeout, and every
	// connection of the check goes through the policy's dialer. Nil Policy:
	// policy.Local(), the command line's; the step sets the plugin's.
	Policy *policy.Policy         `json:"-"`
	Guard  func(netip.Addr) error `json:"-"`
}

// limits are the operator's caps with their defaults.
func (c Config) limits() policy.Limits { return policy.OrLocal(c.Policy).Limits.WithDefaults() }

// WithDefaults returns a copy with zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	c.StartQPS = cmp.Or(c.StartQPS, DefaultStartQPS)
	c.Factor = cmp.Or(c.Factor, DefaultFactor)
	// Defaults never exceed the operator's caps: only what a config states
	// is refused for them.
	l := c.limits()
	c.MaxQPS = cmp.Or(c.MaxQPS, min(DefaultMaxQPS, l.QPS))
	c.Hold = cmp.Or(c.Hold, config.Duration(DefaultHold))
	c.Connections = cmp.Or(c.Connections, min(DefaultConnections, l.Connections))
	c.Timeout = cmp.Or(c.Timeout, config.Duration(min(warmup.DefaultTimeout, l.Timeout)))
	if c.P99 == 0 {
		c.P99Ratio = cmp.Or(c.P99Ratio, DefaultP99Ratio)
	}
	if c.MaxErrorRate == nil {
		v := DefaultMaxErrorRate
		c.MaxErrorRate = &v
	}
	c.MinAchievedRatio = cmp.Or(c.MinAchievedRatio, DefaultMinAchievedRatio)
	if c.Refine == nil {
		n := DefaultRefine
		c.Refine = &n
	}
	if c.Confirm == nil {
		n := DefaultConfirm
		c.Confirm = &n
	}
	return c
}

// Validate checks a defaulted Config; errors name the field.
func (c Config) Validate() error {
	var errs config.Errors
	if c.StartQPS <= 0 || c.MaxQPS < c.StartQPS {
		errs.Addf("startQPS", "must be > 0 and at most maxQPS %g (got %g)", c.MaxQPS, c.StartQPS)
	}
	if c.Factor <= 1 {
		errs.Addf("factor", "must be > 1: each step offers more than the last (got %g)", c.Factor)
	}
	if c.Hold < config.Duration(time.Second) {
		errs.Addf("hold", "must be at least 1s so a step measures something (got %s)", c.Hold)
	}
	if c.Connections < 1 {
		errs.Addf("connections", "must be at least 1 (got %d)", c.Connections)
	}
	l := c.limits()
	for _, o := range []struct{ field, why string }{
		{"maxQPS", policy.Over(c.MaxQPS, l.QPS, "--max-qps")},
		{"startQPS", policy.Over(c.StartQPS, l.QPS, "--max-qps")},
		{"connections", policy.Over(c.Connections, l.Connections, "--max-connections")},
		{"timeout", policy.Over(c.Timeout.D(), l.Timeout, "--max-timeout")},
		// A step is a warm-up run of its own, bounded like one.
		{"hold", policy.Over(c.Hold.D(), l.Deadline, "--max-deadline")},
		// The top step sends maxQPS × hold requests.
		{"hold", policy.Over(int64(math.Ceil(c.MaxQPS*c.Hold.D().Seconds())), l.Requests, "--max-requests")},
	} {
		if o.why != "" {
			errs.Addf(o.field, "%s", o.why)
		}
	}
	if c.P99Ratio != 0 && c.P99Ratio <= 1 {
		errs.Addf("p99Ratio", "must be > 1: the first step's own p99 must pass (got %g)", c.P99Ratio)
	}
	if r := *c.MaxErrorRate; r < 0 || r > 1 {
		errs.Addf("maxErrorRate", "must be between 0 and 1 (got %g)", r)
	}
	if c.MinAchievedRatio <= 0 || c.MinAchievedRatio > 1 {
		errs.Addf("minAchievedRatio", "must be in (0, 1] (got %g)", c.MinAchievedRatio)
	}
	if *c.Refine < 0 || *c.Refine > 10 {
		errs.Addf("refine", "must be 0 to 10 bisection steps (got %d)", *c.Refine)
	}
	if *c.Confirm < 0 || *c.Confirm > 5 {
		errs.Addf("confirm", "must be 0 to 5 repeats of a broken step (got %d)", *c.Confirm)
	}
	// The warm-up engine's own checks of a step (the request mix, the
	// marker), at the lowest rate: the caps are checked above by the
	// names of this config's fields.
	errs.Add("", c.step(1).Validate())
	return errs.Err()
}

// step is the warm-up engine's configuration for one step at qps: a fixed
// count at a steady pace for Hold, no convergence, no stable, and no CPU
// budget (the warm-up's default): the check measures the most the pod
// serves.
func (c Config) step(qps float64) warmup.Config {
	fixed, off := false, false
	return warmup.Config{
		Requests: c.Requests, AllowSideEffects: c.AllowSideEffects, MarkerHeader: c.MarkerHeader, MarkerHeaderConfirm: c.MarkerHeaderConfirm, HealthPath: c.HealthPath,
		Policy: c.Policy, Guard: c.Guard, MTLS: c.MTLS,
		QPS: qps, StartQPS: qps, Connections: c.Connections, Timeout: c.Timeout,
		Deadline: c.Hold, UntilConverged: &fixed, MaxRequests: int64(math.Ceil(qps * c.Hold.D().Seconds())),
		RejectSlowerVersion: &off, NeighbourGuard: &off,
	}.WithDefaults()
}

// Step is one load step's outcome.
type Step struct {
	AskedQPS    float64       `json:"askedQPS"`
	AchievedQPS float64       `json:"achievedQPS"`
	Requests    int64         `json:"requests"`
	Errors      int64         `json:"errors"`
	P50         time.Duration `json:"p50"`
	P99         time.Duration `json:"p99"`
	P999        time.Duration `json:"p999"`
	// Broke says which bound the step broke ("" when it held).
	Broke string `json:"broke,omitempty"`
	// Refining marks the bisection steps after the first break.
	Refining bool `json:"refining,omitempty"`
	// Repeat marks a step measured again because the one before at the
	// same rate broke (Config.Confirm).
	Repeat bool `json:"repeat,omitempty"`
}

// Result is the curve and the knee.
type Result struct {
	Steps []Step `json:"steps"`
	// KneeQPS is the highest offered rate that held (0: even the first step
	// broke); Knee is that step.
	KneeQPS float64 `json:"kneeQPS"`
	Knee    *Step   `json:"knee,omitempty"`
	// Reason says how the search ended.
	Reason string `json:"reason"`
}

// Run finds the target's knee. progress, if set, is told about every step
// as it ends. A failure to measure at all (the pod never healthy, ctx
// ended) is an error; a broken step is not — it is the finding.
func Run(ctx context.Context, cfg Config, target warmup.Target, progress func(Step)) (*Result, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid capacity config: %w", err)
	}
	res := &Result{}
	var limit time.Duration
	once := func(qps float64, refining, repeat bool) (Step, error) {
		s, err := measureStep(ctx, cfg, target, qps)
		if err != nil {
			return s, err
		}
		if limit == 0 {
			limit = cfg.P99.D()
			if limit == 0 {
				limit = time.Duration(float64(s.P99) * cfg.P99Ratio)
			}
		}
		s.Broke, s.Refining, s.Repeat = cfg.judge(s, limit), refining, repeat
		res.Steps = append(res.Steps, s)
		if progress != nil {
			progress(s)
		}
		return s, nil
	}
	// measure holds qps, and again up to Confirm times while it breaks: the
	// step counts as broken only if every measurement broke.
	measure := func(qps float64, refining bool) (Step, error) {
		s, err := once(qps, refining, false)
		for i := 0; err == nil && s.Broke != "" && i < *cfg.Confirm; i++ {
			s, err = once(qps, refining, true)
		}
		return s, err
	}

	good, bad := 0.0, 0.0
	for qps := cfg.StartQPS; ; qps = math.Min(qps*cfg.Factor, cfg.MaxQPS) {
		s, err := measure(qps, false)
		if err != nil {
			return res, err
		}
		if s.Broke != "" {
			bad = qps
			break
		}
		good = qps
		if qps >= cfg.MaxQPS {
			res.Reason = fmt.Sprintf("held up to maxQPS %g: the knee is above it", cfg.MaxQPS)
			break
		}
	}
	if bad > 0 && good > 0 {
		for range *cfg.Refine {
			mid := (good + bad) / 2
			s, err := measure(mid, true)
			if err != nil {
				return res, err
			}
			if s.Broke != "" {
				bad = mid
			} else {
				good = mid
			}
		}
	}
	res.KneeQPS = good
	for i := range res.Steps {
		if s := &res.Steps[i]; s.Broke == "" && s.AskedQPS == good && res.Knee == nil {
			res.Knee = s
		}
	}
	if res.Reason == "" {
		last := slices.IndexFunc(res.Steps, func(s Step) bool { return s.AskedQPS == bad && s.Broke != "" && !s.Repeat })
		switch {
		case good == 0:
			res.Reason = fmt.Sprintf("even the first step (%g qps) broke: %s", cfg.StartQPS, res.Steps[0].Broke)
		default:
			res.Reason = fmt.Sprintf("knee %s qps: %s qps broke (%s)", formatQPS(good), formatQPS(bad), res.Steps[last].Broke)
		}
	}
	return res, nil
}

func measureStep(ctx context.Context, cfg Config, target warmup.Target, qps float64) (Step, error) {
	s := Step{AskedQPS: qps}
	// The rate is over the load, not the health wait before it: a step
	// sends exactly its maxRequests (a budget, not a cap checked after the
	// fact), so the wait would read as a pod that does not keep up.
	start := time.Now()
	res, err := warmup.Run(ctx, cfg.step(qps), []warmup.Target{target}, warmup.Options{KeepLatencies: true, OnProgress: func(p warmup.Progress) {
		if p.Phase == warmup.PhaseLoad {
			start = time.Now()
		}
	}})
	if ctx.Err() != nil {
		return s, fmt.Errorf("capacity check stopped: %w", ctx.Err())
	}
	if err != nil && (res == nil || res.Requests() == 0) {
		return s, fmt.Errorf("step at %g qps: %w", qps, err)
	}
	elapsed := time.Since(start)
	t := res.Targets[0]
	lat := t.Latencies()
	sum := latency.Summarize(lat, int(t.Errors))
	s.Requests, s.Errors = t.Requests, t.Errors
	s.P50, s.P99, s.P999 = sum.P50, sum.P99, sum.P999
	s.AchievedQPS = float64(t.Requests) / math.Max(elapsed.Seconds(), cfg.Hold.D().Seconds())
	if errors.Is(err, warmup.ErrTargetFailing) {
		s.Broke = "every request failing: " + t.LastError
	}
	return s, nil
}

// judge says which bound a step broke ("" if none).
func (c Config) judge(s Step, limit time.Duration) string {
	var broke []string
	if s.Requests == 0 {
		return "no request completed"
	}
	if rate := float64(s.Errors) / float64(s.Requests); rate > *c.MaxErrorRate {
		broke = append(broke, fmt.Sprintf("error rate %.2f%% > %.2f%%", 100*rate, 100**c.MaxErrorRate))
	}
	if s.P99 > limit {
		broke = append(broke, fmt.Sprintf("p99 %s > %s", latency.Format(s.P99), latency.Format(limit)))
	}
	if ratio := s.AchievedQPS / s.AskedQPS; ratio < c.MinAchievedRatio {
		broke = append(broke, fmt.Sprintf("achieved %s of %s qps asked (%.0f%% < %.0f%%)", formatQPS(s.AchievedQPS), formatQPS(s.AskedQPS), 100*ratio, 100*c.MinAchievedRatio))
	}
	return strings.Join(broke, "; ")
}

// WriteTable writes the curve as Markdown, like a load-test report.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| asked qps\t achieved qps\t requests\t errors\t p50\t p99\t p99.9\t result\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, s := range r.Steps {
		result := "ok"
		if s.Broke != "" {
			result = "BROKE: " + s.Broke
		}
		if s.Refining {
			result += " (refining)"
		}
		if s.Repeat {
			result += " (repeat)"
		}
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %d\t %s\t %s\t %s\t %s\t\n", formatQPS(s.AskedQPS), formatQPS(s.AchievedQPS), s.Requests, s.Errors,
			latency.Format(s.P50), latency.Format(s.P99), latency.Format(s.P999), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", r.Reason)
	return err
}

func formatQPS(q float64) string {
	if q >= 100 {
		return fmt.Sprintf("%.0f", q)
	}
	return fmt.Sprintf("%.1f", q)
}
