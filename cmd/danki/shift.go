package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
)

// shiftOptions are the flags every shift subcommand shares: where the
// VirtualService is and which of its routes and destinations are managed.
type shiftOptions struct {
	kube                         kubeFlags
	virtualService               string
	routes, tlsRoutes, tcpRoutes []string
	stableHost, canaryHost       string
	destinationRule              string
	stableSubset, canarySubset   string
	managedRoutes                []string
}

func newShiftCmd() *cobra.Command {
	o := &shiftOptions{}
	cmd := &cobra.Command{
		Use:   "shift",
		Short: "Read, set or gradually ramp the canary weight on an Istio VirtualService",
		Long: `Read, set or gradually ramp the canary weight on an Istio VirtualService, the
same way the danki/istio Argo Rollouts traffic-router plugin does.

Routing is host-level (--stable-host and --canary-host: two Services) or
subset-level (--destination-rule with --stable-subset and --canary-subset).
Without --route/--tls-route/--tcp-route, every route holding both the stable
and the canary destination is managed. Only those routes' weights change;
every other route and field stays as it was, and weights always sum to 100.`,
		Example: `  danki shift get  -n shop --virtual-service reviews --stable-host reviews-stable --canary-host reviews-canary
  danki shift set  -n shop --virtual-service reviews --stable-host reviews-stable --canary-host reviews-canary --canary-weight 10
  danki shift ramp -n shop --virtual-service reviews --destination-rule reviews --canary-weight 60 --step 10 --interval 1m`,
	}
	o.addFlags(cmd.PersistentFlags(), true)
	cmd.AddCommand(newShiftGetCmd(o), newShiftSetCmd(o), newShiftRampCmd(o))
	return cmd
}

// addFlags registers the VirtualService flags; l4 adds the TLS/TCP route
// and managed-route selectors (weights only: the warm-up mirror works on
// http routes).
func (o *shiftOptions) addFlags(f *pflag.FlagSet, l4 bool) {
	o.kube.addFlags(f, "namespace of the VirtualService")
	f.StringVar(&o.virtualService, "virtual-service", "", "name of the VirtualService (required)")
	f.StringArrayVar(&o.routes, "route", nil, "name of an http route to manage (repeatable; default: every route holding both destinations)")
	if l4 {
		f.StringArrayVar(&o.tlsRoutes, "tls-route", nil, "tls route to manage, by match: PORT or PORT:SNI[,SNI...] (repeatable)")
		f.StringArrayVar(&o.tcpRoutes, "tcp-route", nil, "tcp route to manage, by match: PORT (repeatable)")
	}
	f.StringVar(&o.stableHost, "stable-host", "", "stable destination host (host-level routing), e.g. the stable Service")
	f.StringVar(&o.canaryHost, "canary-host", "", "canary destination host (host-level routing), e.g. the canary Service")
	f.StringVar(&o.destinationRule, "destination-rule", "", "DestinationRule whose subsets split traffic (subset-level routing)")
	f.StringVar(&o.stableSubset, "stable-subset", "stable", "stable subset name (with --destination-rule)")
	f.StringVar(&o.canarySubset, "canary-subset", "canary", "canary subset name (with --destination-rule)")
	if l4 {
		f.StringArrayVar(&o.managedRoutes, "managed-route", nil, "name of a header/mirror route danki manages (repeatable, in precedence order); mirror routes follow the weights")
	}
}

// target builds the shift.Target; needRoles requires hosts or subsets.
func (o *shiftOptions) target(needRoles bool) (shift.Target, error) {
	if o.virtualService == "" {
		return shift.Target{}, errors.New("--virtual-service: required (the VirtualService to manage)")
	}
	t := shift.Target{VirtualService: o.virtualService, HTTPRoutes: o.routes, ManagedRoutes: o.managedRoutes}
	for _, s := range o.tlsRoutes {
		portStr, snis, _ := strings.Cut(s, ":")
		port, err := strconv.ParseUint(portStr, 10, 32)
		if err != nil || port == 0 {
			return t, fmt.Errorf("--tls-route %q: want PORT or PORT:SNI[,SNI...], e.g. 443:shop.example.com", s)
		}
		sel := shift.TLSRouteSelector{Port: uint32(port)}
		if snis != "" {
			sel.SNIHosts = strings.Split(snis, ",")
		}
		t.TLSRoutes = append(t.TLSRoutes, sel)
	}
	for _, s := range o.tcpRoutes {
		port, err := strconv.ParseUint(s, 10, 32)
		if err != nil || port == 0 {
			return t, fmt.Errorf("--tcp-route %q: want a port number, e.g. 9000", s)
		}
		t.TCPRoutes = append(t.TCPRoutes, shift.TCPRouteSelector{Port: uint32(port)})
	}
	hosts := o.stableHost != "" || o.canaryHost != ""
	switch {
	case hosts && o.destinationRule != "":
		return t, errors.New("--stable-host/--canary-host and --destination-rule: use one (host-level or subset-level routing), not both")
	case o.destinationRule != "":
		t.Subsets = &shift.Subsets{DestinationRule: o.destinationRule, StableSubset: o.stableSubset, CanarySubset: o.canarySubset}
	case hosts:
		if o.stableHost == "" || o.canaryHost == "" {
			return t, errors.New("--stable-host and --canary-host: give both")
		}
		t.StableHost, t.CanaryHost = o.stableHost, o.canaryHost
	case needRoles:
		return t, errors.New("--stable-host and --canary-host (host-level routing) or --destination-rule (subset-level): required to know which destinations to weigh")
	}
	ns, err := o.kube.namespace()
	if err != nil {
		return t, fmt.Errorf("the namespace: %w", err)
	}
	t.Namespace = ns
	return t, nil
}

// newIstioClient builds the Istio client from the kubeconfig flags; tests
// replace it.
var newIstioClient = func(o *shiftOptions) (istioclient.Interface, error) {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := istioclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build Istio client for %s: %w", cfg.Host, err)
	}
	return client, nil
}

// shifter builds a Shifter from the kubeconfig flags.
func (o *shiftOptions) shifter() (*shift.Shifter, error) {
	client, err := newIstioClient(o)
	if err != nil {
		return nil, err
	}
	// pkg/shift logs each move; the command prints its own progress lines,
	// so its logs show only with --verbose.
	var log *slog.Logger
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		log = slog.Default()
	}
	return shift.New(client, log), nil
}

func newShiftGetCmd(o *shiftOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Print the VirtualService's routes, destinations, roles and weights",
		Long: `Print every route of the VirtualService with its destinations and weights.
With --stable-host/--canary-host or --destination-rule, also mark the stable
and canary destinations and the routes danki manages, and show the ramp state.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := o.target(false)
			if err != nil {
				return err
			}
			s, err := o.shifter()
			if err != nil {
				return err
			}
			st, err := s.Get(cmd.Context(), t)
			if err != nil {
				return err
			}
			return st.WriteTable(cmd.OutOrStdout(), t)
		},
	}
}

func newShiftSetCmd(o *shiftOptions) *cobra.Command {
	var weight int
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Set the canary weight at once (no ramp, no gate)",
		Long: `Set the canary weight on every managed route at once; the stable destination
gets the rest. No ramp and no gate: use "danki shift ramp" for that.
--canary-weight 0 is the abort: all traffic back to stable, ramp state cleared.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("canary-weight") {
				return errors.New("--canary-weight: required (0–100 percent)")
			}
			if err := checkWeightFlag(weight); err != nil {
				return err
			}
			t, err := o.target(true)
			if err != nil {
				return err
			}
			s, err := o.shifter()
			if err != nil {
				return err
			}
			if err := s.SetWeight(cmd.Context(), t, weight); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "VirtualService %s: canary %d%%, stable %d%%\n", t, weight, 100-weight)
			return err
		},
	}
	cmd.Flags().IntVar(&weight, "canary-weight", 0, "canary weight in percent (0–100)")
	return cmd
}

// checkWeightFlag refuses a --canary-weight outside 0–100 before anything
// is read from the cluster.
func checkWeightFlag(weight int) error {
	if weight < 0 || weight > 100 {
		return fmt.Errorf("--canary-weight %d: must be between 0 and 100 (percent of the traffic to the canary), e.g. --canary-weight 10", weight)
	}
	return nil
}

// gateOptions holds the ramp's latency gate: a danki/latency configuration
// file, JSON or YAML, the same fields as the danki/istio plugin's "gate".
type gateOptions struct {
	configFile string
	caps       capFlags
}

// addFlags registers --gate-config and, for a gate that sends load
// (source: load), the command line's caps; cmd's RunE is set.
func (g *gateOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&g.configFile, "gate-config", "",
		"latency gate: a danki/latency config file, JSON or YAML (see docs/latency.md); each weight is held until it passes. Without it the ramp moves on time alone")
	withCaps(cmd, &g.caps)
}

// gate builds the ramp's latency gate from the flags; nil means no gate.
func (g *gateOptions) gate() (shift.Gate, error) {
	if g.configFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(g.configFile)
	if err != nil {
		return nil, fmt.Errorf("--gate-config: %w", err)
	}
	cfg, err := analysis.ParseConfig(data) // JSON or YAML, strictly
	if err != nil {
		return nil, fmt.Errorf("--gate-config %s: %w", g.configFile, err)
	}
	gate, err := shift.NewLatencyGate(cfg, analysis.WithPolicy(g.caps.local()))
	if err != nil {
		return nil, fmt.Errorf("--gate-config %s: %w", g.configFile, err)
	}
	return gate, nil
}

func newShiftRampCmd(o *shiftOptions) *cobra.Command {
	var (
		weight int
		plan   shift.Plan
		poll   time.Duration
		gates  gateOptions
	)
	cmd := &cobra.Command{
		Use:   "ramp",
		Short: "Raise the canary weight gradually to a target, holding each weight until the gate passes",
		Long: `Raise the canary weight from where it is to --canary-weight in increments of
--step percentage points (or along the --weights ladder), no faster than
--interval, each weight held until the latency gate passes there. On a breach
the weight goes back to the last good weight and the increment halves; after
--max-breaches breaches the ramp fails (exit status 1). While the gate has no
verdict (Prometheus down, too few samples) a weight is held at most
--max-hold, then the weight goes back to the last good weight, a breach is
counted, and the ramp moves on only once the gate answers again. Lowering the
weight is immediate; --canary-weight 0 aborts, whatever the ramp state holds.

The ramp's state is kept in the danki.dev/ramp annotation on the VirtualService:
interrupting this command leaves the weight where it is, and running it again
resumes. Progress goes to stderr, one line per move.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("canary-weight") {
				return errors.New("--canary-weight: required (the target, 0–100 percent)")
			}
			if err := checkWeightFlag(weight); err != nil {
				return err
			}
			if poll < 0 {
				return fmt.Errorf("--poll %s: must be positive (or 0 for the default 5s), e.g. --poll 5s", poll)
			}
			if cmd.Flags().Changed("step") && cmd.Flags().Changed("weights") {
				return errors.New("--step and --weights: set one of them, not both")
			}
			if err := plan.Validate(); err != nil {
				return flagNames(err)
			}
			t, err := o.target(true)
			if err != nil {
				return err
			}
			s, err := o.shifter()
			if err != nil {
				return err
			}
			gate, err := gates.gate()
			if err != nil {
				return err
			}
			ctx := cmd.Context() // cancelled by Ctrl-C or SIGTERM (main)
			r := &shift.Ramp{Shifter: s, Target: t, Plan: plan, Gate: gate}
			progress := cmd.ErrOrStderr()
			var lastWarn time.Time
			d, err := r.Run(ctx, weight, poll, func(d shift.Decision) {
				switch d.Action {
				case shift.ActionHold:
					// A hold for want of a gate verdict is never silent (but
					// said at most once a minute).
					if d.NoVerdict == nil || time.Since(lastWarn) < time.Minute {
						return
					}
					lastWarn = time.Now()
				case shift.ActionDone:
					if d.From == d.Weight && !strings.HasPrefix(d.Reason, "reached") {
						return
					}
				}
				fmt.Fprintf(progress, "%s  %-8s %3d%% → %3d%%  %s\n", time.Now().Format("15:04:05"), d.Action, d.From, d.Weight, d.Reason)
			})
			out := cmd.OutOrStdout()
			switch {
			case errors.Is(err, context.Canceled):
				fmt.Fprintf(out, "VirtualService %s: interrupted at %d%%; the ramp state is kept: run the same command to resume, or set --canary-weight 0 to abort\n", t, d.Weight)
				return err
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(out, "VirtualService %s: canary at %d%% (%s)\n", t, d.Weight, d.Reason)
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&weight, "canary-weight", 0, "target canary weight in percent (0–100)")
	fl.IntVar(&plan.Step, "step", 0, fmt.Sprintf("increment in percentage points (default %d unless --weights)", shift.DefaultStep))
	fl.IntSliceVar(&plan.Weights, "weights", nil, "explicit ladder of canary weights instead of --step, e.g. 1,5,10,25,50")
	fl.DurationVar(&plan.Interval, "interval", shift.DefaultInterval, "least time between two weight changes (0: move as soon as the gate passes)")
	fl.IntVar(&plan.MaxBreaches, "max-breaches", shift.DefaultMaxBreaches, "gate breaches that fail the ramp (a hold that reaches --max-hold counts as one)")
	fl.DurationVar(&plan.MaxHold, "max-hold", shift.DefaultMaxHold, "longest hold of a weight while the gate has no verdict; then back to the last good weight")
	fl.DurationVar(&poll, "poll", 5*time.Second, "how often to ask the gate while holding a weight")
	gates.addFlags(cmd)
	return cmd
}

// planFlags maps shift.Plan's field names to this command's flags.
var planFlags = map[string]string{"step": "--step", "weights": "--weights", "interval": "--interval", "maxBreaches": "--max-breaches", "maxHold": "--max-hold"}

// flagNames rewrites the plan's field errors (config.FieldError paths such
// as "weights[1]") as this command's flags ("--weights[1]").
func flagNames(err error) error {
	var errs []error
	for _, e := range unjoin(err) {
		var fe *config.FieldError
		if errors.As(e, &fe) {
			name, rest := fe.Path, ""
			if i := strings.IndexAny(name, ".["); i >= 0 {
				name, rest = name[:i], name[i:]
			}
			if flag, ok := planFlags[name]; ok {
				errs = append(errs, fmt.Errorf("%s%s: %w", flag, rest, fe.Err))
				continue
			}
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// unjoin lists the errors an errors.Join holds (err itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
