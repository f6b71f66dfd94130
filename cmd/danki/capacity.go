package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

type capacityFlags struct {
	url                           string
	kube                          kubeFlags
	mesh                          meshFlags
	caps                          capFlags
	service, selector, hash, port string
	paths                         []string
	hold, timeout, p99            time.Duration
	minQPS                        float64
	refine, confirm               int
	maxErrorRate                  float64
	output                        string
	cfg                           capacity.Config
}

func newCapacityCmd() *cobra.Command {
	f := &capacityFlags{}
	cmd := &cobra.Command{
		Use:   "capacity",
		Short: "Find a pod's knee: the highest request rate it serves within its latency and error bounds",
		Long: `Offer one pod load in rising steps (--start-qps, × --factor, each held --hold)
until a step breaks a bound — p99 above --p99 (or --p99-ratio × the first step's),
error rate above --max-error-rate, or the pod serving less than
--min-achieved-ratio of the offered rate — then bisect between the last good
and the first broken rate (--refine times). A broken step is measured again
(--confirm times) and counts only if it breaks every time. Prints a line per step, then the
curve and the knee (docs/capacity.md).

Never point it at a pod that serves users: it loads the pod until it breaks.
Use a canary at weight 0, a preview pod, or a test instance. The pod: --url,
or in Kubernetes the first ready pod of --service / --selector /
--pod-template-hash. Requests carry the marker header X-Danki-Warmup: 1.
Exit status: 0 the knee was found (and is at least --min-qps); 1 the knee is
below --min-qps; 3 an error ("Error: …" on stderr).`,
		Example: `  danki capacity --url http://10.244.0.7:8080 --path /api/items --start-qps 20 --hold 10s --min-qps 150`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runCapacity(cmd, f) },
	}
	fl := cmd.Flags()
	f.kube.addFlags(fl, "namespace of the pod")
	f.mesh.addFlags(fl)
	fl.StringVar(&f.url, "url", "", "base URL of the pod, e.g. http://10.244.0.7:8080")
	fl.StringVar(&f.service, "service", "", "take the first ready endpoint of this Service")
	fl.StringVar(&f.selector, "selector", "", "take the first ready pod matching this label selector")
	fl.StringVar(&f.hash, "pod-template-hash", "", "only pods of this ReplicaSet")
	fl.StringVar(&f.port, "port", "", "pod port, by name or number (default: the only one)")
	fl.StringSliceVar(&f.paths, "path", nil, "GET path, a template (repeatable; default /)")
	fl.StringVar(&f.cfg.HealthPath, "health-path", "", "health path requested until 200 first (default: the pod's readinessProbe, else /)")
	fl.Float64Var(&f.cfg.StartQPS, "start-qps", capacity.DefaultStartQPS, "first step's rate")
	fl.Float64Var(&f.cfg.Factor, "factor", capacity.DefaultFactor, "each step offers this many times the last")
	fl.Float64Var(&f.cfg.MaxQPS, "max-qps", 0, fmt.Sprintf("highest rate offered (default %g, at most the cap of %g qps per target)", capacity.DefaultMaxQPS, policy.DefaultLimits.QPS))
	fl.DurationVar(&f.hold, "hold", capacity.DefaultHold, "how long each step lasts")
	fl.IntVarP(&f.cfg.Connections, "connections", "c", capacity.DefaultConnections, "connections (bound on requests in flight)")
	fl.DurationVar(&f.timeout, "timeout", warmup.DefaultTimeout, "per-request timeout")
	fl.DurationVar(&f.p99, "p99", 0, "a step breaks when its p99 is above this (default: --p99-ratio × the first step's)")
	fl.Float64Var(&f.cfg.P99Ratio, "p99-ratio", capacity.DefaultP99Ratio, "a step breaks when its p99 is above this many times the first step's (without --p99)")
	fl.Float64Var(&f.maxErrorRate, "max-error-rate", capacity.DefaultMaxErrorRate, "a step breaks above this share of failed requests")
	fl.Float64Var(&f.cfg.MinAchievedRatio, "min-achieved-ratio", capacity.DefaultMinAchievedRatio, "a step breaks when the pod serves less than this share of the offered rate")
	fl.IntVar(&f.refine, "refine", capacity.DefaultRefine, "bisection steps between the last good and the first broken rate")
	fl.IntVar(&f.confirm, "confirm", capacity.DefaultConfirm, "repeats of a broken step before it counts (a one-off spike does not end the ramp)")
	fl.Float64Var(&f.minQPS, "min-qps", 0, "fail (exit code 1) when the knee is below this rate")
	fl.StringVarP(&f.output, "output", "o", "table", "output: table or json")
	return withCaps(cmd, &f.caps)
}

func runCapacity(cmd *cobra.Command, f *capacityFlags) error {
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("--output %q: use table or json", f.output)
	}
	if err := checkURLFlag("url", []string{f.url}); err != nil {
		return err
	}
	if err := refuseZeroFlags(cmd.Flags(), flagField, "start-qps", "factor", "max-qps", "hold", "connections", "timeout", "p99", "p99-ratio", "min-achieved-ratio"); err != nil {
		return err
	}
	stderr, out := cmd.ErrOrStderr(), cmd.OutOrStdout()
	cfg := f.cfg
	cfg.Hold, cfg.Timeout, cfg.P99 = config.Duration(f.hold), config.Duration(f.timeout), config.Duration(f.p99)
	if f.p99 > 0 {
		cfg.P99Ratio = 0
	}
	cfg.MaxErrorRate, cfg.Refine, cfg.Confirm = &f.maxErrorRate, &f.refine, &f.confirm
	for _, p := range f.paths {
		cfg.Requests = append(cfg.Requests, warmup.RequestSpec{Path: p})
	}
	local := f.caps.local()
	cfg.Policy = &local
	if err := cfg.WithDefaults().Validate(); err != nil {
		return errors.New(capacityFieldFlags.Replace(err.Error()))
	}
	pol, closeMesh, err := f.mesh.localPolicy(&f.kube, local)
	if err != nil {
		return err
	}
	defer closeMesh()
	cfg.Policy = &pol
	target, err := f.target(cmd)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "capacity of %s: from %g qps, × %g per step, %s each …\n", target, cfg.StartQPS, cfg.Factor, f.hold)
	res, err := capacity.Run(cmd.Context(), cfg, target, func(s capacity.Step) {
		verdict := "ok"
		if s.Broke != "" {
			verdict = "BROKE: " + s.Broke
		}
		fmt.Fprintf(stderr, "  %8.1f qps asked, %8.1f served, p50 %s, p99 %s, %d errors: %s\n",
			s.AskedQPS, s.AchievedQPS, latency.Format(s.P50), latency.Format(s.P99), s.Errors, verdict)
	})
	if err != nil {
		return err
	}
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := res.WriteTable(out); err != nil {
		return err
	}
	if f.minQPS > 0 && res.KneeQPS < f.minQPS {
		return verdict(cmd, exitVerdict, fmt.Errorf("knee %.1f qps is below --min-qps %g", res.KneeQPS, f.minQPS), true)
	}
	return nil
}

// capacityFieldFlags: danki capacity sends GET paths only and has no flag
// for allowSideEffects, which the capacity check's errors name; say where
// it is set instead.
var capacityFieldFlags = strings.NewReplacer(
	"set allowSideEffects", "set allowSideEffects in a danki/warmup step's capacity block (danki capacity, which sends GETs only, has no flag for it)",
)

// target is --url, or the first ready pod found in Kubernetes.
func (f *capacityFlags) target(cmd *cobra.Command) (warmup.Target, error) {
	if f.url != "" {
		ts, err := warmup.URLTargets("--url", []string{f.url})
		if err != nil {
			return warmup.Target{}, err
		}
		return ts[0], nil
	}
	if f.service == "" && f.selector == "" && f.hash == "" {
		return warmup.Target{}, fmt.Errorf("give the pod: --url, or --service / --selector / --pod-template-hash")
	}
	kube, ns, err := warmupKubeClient(&f.kube)
	if err != nil {
		return warmup.Target{}, err
	}
	k := warmup.KubeTargets{Namespace: ns, Service: f.service, Selector: f.selector, PodTemplateHash: f.hash}
	if f.port != "" {
		k.Port = intstr.Parse(f.port)
	}
	ts, _, err := warmup.FindTargets(cmd.Context(), warmup.TargetQuery{
		Canary: warmup.TargetSource{Pods: k}, MinPods: 1, Timeout: time.Minute,
		Kube: func() (kubernetes.Interface, error) { return kube, nil },
	})
	if err != nil {
		return warmup.Target{}, err
	}
	return ts[0], nil
}
