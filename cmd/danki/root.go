package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/danki-dev/danki/pkg/metrics"
)

func newRootCmd() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "danki",
		Short: "Warm-up-aware, tail-latency-gated canary rollouts on Istio",
		Long: `danki (暖機, "warm-up run") warms new canary pods of JVM services with synthetic
load until their latency converges, shifts Istio traffic to them gradually, and
gates every step on tail latency (p99, p99.9) measured against stable.

It runs as Argo Rollouts plugins (danki/warmup, danki/istio, danki/latency; see
"danki plugin") and as this CLI to do the same by hand.

Exit status: 0 success (a Pass, a warm pod); 1 a verdict against the version
(analyze: Fail; warmup: not warm; capacity: the knee below --min-qps);
2 inconclusive (analyze: too little data); 3 an error ("Error: …" on stderr).`,
		SilenceUsage: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			// Logs go to stderr: stdout is for command output (and, for
			// `danki plugin`, belongs to go-plugin).
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages to stderr")
	// danki --version prints what `danki version` prints.
	info, ok := debug.ReadBuildInfo()
	root.Version = buildVersion(info, ok)
	root.SetVersionTemplate(versionLine(root.Version))
	metrics.BuildVersion = root.Version // danki_build_info's version label
	// Every command is listed here, each defined in its own file.
	root.AddCommand(newWarmupCmd(), newShiftCmd(), newAnalyzeCmd(), newCapacityCmd(), newGateCmd(), newPluginCmd(), newVersionCmd())
	return root
}
