package scenario

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// GateProcess is `danki gate` running out of cluster against the lab, its
// webhook registered on the lab's API server (deploy/gate/webhook.yaml with
// clientConfig.url https://127.0.0.1:<port>/mutate-pods and the gate's
// self-managed CA as caBundle), as a user would run it with --kubeconfig.
// The bench and TestLabWarmGate both use it: the gate under test is the
// danki binary the lab runs, not a copy of its code.
type GateProcess struct {
	// CertDir holds the self-managed CA (ca.crt) and the serving certificate.
	CertDir string
	// LogPath is the file with the gate's stderr (its structured log).
	LogPath string
	// Port is the webhook's port on 127.0.0.1.
	Port int

	cmd     *exec.Cmd
	kube    kubernetes.Interface
	webhook string
	done    chan struct{}
	err     error // cmd.Wait's, once done is closed
}

// GateOptions configures StartGate.
type GateOptions struct {
	// Danki is the danki binary; Kubeconfig the lab's; Root the repository
	// (for deploy/gate/webhook.yaml).
	Danki, Kubeconfig, Root string
	// LogPath receives the gate's log (created or truncated).
	LogPath string
	// Port of the webhook on 127.0.0.1; 0 picks a free one.
	Port int
	// MaxConcurrent is passed as --max-concurrent when > 0.
	MaxConcurrent int
	// Mesh is the lab's LAB_MESH (LabMesh): with sidecars the gate warms
	// over mTLS as ServiceAccount danki-gate/danki.
	Mesh string
	// MetricsAddress, when set, serves the gate's metrics there
	// (--metrics-bind-address): LabGateMetricsAddress is the one the lab's
	// Prometheus scrapes (job danki-gate).
	MetricsAddress string
}

// LabGateMetricsAddress is where the lab's Prometheus looks for the warm
// gate's metrics (lab/scripts/mesh.sh DANKI_GATE_METRICS_PORT).
const LabGateMetricsAddress = "127.0.0.1:18097"

// gateWebhookPath is pkg/gate's WebhookPath (the Injector's URL path).
const gateWebhookPath = "/mutate-pods"

// StartGate starts `danki gate`, waits until its webhook answers TLS with a
// certificate from its own CA, and registers the webhook on the API server.
// Stop undoes both.
func StartGate(ctx context.Context, kube kubernetes.Interface, o GateOptions) (*GateProcess, error) {
	if o.Port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		o.Port = p
	}
	// The gate keeps the key it signs pods' CPU records with in a Secret of
	// its own namespace (deploy/gate's danki-gate), created at its start.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "danki-gate"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("the gate's namespace danki-gate: %w", err)
	}
	meshFlags := MeshFlags(o.Mesh, ns.Name)
	if meshFlags != nil {
		if err := EnsureDankiServiceAccount(ctx, kube, ns.Name); err != nil {
			return nil, err
		}
	}
	certDir, err := os.MkdirTemp("", "danki-gate-lab-")
	if err != nil {
		return nil, fmt.Errorf("gate cert dir: %w", err)
	}
	logFile, err := os.Create(o.LogPath)
	if err != nil {
		return nil, fmt.Errorf("gate log: %w", err)
	}
	args := []string{"gate", "--kubeconfig", o.Kubeconfig, "--webhook-host", "127.0.0.1",
		"--webhook-port", strconv.Itoa(o.Port), "--cert-dir", certDir}
	if o.MaxConcurrent > 0 {
		args = append(args, "--max-concurrent", strconv.Itoa(o.MaxConcurrent))
	}
	if o.MetricsAddress != "" {
		args = append(args, "--metrics-bind-address", o.MetricsAddress)
	}
	args = append(args, meshFlags...)
	// Not CommandContext: Stop ends it with SIGTERM (a clean shutdown),
	// not SIGKILL when ctx ends.
	cmd := exec.Command(o.Danki, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s gate: %w", o.Danki, err)
	}
	g := &GateProcess{CertDir: certDir, LogPath: o.LogPath, Port: o.Port, cmd: cmd, kube: kube, done: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		logFile.Close()
		close(g.done)
	}()
	fail := func(err error) (*GateProcess, error) {
		_ = g.Stop()
		log, _ := os.ReadFile(o.LogPath)
		return nil, fmt.Errorf("%w\ndanki gate log:\n%s", err, tail(log, 2000))
	}
	var ca []byte
	err = wait(ctx, time.Minute, "danki gate's webhook to serve TLS from its CA", func() (bool, error) {
		select {
		case <-g.done:
			return false, fmt.Errorf("danki gate exited: %v", g.err)
		default:
		}
		ca, err = os.ReadFile(filepath.Join(certDir, "ca.crt"))
		if err != nil {
			return false, err
		}
		if err := dialTLS(ca, o.Port); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return fail(err)
	}
	if err := g.register(ctx, filepath.Join(o.Root, "deploy", "gate", "webhook.yaml"), ca); err != nil {
		return fail(err)
	}
	return g, nil
}

// register creates deploy/gate's MutatingWebhookConfiguration pointing at
// the local webhook (replacing one left by an earlier run).
func (g *GateProcess) register(ctx context.Context, path string, ca []byte) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("webhook config: %w", err)
	}
	var wh admissionv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &wh); err != nil {
		return fmt.Errorf("webhook config %s: %w", path, err)
	}
	if len(wh.Webhooks) != 1 {
		return fmt.Errorf("webhook config %s: %d webhooks, want 1", path, len(wh.Webhooks))
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", g.Port, gateWebhookPath)
	wh.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{URL: &url, CABundle: ca}
	whs := g.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := whs.Delete(ctx, wh.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete old webhook config %s: %w", wh.Name, err)
	}
	if _, err := whs.Create(ctx, &wh, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register webhook %s: %w", wh.Name, err)
	}
	g.webhook = wh.Name
	return nil
}

// Stop unregisters the webhook and ends the gate (SIGTERM, SIGKILL after
// 10 s). It returns the gate's exit error, if it did not exit cleanly.
func (g *GateProcess) Stop() error {
	var errs []error
	if g.webhook != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, g.webhook, metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("unregister webhook %s: %w", g.webhook, err))
		}
		g.webhook = ""
	}
	select {
	case <-g.done:
	default:
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
			errs = append(errs, errors.New("danki gate did not stop within 10 s of SIGTERM: killed"))
		}
	}
	var exit *exec.ExitError
	if g.err != nil && !(errors.As(g.err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()) {
		errs = append(errs, fmt.Errorf("danki gate: %w", g.err))
	}
	_ = os.RemoveAll(g.CertDir)
	return errors.Join(errs...)
}

// Exited reports whether the gate process has ended (and how).
func (g *GateProcess) Exited() (bool, error) {
	select {
	case <-g.done:
		return true, g.err
	default:
		return false, nil
	}
}

// dialTLS checks that 127.0.0.1:port serves a certificate the CA signed for
// 127.0.0.1 — what the API server will check when it calls the webhook.
func dialTLS(ca []byte, port int) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("ca.crt holds no PEM certificate")
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		return fmt.Errorf("webhook TLS: %w", err)
	}
	return c.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n bytes of b, from a line start.
func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[len(b)-n:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
