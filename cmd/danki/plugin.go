package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/danki-dev/danki/rollouts"
	"github.com/spf13/cobra"
)

func newPluginCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plugin",
		Short: "Serve an Argo Rollouts plugin (started by the Argo Rollouts controller)",
		Long: `Serve one of danki's Argo Rollouts plugins over go-plugin RPC.

The Argo Rollouts controller starts this command itself, once per plugin name
listed in its argo-rollouts-config ConfigMap, with args ["plugin"]. The kind is
read from the ARGO_ROLLOUTS_RPC_PLUGIN handshake variable:

  step           danki/warmup   warm canary pods until their latency converges
  trafficrouter  danki/istio    raise the canary weight gradually, gated on tail latency
  metricprovider danki/latency  tail-latency SLOs for AnalysisTemplates

Logs go to stderr (they show in the controller log); stdout belongs to go-plugin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// go-plugin serves until the process ends, and main's signal
			// context would keep SIGTERM from ending it: a plugin is the
			// controller's child and must stop when told to (a teardown
			// that stops the controller TERMs its plugins too).
			signal.Reset(syscall.SIGTERM)
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			return rollouts.Serve(logger)
		},
	}
}
