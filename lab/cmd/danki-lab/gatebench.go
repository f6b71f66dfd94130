package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/spf13/cobra"
)

func newGateBenchCmd() *cobra.Command {
	var (
		root, cache, kubeconfig, danki, gateway, out string
		qps                                          float64
		settle, steady, after                        time.Duration
		maxConcurrent                                int
		ways, events                                 []string
		noiseMinutes, repeat                         int
	)
	cmd := &cobra.Command{
		Use:   "gate-bench",
		Short: "The warm gate on the lab: new pods with no warm-up, Istio slow start and danki gate side by side; table + chart",
		Long: `Start the lab (lab/scripts/up.sh) unless it is running, then start "danki gate"
out of cluster (the lab's danki binary, the lab's kubeconfig) with its webhook
registered on the lab API server, and apply lab/manifests/gate: the sample app
three ways side by side, 2 pods each — app-cold (no warm-up), app-slowstart
(Istio slow start, warmupDurationSecs 60s) and app-gated (annotated
danki.dev/warm-up: the gate keeps each new pod un-Ready until warm).

Beside them, a control (lab/manifests/gatebench/start-only.yaml, app-startonly):
its scale-up starts two pods of the same app that its users' Service selects
but a readiness gate nobody sets keeps un-Ready, so they join the
EndpointSlice (not ready) as a gated scale-up's pods do and get no request at
all — what a served scale-up's pod start costs its users, the floor under
any warm-up.

Under steady user traffic to every host at once (cold.lab, slowstart.lab,
gated.lab, startonly.lab through the gateway), one way at a time: (a) each is
scaled 2 → 4 and the minute after measured, then (b) one pod of each (not the
control) is deleted (re-created) and the minute after measured. Reports
users' p99, p99.9 and max in each minute ÷ the steady state right before it
(as long, --steady), per way, and when the new pods became Ready, with the
machine's CPU busy share in each phase and when in the minute the slow
requests came (per 10 s, those slower than the steady p99.9). --repeat N runs each event N times
per way, the ways taking turns (a scale-up undone in between), and pools the
repeats' minutes (each repeat's own ratios listed too): one minute's p99.9 is
a handful of requests. Writes
gatebench.md, gatebench.json, gatebench.svg/png and the gate's log into --out.
A lab it started is stopped again (lab/scripts/down.sh).`,
		Example: `  flock /tmp/danki/lab.lock danki-lab gate-bench --out gate-bench-results`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			selected, run, err := parseGateBenchSelection(ways, events)
			if err != nil {
				return err // before anything starts
			}
			if repeat < 1 {
				return fmt.Errorf("--repeat %d: want 1 or more (each event's runs per way)", repeat)
			}
			root, err = filepath.Abs(root)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(root, "lab", "manifests", "gate")); err != nil {
				return fmt.Errorf("--root %s: not the danki repository (no lab/manifests/gate): %w", root, err)
			}
			if cache == "" {
				cache = labCache(root)
			}
			if kubeconfig == "" {
				kubeconfig = filepath.Join(cache, "lab", "kubeconfig")
			}
			if danki == "" {
				danki = filepath.Join(cache, "lab", "bin", "danki")
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			log := stderrLog(cmd)
			if !labRunning(filepath.Join(cache, "lab", "run", "pids")) {
				log.Info("starting the lab (lab/scripts/up.sh); stopped again at the end")
				defer func() {
					if derr := runScript(context.Background(), root, "lab/scripts/down.sh"); derr != nil && err == nil {
						err = derr
					}
				}()
				if err := runScript(ctx, root, "lab/scripts/up.sh"); err != nil {
					return err
				}
			} else {
				log.Info("using the running lab (left running afterwards)")
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			mesh, err := scenario.LabMesh(cache)
			if err != nil {
				return err
			}
			res, err := scenario.GateBench(ctx, scenario.GateBenchConfig{
				Common: scenario.Common{Root: root, Kubeconfig: kubeconfig, Danki: danki, GatewayURL: gateway, QPS: qps, Settle: settle, Mesh: mesh, Log: log},
				Steady: steady, After: after, GateLog: filepath.Join(out, "gate.log"), GateMaxConcurrent: maxConcurrent,
				Ways: selected, Events: run, NoiseMinutes: noiseMinutes, Repeat: repeat,
			})
			if err != nil {
				return err
			}
			return printGateBench(cmd.OutOrStdout(), "", out, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", ".", "the danki repository (lab/manifests/gate, deploy/gate, lab/scripts)")
	f.StringVar(&cache, "cache", "", "the lab's cache (default $DANKI_CACHE or <root>/.cache)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "the lab's kubeconfig (default <cache>/lab/kubeconfig)")
	f.StringVar(&danki, "danki", "", "the danki binary that runs `danki gate` (default <cache>/lab/bin/danki, the lab's)")
	f.StringVar(&gateway, "gateway", scenario.DefaultGatewayURL, "where user traffic enters")
	f.StringVar(&out, "out", "gate-bench-results", "directory for gatebench.md, gatebench.json, gatebench.svg, gatebench.png and gate.log")
	f.Float64Var(&qps, "qps", 40, "steady user traffic per way (per host), requests per second")
	f.DurationVar(&settle, "settle", 90*time.Second, "users alone on the fresh pods before measuring (warms them)")
	f.DurationVar(&steady, "steady", 0, "measured steady state before each event (0: as long as --after)")
	f.DurationVar(&after, "after", time.Minute, "measured stretch after each event")
	f.IntVar(&maxConcurrent, "gate-max-concurrent", 0, "danki gate's --max-concurrent: warm-ups at once (0: its default)")
	f.StringSliceVar(&ways, "ways", nil, "the ways to run, by Deployment (default all: "+strings.Join(wayNames(), ", ")+")")
	f.StringSliceVar(&events, "events", []string{"quiet", "scale-up", "pod-kill"}, "the events, in order: quiet (the control's quiet minute), scale-up, pod-kill; none for --noise-minutes alone")
	f.IntVar(&repeat, "repeat", 1, "run each event this many times per way, the ways taking turns (a scale-up undone in between); ratios pool the repeats, each repeat's own listed too")
	f.IntVar(&noiseMinutes, "noise-minutes", 0, "first measure this many consecutive quiet minutes, each ÷ the one before, per way: the lab's noise")
	return cmd
}

// parseGateBenchSelection turns --ways and --events into the bench's ways
// (nil: all) and events (empty: none).
func parseGateBenchSelection(ways, events []string) ([]scenario.GateWay, []string, error) {
	var selected []scenario.GateWay
	for _, name := range ways {
		i := slices.IndexFunc(allWays, func(w scenario.GateWay) bool { return w.Deployment == name })
		if i < 0 {
			return nil, nil, fmt.Errorf("--ways: unknown way %q (want some of %s)", name, strings.Join(wayNames(), ", "))
		}
		selected = append(selected, allWays[i])
	}
	run := []string{}
	for _, e := range events {
		name, ok := eventNames[e]
		if !ok && e != "none" {
			return nil, nil, fmt.Errorf("--events: unknown event %q (want some of quiet, scale-up, pod-kill, or none)", e)
		}
		if ok {
			run = append(run, name)
		}
	}
	return selected, run, nil
}

var eventNames = map[string]string{"quiet": scenario.EventQuiet, "scale-up": scenario.EventScaleUp, "pod-kill": scenario.EventPodKill}

// allWays are the gate bench's ways and its control.
var allWays = scenario.AllGateWays()

func wayNames() []string {
	var names []string
	for _, w := range allWays {
		names = append(names, w.Deployment)
	}
	return names
}

// labRunning reports whether the lab's API server and Argo controller, as
// started by lab/scripts (pid files in dir), are alive — as demo.sh checks.
func labRunning(dir string) bool {
	for _, name := range []string{"kube-apiserver", "argo-rollouts"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		if err != nil {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			return false
		}
	}
	return true
}

// runScript runs one of the lab's scripts, its output on stderr.
func runScript(ctx context.Context, root, script string) error {
	c := exec.CommandContext(ctx, filepath.Join(root, script))
	c.Dir = root
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	c.WaitDelay = 10 * time.Second
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return nil
}

// printGateBench prints the gate bench's report under title (if any) and
// writes its results into dir.
func printGateBench(w io.Writer, title, dir string, res *scenario.GateBenchResult) error {
	fmt.Fprintln(w)
	if title != "" {
		fmt.Fprintln(w, title)
	}
	if err := scenario.WriteGateBenchReport(w, res); err != nil {
		return err
	}
	paths, err := scenario.WriteGateBenchResults(dir, res)
	if err != nil {
		return fmt.Errorf("write the gate bench's results to %s: %w", dir, err)
	}
	for _, p := range paths {
		fmt.Fprintln(w, "wrote", p)
	}
	return nil
}
