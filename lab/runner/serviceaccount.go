package runner

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceAccountMountPath is where the API server's ServiceAccount
// admission mounts a pod's kube-api-access volume, and where client-go's
// in-cluster config reads the token, the CA and the namespace (a fixed
// path: rest.InClusterConfig has no other).
const ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// serviceAccountTokenTTL is the lifetime of the tokens a pod gets (its
// kube-api-access volume's, its sidecar's istio-token). The kubelet
// rotates a projected token at 80 % of its life; the runner writes one at
// each container start, long enough for a lab's life.
const serviceAccountTokenTTL = 24 * time.Hour

// serviceAccountName is the pod's ServiceAccount, "default" when it names
// none (as the API server's admission sets it).
func serviceAccountName(pod *corev1.Pod) string {
	if sa := pod.Spec.ServiceAccountName; sa != "" {
		return sa
	}
	return "default"
}

// podToken is a token of the pod's ServiceAccount bound to the pod
// (TokenRequest) for audiences (nil: the API server's own).
func (r *Runner) podToken(ctx context.Context, pod *corev1.Pod, audiences []string) (string, error) {
	sa := serviceAccountName(pod)
	ttl := int64(serviceAccountTokenTTL / time.Second)
	tr, err := r.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: audiences, ExpirationSeconds: &ttl,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s/%s (audiences %v): %w", pod.Namespace, sa, audiences, err)
	}
	return tr.Status.Token, nil
}

// servesAPIAccess reports whether the runner gives container c the pod's
// service-account credentials and in-cluster environment, as the kubelet
// does: c mounts a projected volume with a service-account token at
// ServiceAccountMountPath, and the pod runs in the host's network, where
// the lab's API server (on 127.0.0.1) is reached. Pods in the lab's network
// namespace cannot reach it, so their volume stays unserved (nothing in
// them talks to the API server).
func (r *Runner) servesAPIAccess(pod *corev1.Pod, c corev1.Container) bool {
	if !pod.Spec.HostNetwork || r.cfg.APIServer == "" || r.cfg.WorkDir == "" {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != ServiceAccountMountPath {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.ServiceAccountToken != nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// writeServiceAccount writes what the kube-api-access volume holds into
// dir: a token of the pod's ServiceAccount bound to the pod (TokenRequest,
// the API server's own audience), the cluster's CA (ConfigMap
// kube-root-ca.crt, which the controller manager publishes in every
// namespace) and the pod's namespace.
func (r *Runner) writeServiceAccount(ctx context.Context, pod *corev1.Pod, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := r.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("service account volume: cluster CA (ConfigMap %s/kube-root-ca.crt): %w", pod.Namespace, err)
	}
	token, err := r.podToken(ctx, pod, nil)
	if err != nil {
		return fmt.Errorf("service account volume: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("service account volume: %w", err)
	}
	for name, content := range map[string]string{"token": token, "ca.crt": cm.Data["ca.crt"], "namespace": pod.Namespace} {
		// Written aside and renamed, as the kubelet's atomic writer does: a
		// client re-reading its token never sees half a file.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			return fmt.Errorf("service account volume: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("service account volume: %w", err)
		}
	}
	return nil
}

// apiAccessEnv is the in-cluster environment the kubelet gives every
// container (the kubernetes Service's address), here the API server as a
// host-network pod reaches it.
func (r *Runner) apiAccessEnv() []string {
	host, port, _ := net.SplitHostPort(r.cfg.APIServer)
	return []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
		"KUBERNETES_SERVICE_PORT_HTTPS=" + port, "KUBERNETES_PORT=tcp://" + r.cfg.APIServer}
}

// withServiceAccountMount runs argv in a mount namespace of its own where
// dir is bind-mounted at ServiceAccountMountPath, so the process and what it
// starts (the Argo controller's plugins) read the pod's credentials at the
// fixed path without the host seeing them. The mount point itself must
// exist on the host (ensureServiceAccountMountPoint).
func withServiceAccountMount(dir string, argv []string) []string {
	script := `mount --bind "$1" "$2" && shift 2 && exec "$@"`
	return append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
		dir, ServiceAccountMountPath}, argv...)
}

// ensureServiceAccountMountPoint creates the empty directory the bind
// mounts cover (/var/run is /run, a tmpfs: gone at reboot). It stays empty
// on the host.
func ensureServiceAccountMountPoint() error {
	if err := os.MkdirAll(ServiceAccountMountPath, 0o755); err != nil {
		return fmt.Errorf("service account mount point %s: %w", ServiceAccountMountPath, err)
	}
	return nil
}
