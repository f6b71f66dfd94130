package scenario

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GateInstall is the warm gate installed as users install it: deploy/gate
// (kustomize, the Helm chart's twin: test/manifests keeps them agreeing)
// applied to the lab, its Deployment's pod run by the lab runner under
// ServiceAccount danki-gate with in-cluster config, its webhook called by
// the API server through Service danki-gate, its caBundle kept by the gate
// itself. Any rule missing from deploy/gate's RBAC fails the gate as it
// would for a user. The lab's overlay changes only where things listen:
//
//   - the host's network (hostNetwork; the lab's API server, istiod and
//     Prometheus listen on the host): the webhook and the health probes on
//     the host end of the lab's veth (LabHostIP), which the API server reaches
//     through the Service's EndpointSlice (lab/scripts/up.sh runs it with
//     --enable-aggregator-routing, so webhooks are called at endpoints: the
//     lab has no kube-proxy for a ClusterIP), the metrics where the lab's
//     Prometheus scrapes them (LabGateMetricsAddress);
//   - one replica, not two: on one host network both would bind one port;
//   - the certificate in the pod's working dir (the runner has no emptyDir);
//   - istiod's address, with the mesh on (no cluster DNS in the lab).
type GateInstall struct {
	// LogPath is the gate container's log, as the runner writes it.
	LogPath string
	// Pod is the gate's pod.
	Pod string

	kube       kubernetes.Interface
	kubeconfig string
	dir        string // the overlay InstallGate applied
}

// GateInstallOptions configures InstallGate.
type GateInstallOptions struct {
	// Root is the repository (deploy/gate); Kubeconfig the lab's; Cache the
	// lab's cache dir (its runner's pod logs, under lab/run/logs/pods).
	Root, Kubeconfig, Cache string
	// Mesh is the lab's LAB_MESH: with sidecars the gate warms over mTLS as
	// its ServiceAccount danki (deploy/gate's mesh identity).
	Mesh string
	// MaxConcurrent is appended as --max-concurrent when > 0.
	MaxConcurrent int
}

// LabHostIP is the host end of the lab's veth (mesh.sh HOST_IP): the
// address a host-network pod of the lab has.
const LabHostIP = "10.244.0.1"

const (
	gateNamespace  = "danki-gate"
	gateName       = "danki-gate"
	gateWebhookSNI = "danki-gate.danki-gate.svc" // deploy/gate's --cert-host
)

// InstallGate applies deploy/gate with the lab's overlay and waits until
// the gate's pod is ready, its webhook configuration trusts the CA it made
// and the webhook answers TLS for its Service's name. Stop removes it.
func InstallGate(ctx context.Context, kube kubernetes.Interface, o GateInstallOptions) (*GateInstall, error) {
	dir, err := os.MkdirTemp("", "danki-gate-install-")
	if err != nil {
		return nil, fmt.Errorf("gate install dir: %w", err)
	}
	g := &GateInstall{kube: kube, kubeconfig: o.Kubeconfig, dir: dir}
	if err := writeGateOverlay(dir, filepath.Join(o.Root, "deploy", "gate"), o); err != nil {
		return nil, err
	}
	fail := func(err error) (*GateInstall, error) {
		if g.Pod != "" {
			log, _ := os.ReadFile(g.LogPath)
			err = fmt.Errorf("%w\ndanki gate log (%s):\n%s", err, g.LogPath, tail(log, 2000))
		}
		return nil, errors.Join(err, g.Stop())
	}
	if err := kubectl(ctx, g.kubeconfig, "apply", "-k", dir); err != nil {
		return fail(err)
	}
	var ca []byte
	err = wait(ctx, 2*time.Minute, "the gate's pod Ready, the webhook's caBundle set and its TLS answering", func() (bool, error) {
		if err := g.findPod(ctx, o.Cache); err != nil {
			return false, err
		}
		wh, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, gateName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ca = wh.Webhooks[0].ClientConfig.CABundle; len(ca) == 0 {
			return false, errors.New("the webhook configuration's caBundle is still empty")
		}
		if err := dialGateTLS(ca); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return fail(err)
	}
	return g, nil
}

// findPod sets Pod and LogPath once the gate's pod is Ready.
func (g *GateInstall) findPod(ctx context.Context, cache string) error {
	pods, err := g.kube.CoreV1().Pods(gateNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + gateName})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		g.Pod = p.Name
		g.LogPath = filepath.Join(cache, "lab", "run", "logs", "pods", gateNamespace+"_"+p.Name+"_gate.log")
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("pod %s/%s not Ready yet (phase %s)", gateNamespace, p.Name, p.Status.Phase)
	}
	return fmt.Errorf("no running pod of Deployment %s/%s yet", gateNamespace, gateName)
}

// Stop deletes what InstallGate applied and waits until the gate's pods
// are gone (the runner has stopped their processes).
func (g *GateInstall) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	defer os.RemoveAll(g.dir)
	if err := kubectl(ctx, g.kubeconfig, "delete", "-k", g.dir, "--ignore-not-found", "--wait=false"); err != nil {
		return err
	}
	return wait(ctx, time.Minute, "the gate's pods gone", func() (bool, error) {
		pods, err := g.kube.CoreV1().Pods(gateNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + gateName})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			return false, fmt.Errorf("%d pod(s) left", len(pods.Items))
		}
		return true, nil
	})
}

// writeGateOverlay writes the lab's kustomization over a copy of deploy/gate
// (kustomize loads no base from outside its root).
func writeGateOverlay(dir, gate string, o GateInstallOptions) error {
	base := filepath.Join(dir, "gate")
	if err := os.CopyFS(base, os.DirFS(gate)); err != nil {
		return fmt.Errorf("copy %s: %w", gate, err)
	}
	args := []string{
		"--webhook-host=" + LabHostIP,
		"--health-probe-bind-address=" + LabHostIP + ":8081", // the probes' port in deployment.yaml
		"--metrics-bind-address=" + LabGateMetricsAddress,
		"--cert-dir=certs",
	}
	if Meshed(o.Mesh) {
		args = append(args, "--istiod-address="+LabCAAddress)
	}
	if o.MaxConcurrent > 0 {
		args = append(args, fmt.Sprintf("--max-concurrent=%d", o.MaxConcurrent))
	}
	var patch strings.Builder
	patch.WriteString("    - {op: replace, path: /spec/replicas, value: 1}\n")
	patch.WriteString("    - {op: add, path: /spec/template/spec/hostNetwork, value: true}\n")
	patch.WriteString("    - {op: add, path: /spec/template/spec/dnsPolicy, value: ClusterFirstWithHostNet}\n")
	for _, a := range args {
		// Later flags win: the shipped args stay as they are, these follow.
		fmt.Fprintf(&patch, "    - {op: add, path: /spec/template/spec/containers/0/args/-, value: %q}\n", a)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- gate\n" +
		"patches:\n- target: {kind: Deployment, name: danki-gate}\n  patch: |-\n" + patch.String()
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// dialGateTLS checks what the API server checks when it calls the webhook:
// the gate at LabHostIP:9443 serves a certificate for its Service's name
// that the webhook configuration's caBundle trusts.
func dialGateTLS(ca []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("the caBundle holds no PEM certificate")
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(LabHostIP, "9443"), &tls.Config{RootCAs: pool, ServerName: gateWebhookSNI})
	if err != nil {
		return fmt.Errorf("webhook TLS at %s:9443 as %s: %w", LabHostIP, gateWebhookSNI, err)
	}
	return c.Close()
}
