// Command danki-lab runs the parts of danki's local test lab that are Go
// programs: the pod runner (a stand-in for the kubelet) and the demo that
// rolls the sample app out without and with danki under user traffic.
//
// It is a separate binary from danki on purpose: danki is the file Argo
// Rollouts downloads by URL and checks by sha256, and it should carry only
// the plugins and the CLI, not the lab's pod runner, the demo's load
// generator or the plotting library and its fonts. The lab scripts
// (lab/scripts/mesh.sh, demo.sh, bench.sh) build both.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "danki-lab",
		Short: "Parts of danki's local test lab (make lab-up and make demo run them)",
		Long: `Parts of danki's local test lab: a real API server, Istio (istiod + Envoy),
Prometheus and the Argo Rollouts controller with danki's plugins on one
machine. "make lab-up" starts it all and runs "danki-lab runner"; "make demo"
and "make bench" run "danki-lab demo". Not part of a danki release: the
plugins and the CLI are the danki binary.`,
		SilenceUsage: true,
		PersistentPreRun: func(*cobra.Command, []string) {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			// Logs go to stderr: stdout is for the demo's report.
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages to stderr")
	root.AddCommand(newRunnerCmd(), newDemoCmd(), newAACmd(), newGateBenchCmd(), newResultsCmd(), newFilesCmd())
	return root
}

// interruptible is cmd's context, ended by an interrupt (Ctrl-C) or SIGTERM:
// every subcommand stops, and cleans up, on either.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

// stderrLog is a subcommand's log: text on stderr (stdout is for its
// report).
func stderrLog(cmd *cobra.Command) *slog.Logger {
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
}
