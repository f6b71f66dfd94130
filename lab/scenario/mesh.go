package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/danki-dev/danki/pkg/mtls"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The lab's mesh (lab/scripts/mesh.sh, LAB_MESH): with sidecars, every
// danki process the lab starts gets the operator's mesh flags, as an install
// in a STRICT mesh would (docs/install.md), and its own ServiceAccount.
const (
	// LabCAAddress is istiod's CA on the host end of the lab's veth
	// (mesh.sh's HOST_IP:ISTIOD_SECURE_PORT).
	LabCAAddress = "10.244.0.1:15012"
	// DankiServiceAccount is the ServiceAccount danki's load runs as, in
	// the namespace of the process (deploy/: beside the controller and the
	// gate).
	DankiServiceAccount = "danki"
)

// Mesh modes of the lab (LAB_MESH).
const (
	MeshNone       = "none"
	MeshPermissive = "permissive"
	MeshStrict     = "strict"
)

// LabMesh is the running lab's LAB_MESH, which lab/scripts/mesh.sh writes
// to <cache>/lab/run/mesh-mode on up.
func LabMesh(cache string) (string, error) {
	path := filepath.Join(cache, "lab", "run", "mesh-mode")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the lab's mesh mode: %w (is the lab up? lab/scripts/mesh.sh up writes it)", err)
	}
	switch m := strings.TrimSpace(string(b)); m {
	case MeshNone, MeshPermissive, MeshStrict:
		return m, nil
	default:
		return "", fmt.Errorf("%s: %q, want %s, %s or %s", path, m, MeshNone, MeshPermissive, MeshStrict)
	}
}

// Meshed says whether a lab in mesh mode mesh has sidecars.
func Meshed(mesh string) bool { return mesh != "" && mesh != MeshNone }

// MeshFlags are danki's operator flags for a process whose mesh identity is
// ServiceAccount danki of namespace ns; none when the lab has no mesh.
func MeshFlags(mesh, ns string) []string {
	if !Meshed(mesh) {
		return nil
	}
	return []string{"--istiod-address", LabCAAddress, "--mesh-namespace", ns, "--mesh-service-account", DankiServiceAccount}
}

// MeshConfig is MeshFlags for a process that dials with pkg/mtls itself.
func MeshConfig(kube kubernetes.Interface, ns string) mtls.MeshConfig {
	return mtls.MeshConfig{CAAddress: LabCAAddress, Namespace: ns, ServiceAccount: DankiServiceAccount, Client: kube}
}

// EnsureDankiServiceAccount creates namespace ns and ServiceAccount danki in
// it, unless they exist: the identity MeshFlags names.
func EnsureDankiServiceAccount(ctx context.Context, kube kubernetes.Interface, ns string) error {
	nso := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, nso, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s for danki's mesh identity: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DankiServiceAccount, Namespace: ns}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ServiceAccount %s/%s (danki's mesh identity): %w", ns, DankiServiceAccount, err)
	}
	return nil
}
