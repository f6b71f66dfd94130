package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	var (
		root, kubeconfig, gateway, out, danki string
		qps                                   float64
		oracle, contenders, mirror, skipBad   bool
		control, spring, withGate             bool
		springQPS                             float64
		settle, before, after                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Roll the sample app out without and with danki under user traffic; table + chart",
		Long: `In the running lab (make lab-up), send steady user traffic through the gateway
and roll the sample app from v1 to v2 twice: first as teams do today
(lab/manifests/baseline: Argo's native Istio routing, fixed setWeight jumps, no
warm-up), then with danki (lab/manifests/danki: warm-up until converged, gated
ramp, latency analysis). Then roll out a bad v3 (5% of requests a second
slower) with danki, which must abort it (unless --skip-bad-version).

With --contenders (make bench), two more rollouts run between the baseline and
danki, under the same users: what teams would pick instead of danki —
Istio's slow start (lab/manifests/slowstart: the baseline plus a DestinationRule
with warmupDurationSecs 60s; Envoy's cluster config is read back to show it is
there) and a fixed warm-up of 100 requests per pod (lab/manifests/fixed100: the
baseline plus danki/warmup with untilConverged: false, maxRequests: 100).

With --mirror (make bench), one more rollout runs just before danki, under the
same users: "danki (mirror)" (lab/manifests/mirror: danki's Rollout whose
warm-up is mirrored user traffic only, GETs mirrored at 10 % of the users'
requests doubled every 10 s up to 100 %, instead of synthetic load), to compare
the two warm-up sources and no warm-up side by side. The table gets each
rollout's warm-up length (the danki/warmup step's start to end, with requests
per pod or mirrored requests), and the ratios "danki (mirror) ÷ danki".

With --control (make bench), one more rollout runs right after danki, under
the same users: the control, danki's Rollout (lab/manifests/danki) with its
warm-up step replaced by a pause as long as danki's warm-up took in this run,
so the new pods start and sit at weight 0 with no warm-up traffic. What users
(all on stable) saw during danki's warm-up and during the control's pause —
p50, p99, p99.9, max — and the ratios "danki ÷ control" say what the warm-up
itself costs them, beyond starting the new pods.

With --spring (on by default: make demo's second workload; make bench too),
after the sample app's rollouts, the Spring Boot sample app (a slow-warming
JVM; lab/manifests/spring's Services and host spring.lab on the gateway) is
rolled v1 → v2 twice under --spring-qps of its
own users, its stable pods warmed with 12,000 requests first: with a fixed
warm-up of 100 requests per pod (lab/manifests/spring-fixed100) and with
danki's default warm-up (lab/manifests/spring-danki), then setWeight 50 and
the promotion; ratios "Spring: fixed warm-up 100 ÷ danki" during and after.

Then, with --gate (the default), a short warm gate bench: "danki gate" runs
out of cluster with its webhook, and lab/manifests/gate's app-cold (no warm-up)
and app-gated (the gate keeps each new pod un-Ready until warm) are scaled
2 → 4 one after the other under steady user traffic, then the control starts
two pods no request reaches (what starting JVMs costs the node's users);
users' p99, p99.9 and max in the minute after each scale-up ÷ the minute
before it
(gate/gatebench.md in --out; the full bench, with Istio slow start and a pod
kill, is danki-lab gate-bench in make bench).

Prints what users saw — p50, p99, p99.9 and max before, during and after each
rollout — and writes results.json, results.md and a latency chart
(latency.svg, latency.png) into --out. "make demo" starts the lab, runs this
and stops the lab; "make bench" adds --oracle and reports ratios.`,
		Example: `  danki-lab demo --kubeconfig .cache/lab/kubeconfig --out .cache/demo`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" {
				return errors.New("--kubeconfig is required (the lab's is .cache/lab/kubeconfig; start the lab with make lab-up)")
			}
			if _, err := os.Stat(filepath.Join(root, "lab", "manifests", "danki")); err != nil {
				return fmt.Errorf("--root %s: not the danki repository (no lab/manifests/danki): %w", root, err)
			}
			mesh, err := scenario.LabMesh(labCache(root))
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			res, err := scenario.Demo(ctx, scenario.Config{
				Common: scenario.Common{Root: root, Kubeconfig: kubeconfig, GatewayURL: gateway, QPS: qps,
					Settle: settle, Mesh: mesh, Log: stderrLog(cmd)},
				Before: before, After: after, Oracle: oracle,
				Contenders: contenders, Mirror: mirror, SkipBadVersion: skipBad,
				Control: control, Spring: spring, SpringQPS: springQPS,
			})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintln(w)
			if err := scenario.WriteReport(w, traffic.Text, res); err != nil {
				return err
			}
			paths, err := scenario.WriteResults(out, res)
			if err != nil {
				return fmt.Errorf("write results to --out %s: %w", out, err)
			}
			for _, p := range paths {
				fmt.Fprintln(w, "wrote", p)
			}
			if !withGate {
				return nil
			}
			return runShortGateBench(ctx, cmd, root, kubeconfig, danki, gateway, mesh, filepath.Join(out, "gate"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", ".", "the danki repository (for lab/manifests)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "the lab's kubeconfig")
	f.StringVar(&gateway, "gateway", scenario.DefaultGatewayURL, "where user traffic enters")
	f.StringVar(&out, "out", "demo-results", "directory for results.json, results.md, latency.svg and latency.png")
	f.Float64Var(&qps, "qps", 80, "steady user traffic, requests per second")
	f.DurationVar(&settle, "settle", 45*time.Second, "user traffic on fresh v1 pods before measuring (warms them)")
	f.DurationVar(&before, "before", 30*time.Second, "measured steady state before each rollout")
	f.DurationVar(&after, "after", 30*time.Second, "measured steady state after each rollout")
	f.BoolVar(&oracle, "oracle", false, "also load a fresh pod 5,000 times to find when it stops improving, and compare danki's warm-up length (make bench)")
	f.BoolVar(&contenders, "contenders", false, "also roll out, between baseline and danki, Istio's slow start (lab/manifests/slowstart) and a fixed warm-up of 100 requests (lab/manifests/fixed100), with ratios contender ÷ danki (make bench)")
	f.BoolVar(&mirror, "mirror", false, "also roll out, just before danki, danki warming on mirrored user traffic only (lab/manifests/mirror), with ratios danki (mirror) ÷ danki (make bench)")
	f.BoolVar(&control, "control", false, "also roll out, right after danki, danki's Rollout with a pause of danki's warm-up length instead of the warm-up, with ratios danki ÷ control of the users' latency during the warm-up (make bench)")
	f.BoolVar(&spring, "spring", true, "then roll the Spring Boot sample app (the second workload: a slow-warming JVM) out with a fixed warm-up of 100 requests and with danki (lab/manifests/spring-fixed100, spring-danki), with ratios fixed ÷ danki (~8 min; --spring=false leaves it out)")
	f.Float64Var(&springQPS, "spring-qps", 40, "the Spring app's steady user traffic with --spring, requests per second")
	f.BoolVar(&skipBad, "skip-bad-version", false, "leave out the bad version's rollout (make bench: it yields no ratio)")
	f.BoolVar(&withGate, "gate", true, "then the short warm gate bench: no warm-up vs danki gate (and the control), scale 2 → 4 (make bench runs the full one: gate-bench)")
	f.StringVar(&danki, "danki", "", "the danki binary that runs `danki gate` for --gate (default $DANKI_CACHE/lab/bin/danki, else <root>/.cache/lab/bin/danki)")
	return cmd
}

// runShortGateBench is make demo's short version of the gate bench: no
// warm-up, the warm gate and the control (two JVMs starting with no request
// to them), through a scale-up only, into dir.
func runShortGateBench(ctx context.Context, cmd *cobra.Command, root, kubeconfig, danki, gateway, mesh, dir string) error {
	if danki == "" {
		danki = filepath.Join(labCache(root), "lab", "bin", "danki")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	log := stderrLog(cmd)
	log.Info("the warm gate, short version: no warm-up vs danki gate through a scale-up (full bench: danki-lab gate-bench)")
	res, err := scenario.GateBench(ctx, scenario.GateBenchConfig{
		Common:  scenario.Common{Root: root, Kubeconfig: kubeconfig, Danki: danki, GatewayURL: gateway, Settle: 30 * time.Second, Mesh: mesh, Log: log},
		GateLog: filepath.Join(dir, "gate.log"),
		Ways:    []scenario.GateWay{scenario.GateWays[0], scenario.GateWays[2], scenario.GateControl},
		Events:  []string{scenario.EventScaleUp},
	})
	if err != nil {
		return fmt.Errorf("the warm gate's short bench: %w", err)
	}
	return printGateBench(cmd.OutOrStdout(), "The warm gate: new pods from a scale-up, without and with danki gate", dir, res)
}
