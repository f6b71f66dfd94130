// Package mirror warms a canary on mirrored user traffic: with the canary at
// weight 0, Envoy copies a share of the managed routes' requests to it (the
// users get the stable's answers; the copies' answers are dropped), the
// share rises in steps up to a cap, and the canary's latency histograms in
// Prometheus (Envoy's or Istio's standard metrics) are judged window by
// window with the synthetic warm-up's stopping rule. The mirror is removed
// on every way out. The mirror's state lives on the VirtualService
// (pkg/shift, annotation danki.dev/warmup-mirror), so a restarted plugin, an
// abort or a terminate removes it too.
package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
	"k8s.io/utils/clock"
)

// Modes: mirror only, or the synthetic warm-up first (the coldest part,
// under the marker header) and mirrored traffic after (the real mix).
const (
	ModeOnly           = "only"
	ModeAfterSynthetic = "afterSynthetic"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultStartPercent = 1.0
	DefaultMaxPercent   = 20.0
	DefaultFactor       = 2.0
	DefaultInterval     = 30 * time.Second
	DefaultPoll         = 5 * time.Second
	// removeTimeout bounds the mirror's removal, which runs even after the
	// run's context ended.
	removeTimeout = 30 * time.Second
)

// Config is the danki/warmup step's `mirror` block.
type Config struct {
	// Mode is only (default: mirrored traffic alone) or afterSynthetic.
	Mode string `json:"mode,omitempty"`
	// AllowSideEffects must be true unless Methods holds only GET, HEAD
	// and OPTIONS: mirrored requests are real users' requests, writes
	// included, and the canary executes them.
	AllowSideEffects bool `json:"allowSideEffects,omitempty"`
	// Methods limits the mirror to these HTTP methods (a copy of each
	// managed route restricted to them mirrors; the rest is not copied).
	Methods []string `json:"methods,omitempty"`
	// StartPercent of the managed routes' requests mirrored first. Default 1.
	StartPercent float64 `json:"startPercent,omitempty"`
	// MaxPercent caps the share, so a cold pod is not flooded. Default 20.
	MaxPercent float64 `json:"maxPercent,omitempty"`
	// Factor multiplies the share every Interval until MaxPercent. Default 2.
	Factor   float64         `json:"factor,omitempty"`
	Interval config.Duration `json:"interval,omitempty"`
	// Poll is how often Prometheus is asked for the canary's histogram (a
	// window closes once it holds the warm-up's `window` requests; keep it
	// at least Prometheus' scrape interval). Default 5s.
	Poll config.Duration `json:"poll,omitempty"`
	// Source is envoy or istio: where the canary's latency histogram is
	// read, configured as in danki/latency (prometheus, envoy, istio).
	Source     string                     `json:"source"`
	Prometheus *analysis.PrometheusConfig `json:"prometheus,omitempty"`
	Envoy      *analysis.EnvoyConfig      `json:"envoy,omitempty"`
	Istio      *analysis.IstioConfig      `json:"istio,omitempty"`
}

// Parse decodes (strictly), defaults and validates a mirror block. Errors
// name the field under "mirror".
func Parse(raw []byte) (Config, error) {
	var c Config
	if err := config.Decode(raw, &c); err != nil {
		return c, fmt.Errorf("mirror: %w", err)
	}
	c = c.WithDefaults()
	return c, c.Validate()
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.Mode = cmp.Or(c.Mode, ModeOnly)
	c.StartPercent = cmp.Or(c.StartPercent, DefaultStartPercent)
	c.MaxPercent = cmp.Or(c.MaxPercent, DefaultMaxPercent)
	c.Factor = cmp.Or(c.Factor, DefaultFactor)
	c.Interval = cmp.Or(c.Interval, config.Duration(DefaultInterval))
	c.Poll = cmp.Or(c.Poll, config.Duration(DefaultPoll))
	return c
}

// safeMethods may be mirrored without AllowSideEffects.
var safeMethods = []string{"GET", "HEAD", "OPTIONS"}

// Validate checks a defaulted Config; every error names its field.
func (c Config) Validate() error {
	var errs config.Errors
	if c.Mode != ModeOnly && c.Mode != ModeAfterSynthetic {
		errs.Addf("mirror.mode", "%q is not a mode; use only or afterSynthetic", c.Mode)
	}
	readOnly := len(c.Methods) > 0
	for _, m := range c.Methods {
		if !slices.Contains(safeMethods, m) {
			readOnly = false
		}
	}
	if !c.AllowSideEffects && !readOnly {
		errs.Addf("mirror.allowSideEffects", "mirrored requests are real users' requests, writes included, and the canary executes them; set mirror.allowSideEffects: true once the app skips writes for a Host ending in -shadow (docs/mirror.md), or mirror only reads with mirror.methods: [GET, HEAD]")
	}
	if c.StartPercent <= 0 || c.StartPercent > 100 {
		errs.Addf("mirror.startPercent", "%g: must be above 0 and at most 100", c.StartPercent)
	}
	if c.MaxPercent < c.StartPercent || c.MaxPercent > 100 {
		errs.Addf("mirror.maxPercent", "%g: must be between startPercent (%g) and 100", c.MaxPercent, c.StartPercent)
	}
	if c.Factor <= 1 {
		errs.Addf("mirror.factor", "%g: must be above 1 (the share rises by this factor every interval)", c.Factor)
	}
	if c.Interval.D() <= 0 {
		errs.Addf("mirror.interval", "%s: must be positive, e.g. \"30s\"", c.Interval)
	}
	if c.Poll.D() <= 0 {
		errs.Addf("mirror.poll", "%s: must be positive, e.g. \"5s\"", c.Poll)
	}
	if c.Source != analysis.SourceEnvoy && c.Source != analysis.SourceIstio {
		errs.Addf("mirror.source", "%q: use envoy or istio (the canary's latency histogram in Prometheus)", c.Source)
	} else if _, err := analysis.Compile(c.analysisConfig()); err != nil {
		errs.Add("mirror", err)
	}
	return errs.Err()
}

// analysisConfig is the danki/latency config that reads the canary's
// histogram (its SLO is a placeholder: only the data is used).
func (c Config) analysisConfig() analysis.Config {
	all := config.Number(1)
	return analysis.Config{Source: c.Source, Prometheus: c.Prometheus, Envoy: c.Envoy, Istio: c.Istio,
		SLO: analysis.SLO{MaxErrorRate: &all}}
}

// NewSource builds the Prometheus source for the canary's histogram. opts
// are analysis.WithPolicy (the operator's: without it the strictest, which
// allows no Prometheus) and analysis.WithKube (to read
// prometheus.bearerTokenSecret from the namespace of the run's context,
// analysis.ForNamespace).
func (c Config) NewSource(log *slog.Logger, opts ...analysis.Option) (analysis.Source, error) {
	return analysis.NewPrometheus(c.analysisConfig(), log, opts...)
}

// Run is one mirror warm-up.
type Run struct {
	Config Config
	// Warmup is the warm-up config whose stopping rule judges the windows
	// (window, stableWindows, minRequests, maxRequests, tolerance,
	// absoluteTolerance, maxErrorRatio), with its defaults applied.
	Warmup  warmup.Config
	Shifter *shift.Shifter
	Target  shift.Target
	Source  analysis.Source
	Log     *slog.Logger
	// Clock tells the time and times the polls; nil is the real clock
	// (tests use a fake one).
	Clock clock.WithTicker
}

// Result is what a mirror warm-up measured.
type Result struct {
	Windows  []warmup.WindowStats
	Requests int64
	// Mirrored and FromUsers split Requests (the canary's requests counted
	// at the proxy) by the canary's weight on the VirtualService, read at
	// every poll: a window during which every look saw weight 0 holds only
	// mirrored copies (Envoy routes no user to a weight-0 destination); a
	// window during which a look saw a weight above 0 counts as users'.
	Mirrored, FromUsers int64
	// Unattributed are requests of windows during which the weight could
	// not always be read and was never seen above 0.
	Unattributed int64
	// MaxWeight is the highest canary weight seen.
	MaxWeight int
	// Percent is the last mirror share.
	Percent   float64
	Converged bool
	Reason    string
}

// traffic says where the canary's requests came from.
func (r Result) traffic() string {
	s := fmt.Sprintf("canary requests: %d mirrored, %d from users", r.Mirrored, r.FromUsers)
	if r.FromUsers > 0 || r.MaxWeight > 0 {
		s += fmt.Sprintf(" (routed to it at weight up to %d%%)", r.MaxWeight)
	} else {
		s += " (weight 0 at every look)"
	}
	if r.Unattributed > 0 {
		s += fmt.Sprintf(", %d not told apart (the weight could not be read)", r.Unattributed)
	}
	return s
}

// Summary is one line for the step's message.
func (r Result) Summary() string {
	if r.Converged {
		first, last := r.Windows[0], r.Windows[len(r.Windows)-1]
		return fmt.Sprintf("converged on mirrored traffic after %d mirrored requests in %d windows (mirror at %g%%): p99 %s in window 1, %s in window %d; p50 %s → %s; %s",
			r.Requests, len(r.Windows), r.Percent, latency.Format(first.P99), latency.Format(last.P99), last.Index, latency.Format(first.P50), latency.Format(last.P50), r.traffic())
	}
	return fmt.Sprintf("not converged on mirrored traffic: %s (%d mirrored requests, %d windows, mirror at %g%%); %s; %s", r.Reason, r.Requests, len(r.Windows), r.Percent, warmup.Trend(r.Windows, 6), r.traffic())
}

func (r *Run) clock() clock.WithTicker {
	if r.Clock != nil {
		return r.Clock
	}
	return clock.RealClock{}
}

// Remove removes the mirror (idempotent), even when ctx has ended: it is
// the cleanup of every way out.
func Remove(ctx context.Context, s *shift.Shifter, t shift.Target) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	_, err := s.RemoveWarmupMirror(ctx, t)
	return err
}

// Execute mirrors, raises the share, judges each window and removes the
// mirror on every way out (success, failure, ctx ended). A mirror left by
// an earlier process (a plugin restart) is replaced: the run starts again
// at StartPercent. report, if not nil, sees progress messages. It fails
// when maxRequests mirrored requests did not converge, and when ctx ends
// (the deadline) with the latency trend.
func (r *Run) Execute(ctx context.Context, report func(string)) (res Result, err error) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if report == nil {
		report = func(string) {}
	}
	c, w := r.Config, r.Warmup
	defer func() {
		if rerr := Remove(ctx, r.Shifter, r.Target); rerr != nil {
			log.Error("warm-up mirror NOT removed", "virtualService", r.Target.String(), "err", rerr)
			if err == nil {
				err = fmt.Errorf("remove the warm-up mirror from VirtualService %s (annotation %s): %w", r.Target, wellknown.MirrorAnnotation, rerr)
			}
		}
	}()
	if prev, perr := r.Shifter.WarmupMirrorState(ctx, r.Target); perr == nil && prev != nil {
		log.Info("found a warm-up mirror from an earlier run (plugin restart); starting again", "percent", prev.Percent)
	}
	res.Percent = c.StartPercent
	if err := r.Shifter.SetWarmupMirror(ctx, r.Target, shift.WarmupMirror{Percent: res.Percent, Methods: c.Methods}); err != nil {
		return res, err
	}
	clk := r.clock()
	raisedAt := clk.Now()
	windowStart := raisedAt
	// The open window's highest canary weight, and whether a look failed.
	windowWeight, windowBlind := 0, false
	look := func() {
		if w, ok := r.canaryWeight(ctx, log); !ok {
			windowBlind = true
		} else {
			windowWeight = max(windowWeight, w)
			res.MaxWeight = max(res.MaxWeight, w)
		}
	}
	look()
	for {
		t := clk.NewTimer(c.Poll.D())
		select {
		case <-ctx.Done():
			t.Stop()
			res.Reason = fmt.Sprintf("stopped: %v", ctx.Err())
			return res, fmt.Errorf("mirror warm-up %s", res.Summary())
		case <-t.C():
		}
		now := clk.Now()
		look()
		sample, ferr := r.Source.Fetch(ctx, now.Sub(windowStart))
		if ferr != nil {
			log.Warn("canary histogram not read; trying again", "err", ferr)
		} else if win, ok := r.window(sample, len(res.Windows)+1, res.Requests); ok {
			res.Windows = append(res.Windows, win)
			switch n := win.Requests - res.Requests; {
			case windowWeight > 0:
				res.FromUsers += n
			case windowBlind:
				res.Unattributed += n
			default:
				res.Mirrored += n
			}
			res.Requests = win.Requests
			windowStart = now
			windowWeight, windowBlind = 0, false
			look()
			log.Info("mirror window", "index", win.Index, "requests", win.Count, "p50", latency.Format(win.P50), "p99", latency.Format(win.P99), "percent", res.Percent)
			converged, why := w.JudgeWindows(res.Windows)
			if converged {
				res.Converged = true
				return res, nil
			}
			res.Reason = why
			if res.Requests >= w.MaxRequests {
				res.Reason = fmt.Sprintf("maxRequests %d reached: %s", w.MaxRequests, why)
				return res, fmt.Errorf("mirror warm-up %s", res.Summary())
			}
		}
		if res.Percent < c.MaxPercent && now.Sub(raisedAt) >= c.Interval.D() {
			next := math.Min(c.MaxPercent, res.Percent*c.Factor)
			if err := r.Shifter.SetWarmupMirror(ctx, r.Target, shift.WarmupMirror{Percent: next, Methods: c.Methods}); err != nil {
				return res, err
			}
			res.Percent, raisedAt = next, now
		}
		report(fmt.Sprintf("mirroring %g%% of user requests to the canary: %d mirrored requests in %d windows; %s", res.Percent, res.Requests, len(res.Windows), cmp.Or(res.Reason, "waiting for the first window")))
	}
}

// canaryWeight reads the canary's weight on the managed routes; false when
// it cannot be read (logged: the run goes on, its report says so).
func (r *Run) canaryWeight(ctx context.Context, log *slog.Logger) (int, bool) {
	st, err := r.Shifter.Get(ctx, r.Target)
	if err == nil && st.CanaryWeight < 0 {
		err = errors.New(cmp.Or(st.Problem, "no managed route"))
	}
	if err != nil {
		log.Warn("canary weight not read; mirrored and users' requests not told apart", "virtualService", r.Target.String(), "err", err)
		return 0, false
	}
	return st.CanaryWeight, true
}

// window turns a sample into a window once it holds the warm-up's window
// size of requests (fewer: the window stays open).
func (r *Run) window(s *analysis.Sample, index int, before int64) (warmup.WindowStats, bool) {
	h := s.Canary.Latency
	n := h.Count()
	if s.Canary.Requests.Found {
		n = s.Canary.Requests.Value
	}
	if n < float64(r.Warmup.Window) || math.IsNaN(h.Quantile(0.5)) {
		return warmup.WindowStats{}, false
	}
	ms := func(q float64) time.Duration { return time.Duration(h.Quantile(q) * float64(time.Millisecond)) }
	count := int(math.Round(n))
	errs := 0
	if s.Canary.Errors.Found {
		errs = int(math.Round(s.Canary.Errors.Value))
	}
	return warmup.WindowStats{Index: index, Requests: before + int64(count), Summary: latency.Summary{
		Count: count, Errors: errs, P50: ms(0.5), P90: ms(0.9), P99: ms(0.99), P999: ms(0.999),
	}}, true
}
