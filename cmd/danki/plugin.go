package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/rollouts"
	"github.com/spf13/cobra"
)

func newPluginCmd() *cobra.Command {
	var (
		pf          policyFlags
		mf          meshFlags
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Serve an Argo Rollouts plugin (started by the Argo Rollouts controller)",
		Long: `Serve one of danki's Argo Rollouts plugins over go-plugin RPC.

The Argo Rollouts controller starts this command itself, once per plugin name
listed in its argo-rollouts-config ConfigMap, with args ["plugin", …]. The kind is
read from the ARGO_ROLLOUTS_RPC_PLUGIN handshake variable:

  step           danki/warmup   warm canary pods until their latency converges
  trafficrouter  danki/istio    raise the canary weight gradually, gated on tail latency
  metricprovider danki/latency  tail-latency SLOs for AnalysisTemplates

The flags are the operator's policy, given as the plugin's args in
argo-rollouts-config (args: ["plugin", "--prometheus", "http://…"]): what
the Rollouts and AnalysisTemplates of every namespace may ask danki to do.
Tenant configs can only narrow it; docs/security.md has the threat model.

Under Istio STRICT mTLS danki dials pods with its own mesh certificate:
--mtls and the --istiod-* / --mesh-* flags say how it gets one (a
TokenRequest for --mesh-service-account, audience istio-ca, sent to
istiod's CA on the first pod that needs it) and when to use it
(docs/install.md, "Istio STRICT mTLS").

--metrics-address serves danki's own metrics (docs/metrics.md) at
http://ADDRESS/metrics from this plugin process, off by default. The
controller runs one process per plugin entry, so give each entry its own
port (e.g. :9101, :9102, :9103). A port that cannot be bound is logged and
the plugin serves on without metrics.

Logs go to stderr (they show in the controller log); stdout belongs to go-plugin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// go-plugin serves until the process ends, and main's signal
			// context would keep SIGTERM from ending it: a plugin is the
			// controller's child and must stop when told to (a teardown
			// that stops the controller TERMs its plugins too).
			signal.Reset(syscall.SIGTERM)
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			var apiServer string
			rc, err := rollouts.RestConfig()
			if err == nil {
				apiServer = rc.Host
			} else {
				rc = nil // no cluster: pod lookups and mTLS fail when asked for, URLs still work
			}
			pol, err := pf.policy(cmd.Context(), apiServer)
			if err != nil {
				return err
			}
			pol, closeMesh, err := mf.withMesh(pol, rc, logger, slog.LevelInfo)
			if err != nil {
				return err
			}
			defer closeMesh()
			var m *metrics.Plugin
			if metricsAddr != "" {
				m = serveMetrics(metricsAddr, logger)
			}
			return rollouts.Serve(logger, pol, m)
		},
	}
	pf.addFlags(cmd.Flags())
	mf.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&metricsAddr, "metrics-address", "", "serve danki's own Prometheus metrics at http://ADDRESS/metrics, e.g. :9101 (one port per plugin entry; default: off)")
	return cmd
}

// serveMetrics starts the plugin process's metrics endpoint on addr and
// returns what records into it; nil when it could not start: the plugin
// serves the controller either way (its process ends with the plugin, and
// so does the endpoint).
func serveMetrics(addr string, logger *slog.Logger) *metrics.Plugin {
	reg, m, err := metrics.NewRegistry()
	if err == nil {
		var srv *metrics.Server
		if srv, err = metrics.Serve(addr, reg, logger); err == nil {
			logger.Info("serving danki's metrics", "address", "http://"+srv.Addr+metrics.Path)
			return m
		}
	}
	logger.Error("no metrics endpoint; the plugin serves on without it", "metricsAddress", addr, "error", err)
	return nil
}
