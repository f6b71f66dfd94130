package gate

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/danki-dev/danki/pkg/policy"
)

// LeaderElectionID names the gate's leader-election Lease.
const LeaderElectionID = "danki-gate"

// Options configure Run.
type Options struct {
	// MaxConcurrent caps warm-ups at once (DefaultMaxConcurrent);
	// MaxPerNode those on one node (DefaultMaxPerNode; negative: no cap).
	MaxConcurrent, MaxPerNode int
	// WebhookHost and WebhookPort are where the mutating webhook listens;
	// port 0 serves no webhook (pods must carry the readiness gate).
	WebhookHost string
	WebhookPort int
	// CertDir holds tls.crt and tls.key (e.g. cert-manager's Secret,
	// mounted). Empty, or with no tls.crt there: a self-managed CA signs a
	// certificate for CertHosts, written to CertDir (or a temporary
	// directory), and its CA to ca.crt there for the webhook's caBundle.
	CertDir   string
	CertHosts []string
	// MetricsAddr and HealthAddr are the metrics and health probe
	// endpoints ("0" turns one off).
	MetricsAddr, HealthAddr string
	// LeaderElection makes replicas share the work: one warms, the others
	// wait (LeaderElectionID, in LeaderElectionNamespace).
	LeaderElection          bool
	LeaderElectionNamespace string
	Log                     *slog.Logger
	// OnStarted, if set, is called with the reconciler and the certificate
	// directory once the manager is set up (tests; the CLI prints it).
	OnStarted func(r *Reconciler, certDir string)
	// Policy is the operator's, for the pods' annotations (Reconciler.Policy).
	Policy policy.Policy
}

// Run runs the gate until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mo := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: orDefault(o.MetricsAddr, "0")},
		HealthProbeBindAddress:  orDefault(o.HealthAddr, "0"),
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	}
	certDir := o.CertDir
	if o.WebhookPort > 0 {
		if certDir == "" {
			dir, err := os.MkdirTemp("", "danki-gate-certs-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			certDir = dir
		}
		if _, err := os.Stat(filepath.Join(certDir, CertFile)); err != nil {
			hosts := o.CertHosts
			if len(hosts) == 0 {
				hosts = []string{o.WebhookHost}
			}
			if _, err := SelfSignedCerts(certDir, hosts); err != nil {
				return fmt.Errorf("self-managed webhook certificate: %w", err)
			}
			log.Info("webhook certificate from a self-managed CA", "dir", certDir, "hosts", hosts, "caBundle", filepath.Join(certDir, CAFile))
		}
		mo.WebhookServer = webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: certDir})
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Events: mgr.GetEventRecorder("danki-gate"), Log: log, MaxConcurrent: o.MaxConcurrent, MaxPerNode: o.MaxPerNode, Policy: o.Policy}
	err = builder.ControllerManagedBy(mgr).
		Named("danki-gate").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			pod, ok := obj.(*corev1.Pod)
			return ok && HasGate(pod)
		}))).
		// Reconciles are quick (a warm-up runs in the background): a few
		// workers keep a burst of new pods from waiting on each other.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		WatchesRawSource(source.Channel(r.Requeue(), &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}
	if o.WebhookPort > 0 {
		mgr.GetWebhookServer().Register(WebhookPath, &webhook.Admission{Handler: NewInjector(admission.NewDecoder(scheme))})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if o.OnStarted != nil {
		o.OnStarted(r, certDir)
	}
	log.Info("danki gate starting", "webhook", net.JoinHostPort(o.WebhookHost, strconv.Itoa(o.WebhookPort)), "maxConcurrent", max(o.MaxConcurrent, 0))
	return mgr.Start(ctx)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
