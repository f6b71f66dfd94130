package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

// DefaultMeshServiceAccount is the ServiceAccount whose mesh identity
// danki's load carries: a dedicated one (deploy/ creates it beside the
// process that runs danki), never that process's own, so that
// AuthorizationPolicies name danki and not the whole Argo Rollouts
// controller, and a token for it can do nothing but prove "danki".
const DefaultMeshServiceAccount = "danki"

// inClusterNamespaceFile is where a pod finds its own namespace.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// meshFlags are the operator's Istio settings (issue #36): how danki gets
// its own mesh certificate from istiod and when its load uses it. They
// become one mtls.Mesh per process; tenants choose only a mode per config.
type meshFlags struct {
	mode           string
	caAddress      string
	caServerName   string
	clusterID      string
	rootFile       string
	namespace      string
	serviceAccount string
	validity       time.Duration
}

// addFlags registers the mesh flags.
func (f *meshFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.mode, "mtls", string(mtls.Auto), "Istio mTLS to pods, for configs that set no mtls: auto (mTLS to pods with Istio's tlsMode label or an istio-proxy container, plaintext to the others), istio (mTLS to every pod) or off (plaintext, no mesh identity)")
	fs.StringVar(&f.caAddress, "istiod-address", mtls.DefaultCAAddress, "host:port of istiod's CA, asked for danki's mesh certificate")
	fs.StringVar(&f.caServerName, "istiod-server-name", mtls.DefaultCAServerName, "name istiod's serving certificate is verified as")
	fs.StringVar(&f.clusterID, "mesh-cluster-id", mtls.DefaultClusterID, "cluster ID istiod knows this cluster by (its CLUSTER_ID): the API server that reviews danki's token")
	fs.StringVar(&f.rootFile, "mesh-root-file", "", "PEM file with the mesh root (an external CA such as istio-csr; default: ConfigMap "+mtls.RootConfigMap+" in --mesh-namespace)")
	fs.StringVar(&f.namespace, "mesh-namespace", "", "namespace of danki's mesh ServiceAccount (default: $POD_NAMESPACE, else the pod's own namespace)")
	fs.StringVar(&f.serviceAccount, "mesh-service-account", DefaultMeshServiceAccount, "danki's own ServiceAccount: the mesh identity its load carries (principal cluster.local/ns/<mesh-namespace>/sa/<this>); the process needs create on its serviceaccounts/token")
	fs.DurationVar(&f.validity, "mesh-cert-validity", mtls.DefaultValidity, "lifetime asked for danki's mesh certificate (istiod may shorten it); renewed at 50-80% of it")
}

// config is the MeshConfig the flags say, with no client; off is a nil
// config (no Mesh: every pod in plaintext).
func (f *meshFlags) config() (*mtls.MeshConfig, error) {
	mode, err := mtls.ParseMode(f.mode)
	if err != nil {
		return nil, fmt.Errorf("--mtls: %w", err)
	}
	if mode == mtls.Off {
		return nil, nil
	}
	if f.validity <= 0 {
		return nil, fmt.Errorf("--mesh-cert-validity %s: must be > 0 (leave it out for %s)", f.validity, mtls.DefaultValidity)
	}
	if f.serviceAccount == "" {
		return nil, fmt.Errorf("--mesh-service-account is empty: name danki's own ServiceAccount (default %s), or --mtls off", DefaultMeshServiceAccount)
	}
	if f.rootFile != "" {
		// Read it now: a wrong path or file is an operator's typo best
		// reported at start, not at the first pod with a sidecar. The Mesh
		// reads it again when it mints, so a rotated root is picked up.
		data, err := os.ReadFile(f.rootFile)
		if err == nil {
			_, err = mtls.RootsFromPEM(data)
		}
		if err != nil {
			return nil, fmt.Errorf("--mesh-root-file %s: %w (give the mesh root's PEM, or leave the flag out to read ConfigMap %s)", f.rootFile, err, mtls.RootConfigMap)
		}
	}
	return &mtls.MeshConfig{
		Mode:           mode,
		CAAddress:      f.caAddress,
		CAServerName:   f.caServerName,
		ClusterID:      f.clusterID,
		RootFile:       f.rootFile,
		Namespace:      cmp.Or(f.namespace, ownNamespace()),
		ServiceAccount: f.serviceAccount,
		Validity:       f.validity,
	}, nil
}

// mesh builds the process's one Mesh (nil with --mtls off) and logs what
// it is set to. Nothing is asked of istiod until a pod needs mTLS, so a
// cluster without Istio never sees a call. client asks for danki's token
// and the root ConfigMap; nil is allowed (the first mTLS dial then fails
// and says so). The caller closes the Mesh when the process ends.
func (f *meshFlags) mesh(client kubernetes.Interface, log *slog.Logger, level slog.Level) (*mtls.Mesh, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		log.Log(context.Background(), level, "mesh", "mtls", mtls.Off)
		return nil, nil
	}
	cfg.Client = client
	root := cfg.RootFile
	if root == "" {
		root = "configmap " + cfg.Namespace + "/" + mtls.RootConfigMap
	}
	// The principal assumes Istio's default trust domain: the real one is
	// read from the certificate istiod signs.
	principal := "unknown: give --mesh-namespace"
	if cfg.Namespace != "" {
		principal = mtls.Principal(mtls.SPIFFEID("", cfg.Namespace, cfg.ServiceAccount))
	}
	log.Log(context.Background(), level, "mesh", "mtls", cfg.Mode, "istiod", cfg.CAAddress, "root", root, "principal", principal)
	return mtls.NewMesh(*cfg), nil
}

// withMesh sets p.Mesh from the flags, with a client built from rc (nil
// when there is no cluster configuration: mTLS then fails at the first
// pod that needs it, and plaintext work goes on). It returns the policy
// and what closes the Mesh.
func (f *meshFlags) withMesh(p policy.Policy, rc *rest.Config, log *slog.Logger, level slog.Level) (policy.Policy, func(), error) {
	var client kubernetes.Interface
	if rc != nil {
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return p, func() {}, fmt.Errorf("kubernetes client for danki's mesh identity: %w", err)
		}
		client = c
	}
	m, err := f.mesh(client, log, level)
	if err != nil {
		return p, func() {}, err
	}
	p.Mesh = m
	return p, m.Close, nil
}

// ownNamespace is the namespace danki runs in: $POD_NAMESPACE (the
// downward API), else the pod's service account mount; "" outside a pod.
func ownNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	data, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// localPolicy is the command line's policy (local: policy.Local with the
// command's caps, capFlags) with the Mesh of the flags, for the commands
// that load pods; its client is the one of the kube flags (kubectl's
// rules), nil without a cluster. The mesh settings are logged at debug
// level (-v): a CLI run is not a service.
func (f *meshFlags) localPolicy(k *kubeFlags, local policy.Policy) (policy.Policy, func(), error) {
	rc, err := k.restConfig()
	if err != nil {
		rc = nil // --url targets need no cluster; a pod that needs mTLS will say what is missing
	}
	return f.withMesh(local, rc, slog.Default(), slog.LevelDebug)
}
