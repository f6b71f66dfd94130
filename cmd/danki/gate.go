package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/danki-dev/danki/pkg/gate"
)

type gateFlags struct {
	kube                    kubeFlags
	policy                  policyFlags
	mesh                    meshFlags
	webhookHost             string
	webhookPort             int
	webhookClientCA         string
	webhookClientNames      []string
	certDir                 string
	certHosts               []string
	certValidity            time.Duration
	webhookConfig           string
	maxTotalQPS             float64
	maxConcurrent           int
	maxPerNode              int
	maxPerNamespace         int
	maxHealthWait           time.Duration
	metricsAddr, healthAddr string
	leaderElect             bool
	leaderElectionNamespace string
}

func newGateCmd() *cobra.Command {
	f := &gateFlags{}
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Run the warm gate: keep pods annotated danki.dev/warm-up out of load balancing until they are warm",
		Long: `Run danki's warm gate, a Kubernetes controller (docs/gate.md). Pods opt in with the
annotation danki.dev/warm-up ("true", or a warm-up config in the danki/warmup
step's schema plus onFailure, retries, retryBackoff, port and yieldCPU). The
gate's mutating webhook adds the readiness gate danki.dev/warm to them; the
controller warms each at its pod IP once its containers are ready and sets the
condition True when its latency converged. Until then the pod is not Ready: no
Service endpoint, no user request. While a Burstable pod warms, its CPU request
is lowered in place to 1m (pods/resize, Kubernetes >= 1.33) and put back before
the condition is set, so the users' pods on its node run first (yieldCPU).

In a cluster it runs from deploy/gate. Out of cluster (--kubeconfig) it serves
the webhook on --webhook-host:--webhook-port; without tls.crt in --cert-dir it
makes a self-managed CA and prints where its ca.crt (the webhook's caBundle) is;
with --webhook-config it keeps that webhook configuration's caBundle current
itself, and renews the certificate at two thirds of --cert-validity. All
warm-ups together send at most --max-total-qps requests a second.
Pods' danki.dev/warm-up annotations are tenants' configs: the --max-* caps,
--deny-cidr and --allow-loopback-targets are the operator's bounds on them
(docs/security.md). Under Istio STRICT mTLS the gate dials pods with its own
mesh certificate (--mtls, --istiod-*, --mesh-*; docs/install.md).
--webhook-port 0 serves no webhook: pods must list the readiness gate themselves
and carry the label danki.dev/gated=true (the gate caches only such pods).`,
		Example: `  danki gate --kubeconfig ~/.kube/config --webhook-host 127.0.0.1 --webhook-port 9443 --cert-dir /tmp/danki-gate`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := f.kube.restConfig()
			if err != nil {
				return fmt.Errorf("%w; or run the gate in a pod", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if f.leaderElectionNamespace == "" && cmd.Flags().Changed("namespace") {
				f.leaderElectionNamespace, _ = f.kube.namespace()
			}
			pol, err := f.policy.policy(ctx, rc.Host)
			if err != nil {
				return err
			}
			pol, closeMesh, err := f.mesh.withMesh(pol, rc, log, slog.LevelInfo)
			if err != nil {
				return err
			}
			defer closeMesh()
			return gate.Run(ctx, rc, gate.Options{Policy: pol,
				MaxConcurrent: f.maxConcurrent, MaxPerNode: f.maxPerNode, MaxPerNamespace: f.maxPerNamespace, MaxHealthWait: f.maxHealthWait, WebhookHost: f.webhookHost, WebhookPort: f.webhookPort,
				WebhookClientCA: f.webhookClientCA, WebhookClientNames: f.webhookClientNames,
				CertDir: f.certDir, CertHosts: f.certHosts, CertValidity: f.certValidity, WebhookConfig: f.webhookConfig,
				MaxTotalQPS: f.maxTotalQPS, MetricsAddr: f.metricsAddr, HealthAddr: f.healthAddr,
				LeaderElection: f.leaderElect, LeaderElectionNamespace: f.leaderElectionNamespace, Log: log,
				OnStarted: func(_ *gate.Reconciler, dir string) {
					if f.webhookPort > 0 {
						log.Info("webhook caBundle", "file", filepath.Join(dir, gate.CAFile))
					}
				},
			})
		},
	}
	fl := cmd.Flags()
	f.kube.addFlags(fl, "namespace of the leader-election Lease out of cluster (same as --leader-election-namespace)")
	f.policy.addLoadFlags(fl)
	f.mesh.addFlags(fl)
	fl.StringVar(&f.webhookHost, "webhook-host", "", "address the webhook listens on (default: all)")
	fl.IntVar(&f.webhookPort, "webhook-port", 9443, "webhook port; 0 serves no webhook")
	fl.StringVar(&f.webhookClientCA, "webhook-client-ca", "", "PEM file of the CAs whose client certificate the webhook requires: only the API server, configured to present one (its admission-control kubeconfig), is answered (default: any caller; docs/gate.md)")
	fl.StringSliceVar(&f.webhookClientNames, "webhook-client-name", nil, "with --webhook-client-ca: a name (common name or DNS name) the client certificate must carry, repeatable (default: any certificate of that CA)")
	fl.StringVar(&f.certDir, "cert-dir", "", "directory with tls.crt and tls.key (e.g. cert-manager's Secret); without them a self-managed CA writes them there (default: a temporary directory)")
	fl.StringSliceVar(&f.certHosts, "cert-host", nil, "DNS names or IPs of the self-managed certificate (default: --webhook-host)")
	fl.DurationVar(&f.certValidity, "cert-validity", gate.DefaultCertValidity, "validity of the self-managed CA and certificate; renewed at two thirds of it (also at start, for a persisted --cert-dir)")
	fl.StringVar(&f.webhookConfig, "webhook-config", "", "MutatingWebhookConfiguration whose caBundle the gate keeps trusting its self-managed CA (patched at start and after each renewal); empty: set the caBundle yourself")
	fl.Float64Var(&f.maxTotalQPS, "max-total-qps", gate.DefaultMaxTotalQPS, "load budget: warm-up requests a second of all warm-ups together, each getting an equal share (max-total-qps / max-concurrent); the same process answers admission requests; -1: none")
	fl.IntVar(&f.maxConcurrent, "max-concurrent", gate.DefaultMaxConcurrent, "warm-ups running at once, at most")
	fl.IntVar(&f.maxPerNode, "max-per-node", gate.DefaultMaxPerNode, "warm-ups running at once on one node, at most (a cold JVM's JIT takes the node's cores from the pods serving users there); -1: no cap")
	fl.IntVar(&f.maxPerNamespace, "max-per-namespace", 0, "warm-ups of one namespace running at once, at most (0: none beyond its fair share of --max-concurrent while other namespaces wait; set it where tenants must not hold every slot with long warm-ups)")
	fl.DurationVar(&f.maxHealthWait, "max-health-wait", gate.DefaultMaxHealthWait, "longest a warm-up waits for its pod's health check while it holds a slot; then its attempt fails (retried after the back-off) and the slot goes to the next in line; a pod's healthTimeout may only narrow it; -1s: the pod's healthTimeout only")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "metrics endpoint address, e.g. :8080: controller-runtime's metrics and the gate's (docs/metrics.md) at /metrics (0: off)")
	fl.StringVar(&f.healthAddr, "health-probe-bind-address", "0", "health endpoints /healthz and /readyz, e.g. :8081 (0: off)")
	fl.BoolVar(&f.leaderElect, "leader-elect", false, "elect one active replica (Lease "+gate.LeaderElectionID+")")
	fl.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's own, in a cluster)")
	return cmd
}
