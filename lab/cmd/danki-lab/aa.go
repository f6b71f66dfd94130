package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/spf13/cobra"
)

func newAACmd() *cobra.Command {
	var (
		root, kubeconfig, gateway, out string
		qps                            float64
		runs                           int
		settle, between, timeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "aa",
		Short: "A/A: roll the same version out --runs times with danki under user traffic; count how many are rejected",
		Long: `In the running lab (make lab-up), send steady user traffic through the gateway
and roll the sample app out --runs times as the same program under a new tag
each time (aa-01, aa-02, …: same image and env, a new ReplicaSet), with
lab/manifests/danki's warm-up config unchanged — its defaults reject a canary
whose converged p99 is above max(2 × stable's, stable's + 5ms), measured side
by side with the real stable pods. The steps are shortened to
[setCanaryScale 2, danki/warmup, setWeight 20, pause 5s] and the danki/istio
rungs to [20, 100], so a run takes about a minute and a half.

A version identical to stable must never be rejected (issue #14 §3). Each run
records its outcome (promoted, rejected by warm-up, warm-up failed, aborted by
gate, aborted, timed out), the warm-up requests per pod, stop ÷ minStop, the
canary and stable p99 the warm-up judged, and how long it took. Writes aa.md
(table + one-line summary) and aa.json into --out after every run, and exits
non-zero if any run was rejected.`,
		Example: `  danki-lab aa --kubeconfig .cache/lab/kubeconfig --runs 20 --out aa-results`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kubeconfig == "" {
				return errors.New("--kubeconfig is required (the lab's is .cache/lab/kubeconfig; start the lab with make lab-up)")
			}
			if _, err := os.Stat(filepath.Join(root, "lab", "manifests", "danki")); err != nil {
				return fmt.Errorf("--root %s: not the danki repository (no lab/manifests/danki): %w", root, err)
			}
			if runs < 1 {
				return fmt.Errorf("--runs %d: at least one", runs)
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			log := stderrLog(cmd)
			res, err := scenario.AA(ctx, scenario.AAConfig{
				Common: scenario.Common{Root: root, Kubeconfig: kubeconfig, GatewayURL: gateway, QPS: qps, Settle: settle, Log: log},
				Runs:   runs, Between: between, Timeout: timeout,
				OnRun: func(r *scenario.AAResult) {
					if _, err := scenario.WriteAAResults(out, r); err != nil {
						log.Warn("could not write partial A/A results", "out", out, "err", err)
					}
				},
			})
			if res != nil && len(res.Runs) > 0 {
				w := cmd.OutOrStdout()
				fmt.Fprintln(w)
				if werr := scenario.WriteAAReport(w, res); werr != nil {
					return werr
				}
				paths, werr := scenario.WriteAAResults(out, res)
				if werr != nil {
					return fmt.Errorf("write results to --out %s: %w", out, werr)
				}
				for _, p := range paths {
					fmt.Fprintln(w, "wrote", p)
				}
			}
			if err != nil {
				return err
			}
			if res.Tally.Rejected > 0 {
				return fmt.Errorf("%d of %d rollouts of the same version were rejected", res.Tally.Rejected, res.Tally.Runs)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", ".", "the danki repository (for lab/manifests)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "the lab's kubeconfig")
	f.StringVar(&gateway, "gateway", scenario.DefaultGatewayURL, "where user traffic enters")
	f.StringVar(&out, "out", "aa-results", "directory for aa.md and aa.json (rewritten after every run)")
	f.Float64Var(&qps, "qps", 80, "steady user traffic, requests per second")
	f.IntVar(&runs, "runs", 20, "rollouts of the same version")
	f.DurationVar(&settle, "settle", 45*time.Second, "user traffic on the fresh v1 pods before the first run (warms them)")
	f.DurationVar(&between, "between", 5*time.Second, "users alone on the new stable pods between runs (after the old pods are gone)")
	f.DurationVar(&timeout, "timeout", 6*time.Minute, "longest one rollout may take; then the A/A aborts it and counts it as timed out")
	return cmd
}
