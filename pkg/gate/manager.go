package gate

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// LeaderElectionID names the gate's leader-election Lease.
const LeaderElectionID = "danki-gate"

// Options configure Run.
type Options struct {
	// MaxConcurrent caps warm-ups at once (DefaultMaxConcurrent);
	// MaxPerNode those on one node (DefaultMaxPerNode; negative: no cap).
	MaxConcurrent, MaxPerNode int
	// MaxPerNamespace caps one namespace's warm-ups at once (0: only its
	// fair share of MaxConcurrent while other namespaces wait).
	MaxPerNamespace int
	// MaxHealthWait bounds a warm-up's wait for its pod's health check
	// while it holds a slot (DefaultMaxHealthWait; negative: the pod's
	// healthTimeout only).
	MaxHealthWait time.Duration
	// WebhookHost and WebhookPort are where the mutating webhook listens;
	// port 0 serves no webhook (pods must carry the readiness gate).
	WebhookHost string
	WebhookPort int
	// WebhookClientCA, if set, is a PEM file of the CAs whose client
	// certificates the webhook requires (the API server's, presented
	// through its admission-control kubeconfig): a caller without one is
	// refused at the TLS handshake. WebhookClientNames, if set, are the
	// names (common name or DNS name) such a certificate must carry one
	// of. Empty: any caller that reaches the port is answered.
	WebhookClientCA    string
	WebhookClientNames []string
	// CertDir holds tls.crt and tls.key (e.g. cert-manager's Secret,
	// mounted). Empty, or with no tls.crt there: a self-managed CA signs a
	// certificate for CertHosts, written to CertDir (or a temporary
	// directory), and its CA to ca.crt there for the webhook's caBundle.
	// A self-managed certificate (also one an earlier run left in CertDir)
	// is renewed at two thirds of CertValidity (DefaultCertValidity), at
	// start if it is due, and the webhook server reloads it.
	CertDir      string
	CertHosts    []string
	CertValidity time.Duration
	// WebhookConfig names the MutatingWebhookConfiguration whose caBundle
	// the gate keeps trusting its self-managed CA: patched at start, after
	// each renewal, and checked every CABundleResync. Empty: the operator
	// sets the caBundle (or cert-manager's CA injector does).
	WebhookConfig  string
	CABundleResync time.Duration
	// MaxTotalQPS is the load budget of all warm-ups together
	// (DefaultMaxTotalQPS; negative: none).
	MaxTotalQPS float64
	// MetricsAddr and HealthAddr are the metrics and health probe
	// endpoints ("0" turns one off). The metrics endpoint serves
	// controller-runtime's registry: its own metrics and the gate's
	// (metrics.Gate, docs/metrics.md).
	MetricsAddr, HealthAddr string
	// LeaderElection makes replicas share the work: one warms, the others
	// wait (LeaderElectionID, in LeaderElectionNamespace).
	LeaderElection          bool
	LeaderElectionNamespace string
	// RecordKey signs the gate's records of pods' CPU requests
	// (yieldCPU). Empty: the Secret RecordKeySecret in RecordKeyNamespace
	// (LoadRecordKey), default LeaderElectionNamespace, else the
	// namespace the gate runs in, else danki-gate.
	RecordKey          RecordKey
	RecordKeyNamespace string
	Log                *slog.Logger
	// OnStarted, if set, is called with the reconciler and the certificate
	// directory once the manager is set up (tests; the CLI prints it).
	OnStarted func(r *Reconciler, certDir string)
	// Policy is the operator's, for the pods' annotations (Reconciler.Policy).
	Policy policy.Policy

	// secondRun lets a test process run the gate more than once (a
	// controller's name is unique within a process otherwise).
	secondRun bool
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
		Scheme: scheme,
		// The gate caches only the pods its webhook gated (wellknown.GatedLabel),
		// without their managedFields: its memory follows the pods that
		// opted in, not every pod of the cluster.
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{wellknown.GatedLabel: "true"})},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Metrics:                 metricsserver.Options{BindAddress: orDefault(o.MetricsAddr, "0")},
		HealthProbeBindAddress:  orDefault(o.HealthAddr, "0"),
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	}
	certDir := o.CertDir
	var rotator *certRotator
	if o.WebhookPort > 0 {
		if certDir == "" {
			dir, err := os.MkdirTemp("", "danki-gate-certs-")
			if err != nil {
				return fmt.Errorf("certificate directory: %w", err)
			}
			defer os.RemoveAll(dir)
			certDir = dir
		}
		var err error
		if rotator, err = selfManagedCerts(ctx, cfg, scheme, certDir, o, log); err != nil {
			return err
		}
		wo := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: certDir}
		if o.WebhookClientCA != "" {
			auth, err := webhookClientAuth(o.WebhookClientCA, o.WebhookClientNames)
			if err != nil {
				return err
			}
			wo.TLSOpts = append(wo.TLSOpts, auth)
		} else if len(o.WebhookClientNames) > 0 {
			return fmt.Errorf("webhook client names %v without a webhook client CA to verify them", o.WebhookClientNames)
		}
		mo.WebhookServer = webhook.NewServer(wo)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	if rotator != nil {
		if err := mgr.Add(rotator); err != nil {
			return fmt.Errorf("certificate rotation: %w", err)
		}
	}
	key, err := recordKey(ctx, cfg, scheme, o)
	if err != nil {
		return err
	}
	// On controller-runtime's registry, which the manager's metrics
	// endpoint serves; taken off again when the gate stops.
	gm, err := metrics.NewGate(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	defer gm.Unregister()
	r := &Reconciler{Metrics: gm, Client: mgr.GetClient(), Events: mgr.GetEventRecorder("danki-gate"), Log: log,
		MaxConcurrent: o.MaxConcurrent, MaxPerNode: o.MaxPerNode, MaxPerNamespace: o.MaxPerNamespace, MaxHealthWait: o.MaxHealthWait, MaxTotalQPS: o.MaxTotalQPS, RecordKey: key, Policy: o.Policy}
	err = builder.ControllerManagedBy(mgr).
		Named("danki-gate").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			pod, ok := obj.(*corev1.Pod)
			return ok && HasGate(pod)
		}))).
		// Reconciles are quick (a warm-up runs in the background): a few
		// workers keep a burst of new pods from waiting on each other.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: &o.secondRun}).
		WatchesRawSource(source.Channel(r.Requeue(), &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("pod controller: %w", err)
	}
	if o.WebhookPort > 0 {
		mgr.GetWebhookServer().Register(WebhookPath, &webhook.Admission{Handler: &Injector{decoder: admission.NewDecoder(scheme), RecordKey: key, Metrics: gm}})
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
	log.Info("danki gate starting", "webhook", net.JoinHostPort(o.WebhookHost, strconv.Itoa(o.WebhookPort)), "maxConcurrent", max(o.MaxConcurrent, 0),
		"maxTotalQPS", cmp.Or(o.MaxTotalQPS, DefaultMaxTotalQPS))
	return mgr.Start(ctx)
}

// DefaultCABundleResync is how often the gate checks that the webhook
// configuration still trusts its self-managed CA (Options.CABundleResync).
const DefaultCABundleResync = 10 * time.Minute

// selfManagedCerts makes or renews the self-managed certificate in certDir
// (EnsureCerts), makes the webhook configuration trust it, and returns the
// rotator that renews it from now on; nil when certDir holds certificates
// from elsewhere (cert-manager's), which their issuer renews.
func selfManagedCerts(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, certDir string, o Options, log *slog.Logger) (*certRotator, error) {
	hosts := o.CertHosts
	if len(hosts) == 0 {
		hosts = []string{o.WebhookHost}
	}
	validity := cmp.Or(o.CertValidity, DefaultCertValidity)
	certs, wrote, err := EnsureCerts(certDir, hosts, validity, time.Now())
	if err != nil {
		return nil, fmt.Errorf("self-managed webhook certificate: %w", err)
	}
	if !certs.SelfManaged() {
		log.Info("webhook certificate from elsewhere: reloaded when it changes, not renewed by the gate", "dir", certDir, "issuer", certs.Leaf.Issuer.String(), "notAfter", certs.Leaf.NotAfter)
		return nil, nil
	}
	if wrote {
		log.Info("webhook certificate from a self-managed CA", "dir", certDir, "hosts", hosts, "caBundle", filepath.Join(certDir, CAFile),
			"notAfter", certs.Leaf.NotAfter, "renewAt", certs.RenewAt())
	}
	rot := &certRotator{dir: certDir, hosts: hosts, validity: validity, log: log, resync: cmp.Or(o.CABundleResync, DefaultCABundleResync)}
	if o.WebhookConfig != "" {
		// A client of its own: the manager's caches nothing before it
		// starts, and caching webhook configurations would need list and
		// watch on all of them.
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("client for the webhook configuration: %w", err)
		}
		rot.patch = func(ctx context.Context, bundle []byte) (bool, error) {
			return PatchCABundle(ctx, c, o.WebhookConfig, bundle)
		}
		changed, err := rot.patch(ctx, certs.CABundle)
		if err != nil {
			// Not fatal: failurePolicy Ignore lets pods through ungated
			// meanwhile, and the rotator tries again.
			log.Error("make the webhook configuration trust the self-managed CA; retrying", "error", err, "webhookConfiguration", o.WebhookConfig)
		} else {
			log.Info("webhook caBundle current", "webhookConfiguration", o.WebhookConfig, "patched", changed)
		}
	}
	return rot, nil
}

// recordKey is o.RecordKey, or the one in the Secret RecordKeySecret, read
// (and if need be created) with a client that does not cache: the gate
// reads no other Secret.
func recordKey(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (RecordKey, error) {
	if len(o.RecordKey) > 0 {
		return o.RecordKey, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for the record key: %w", err)
	}
	ns := o.RecordKeyNamespace
	if ns == "" {
		ns = gateNamespace(o.LeaderElectionNamespace)
	}
	return LoadRecordKey(ctx, c, ns)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
