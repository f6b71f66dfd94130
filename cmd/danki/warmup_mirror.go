package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/warmup"
)

// mirrorFlags are `danki warmup mirror`'s flags: the VirtualService (as
// `danki shift`), the step's mirror block (--config and flags over it) and
// the stopping rule.
type mirrorFlags struct {
	caps          capFlags
	vs            shiftOptions
	configFile    string
	mc            mirror.Config
	prometheus    string
	canaryCluster string
	interval      time.Duration
	poll          time.Duration
	wc            warmup.Config // the stopping rule's flags (mirrorRuleFlags)
	progressEvery time.Duration
	isTerminal    func() bool
}

func newWarmupMirrorCmd(isTerminal func() bool) *cobra.Command {
	f := &mirrorFlags{progressEvery: time.Second, isTerminal: isTerminal}
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Warm the canary on a mirrored share of the users' requests",
		Long: `Warm the canary on a copy of the users' own requests, as the danki/warmup step's
mirror block does: with the canary at weight 0, add an Istio mirror of the
managed http routes of --virtual-service to the canary destination (users get
the stable's answers; the copies' answers are dropped), starting at
--start-percent and multiplied by --factor every --interval up to
--max-percent, judge the canary's latency window by window from its histogram
in Prometheus (--source envoy: --prometheus and --canary-cluster; istio:
--config) with the synthetic warm-up's stopping rule, and remove the mirror
on every way out (converged, failed, --deadline, Ctrl-C).

Mirrored requests are real users' requests, writes included: refused unless
--allow-side-effects (the app skips writes for a Host ending in -shadow) or
--method lists only GET, HEAD, OPTIONS. The canary's requests are counted as
mirrored while its weight is 0 (read every --poll) and as users' otherwise.

--config takes the step's mirror block (YAML or JSON, see docs/mirror.md);
flags given override its fields. The stopping rule: docs/stopping-rule.md. The window table goes to
stdout, progress to stderr. Exit status: 0 converged; 1 not converged by
--deadline or --max-requests (the reason on stderr); 3 an error ("Error: …").`,
		Example: `  danki warmup mirror -n shop --virtual-service app --stable-host app-stable --canary-host app-canary \
    --method GET --source envoy --prometheus http://prometheus.istio-system:9090 \
    --canary-cluster 'outbound|8080||app-canary.shop.svc.cluster.local'
  danki warmup mirror -n shop --virtual-service app --destination-rule app --config mirror.yaml --max-percent 10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fl := cmd.Flags()
	f.vs.addFlags(fl, false)
	fl.StringVar(&f.configFile, "config", "", "the step's mirror block, YAML or JSON (flags given override its fields)")
	fl.BoolVar(&f.mc.AllowSideEffects, "allow-side-effects", false, "mirror every method (the app must skip writes for a Host ending in -shadow)")
	fl.StringArrayVar(&f.mc.Methods, "method", nil, "mirror only requests with this HTTP method (repeatable; GET, HEAD, OPTIONS need no --allow-side-effects)")
	fl.Float64Var(&f.mc.StartPercent, "start-percent", mirror.DefaultStartPercent, "share of the managed routes' requests mirrored first")
	fl.Float64Var(&f.mc.MaxPercent, "max-percent", mirror.DefaultMaxPercent, "cap of the mirrored share")
	fl.Float64Var(&f.mc.Factor, "factor", mirror.DefaultFactor, "the share is multiplied by this every --interval")
	fl.DurationVar(&f.interval, "interval", mirror.DefaultInterval, "how long each share holds")
	fl.DurationVar(&f.poll, "poll", mirror.DefaultPoll, "how often Prometheus is asked (keep it ≥ its scrape interval)")
	fl.StringVar(&f.mc.Source, "source", analysis.SourceEnvoy, "where the canary's latency histogram is read: envoy or istio (istio: selectors in --config)")
	fl.StringVar(&f.prometheus, "prometheus", "", "Prometheus base URL")
	fl.StringVar(&f.canaryCluster, "canary-cluster", "", "--source envoy: the canary's Envoy cluster, e.g. outbound|8080||app-canary.shop.svc.cluster.local")

	mirrorRuleFlags.register(fl, &f.wc)
	return withCaps(cmd, &f.caps)
}

// mirrorRuleFlags are the stopping rule's flags, as `danki warmup` has them.
var mirrorRuleFlags = stoppingRuleConfigFlags("mirrored requests")

// mirrorBlockFlags are the flags that set the mirror block's fields, for
// naming them in its errors (registered by hand: a flag given overrides
// --config's field).
var mirrorBlockFlags = configFlags{
	{flag: "allow-side-effects", field: "mirror.allowSideEffects", byHand: true},
	{flag: "method", field: "mirror.methods", byHand: true},
	{flag: "start-percent", field: "mirror.startPercent", byHand: true},
	{flag: "max-percent", field: "mirror.maxPercent", byHand: true},
	{flag: "factor", field: "mirror.factor", byHand: true},
	{flag: "interval", field: "mirror.interval", byHand: true},
	{flag: "poll", field: "mirror.poll", byHand: true},
	{flag: "source", field: "mirror.source", byHand: true},
}

// config merges --config and the flags that were set into the mirror
// block, validated.
func (f *mirrorFlags) config(fl *pflag.FlagSet) (mirror.Config, error) {
	var c mirror.Config
	if f.configFile != "" {
		if err := config.DecodeFile(f.configFile, &c); err != nil {
			return c, fmt.Errorf("--config: %w", err)
		}
	}
	set := func(name string) bool { return f.configFile == "" || fl.Changed(name) }
	if set("allow-side-effects") {
		c.AllowSideEffects = f.mc.AllowSideEffects
	}
	if set("method") {
		c.Methods = f.mc.Methods
	}
	if set("start-percent") {
		c.StartPercent = f.mc.StartPercent
	}
	if set("max-percent") {
		c.MaxPercent = f.mc.MaxPercent
	}
	if set("factor") {
		c.Factor = f.mc.Factor
	}
	if set("interval") {
		c.Interval = config.Duration(f.interval)
	}
	if set("poll") {
		c.Poll = config.Duration(f.poll)
	}
	if set("source") {
		c.Source = f.mc.Source
	}
	if fl.Changed("prometheus") {
		c.Prometheus = &analysis.PrometheusConfig{Address: f.prometheus}
	}
	if fl.Changed("canary-cluster") {
		if c.Envoy == nil {
			c.Envoy = &analysis.EnvoyConfig{}
		}
		c.Envoy.CanaryCluster = f.canaryCluster
	}
	// Decode through the step's own parser, so the source blocks get the
	// defaults and checks they get in a Rollout.
	raw, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	c, err = mirror.Parse(raw)
	if err != nil {
		return c, &flagNamedError{msg: mirrorBlockFlags.nameFlags(err), err: err}
	}
	return c, nil
}

func (f *mirrorFlags) run(cmd *cobra.Command) error {
	if err := refuseZeroFlags(cmd.Flags(), mirrorRuleFlags.field, mirrorRuleFlags.positive()...); err != nil {
		return err
	}
	mc, err := f.config(cmd.Flags())
	if err != nil {
		return err
	}
	wc := f.wc
	// --deadline bounds the mirror run (its context below), not the
	// stopping rule's config: the config keeps its default deadline, as it
	// did before the flags parsed into it.
	deadline := wc.Deadline.D()
	wc.Deadline = 0
	local := f.caps.local()
	wc.Policy = &local
	wc = wc.WithDefaults()
	if err := wc.Validate(); err != nil {
		return &flagNamedError{msg: mirrorRuleFlags.nameFlags(err), err: err}
	}
	if deadline <= 0 {
		return fmt.Errorf("--deadline %s: must be positive, e.g. 10m", deadline)
	}
	t, err := f.vs.target(true)
	if err != nil {
		return err
	}
	shifter, err := f.vs.shifter()
	if err != nil {
		return err
	}
	src, err := mc.NewSource(slog.Default(), analysis.WithPolicy(local))
	if err != nil {
		return fmt.Errorf("--prometheus: %w", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), deadline)
	defer cancel()
	progress := newWarmupProgressLine(cmd.ErrOrStderr(), f.isTerminal(), f.progressEvery)
	started := time.Now()
	// Each window is on the progress line; the run's own logs show warnings
	// (a failed read) unless --verbose.
	log := slog.Default()
	if !log.Enabled(ctx, slog.LevelDebug) {
		log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	r := &mirror.Run{Config: mc, Warmup: wc, Shifter: shifter, Target: t, Source: src, Log: log}
	res, err := r.Execute(ctx, func(msg string) {
		progress.show(fmt.Sprintf("%5.1fs  %s", time.Since(started).Seconds(), msg), false)
	})
	progress.end()
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "mirror warm-up on VirtualService %s\n\n", t)
	converged := 0
	if res.Converged {
		converged = res.Windows[len(res.Windows)-1].Index
	}
	if werr := warmup.WriteWindows(out, res.Windows, converged); werr != nil {
		return werr
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, res.Summary())
	// Not converged by --deadline or --max-requests is the verdict; Ctrl-C
	// or a failed VirtualService write an error.
	if err != nil && !res.Converged && cmd.Context().Err() == nil && (ctx.Err() != nil || res.Requests >= wc.MaxRequests) {
		return verdict(cmd, exitVerdict, err, true)
	}
	return err
}
