package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Defaults of StableTail.
const (
	DefaultStableTailQuantile = 0.9
	DefaultStableTailRange    = 30 * time.Second
	// DefaultStableTailMinCount: fewer stable requests in the range give no
	// reading (a p90 of a handful of requests is noise).
	DefaultStableTailMinCount = 20
)

// StableTail reads the users' own tail latency on stable from a source of
// the latency gate (Prometheus: Istio's or Envoy's histograms), over the
// last Range. The warm-up's neighbour guard (warmup.NeighbourSignal)
// watches it while a canary is warmed, to slow the warm-up down when the
// users on stable pay for it.
type StableTail struct {
	Source   Source
	Quantile float64       // default 0.9
	Range    time.Duration // default 30s; at least twice the scrape interval
	MinCount float64       // default 20
	// Namespace is the Rollout's: prometheus.bearerTokenSecret is read
	// there.
	Namespace string
}

// NewStableTail builds a StableTail on cfg's Prometheus source, held to
// the policy of WithPolicy (default: the strictest) and reading
// prometheus.bearerTokenSecret with WithKube's client. It fails when cfg
// does not read Prometheus or has no stable latency series (e.g.
// envoy.stableCluster unset): there is nothing of the users on stable to
// watch.
func NewStableTail(cfg Config, rng time.Duration, log *slog.Logger, opts ...Option) (*StableTail, error) {
	rules, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.readsPrometheus() {
		return nil, fmt.Errorf("source %s: the users' latency on stable is read from Prometheus (istio, envoy, promql)", cfg.Source)
	}
	if !rules.hasStable || !rules.hasLatency {
		return nil, errors.New("no stable latency series configured (e.g. envoy.stableCluster, istio.stable, promql.stable)")
	}
	o := options(opts)
	if log != nil {
		o.logger = log
	}
	src, err := newPrometheusWithRules(cfg.WithDefaults(), rules, o)
	if err != nil {
		return nil, err
	}
	return &StableTail{Source: src, Range: rng}, nil
}

// Latency is stable's Quantile over the last Range.
func (s *StableTail) Latency(ctx context.Context) (time.Duration, error) {
	rng := cmp.Or(s.Range, DefaultStableTailRange)
	if s.Namespace != "" {
		ctx = ForNamespace(ctx, s.Namespace)
	}
	sample, err := s.Source.Fetch(ctx, rng)
	if err != nil {
		return 0, err
	}
	if sample.Stable == nil {
		return 0, errors.New("the source has no stable side")
	}
	h := sample.Stable.Latency
	if n, least := h.Count(), cmp.Or(s.MinCount, DefaultStableTailMinCount); n < least {
		return 0, fmt.Errorf("%.0f stable requests in the last %s, fewer than %.0f", n, rng, least)
	}
	ms := h.Quantile(cmp.Or(s.Quantile, DefaultStableTailQuantile))
	if math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, fmt.Errorf("stable's p%g is %g ms: not a latency", 100*cmp.Or(s.Quantile, DefaultStableTailQuantile), ms)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
