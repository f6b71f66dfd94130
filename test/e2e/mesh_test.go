package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/danki-dev/danki/lab/scenario"
	"github.com/danki-dev/danki/pkg/mtls"
	corev1 "k8s.io/api/core/v1"
)

// testMeshNamespace is the namespace of the ServiceAccount danki the tests'
// own requests to pods run as (the CLI's identity in docs/install.md).
const testMeshNamespace = "danki-system"

// startMesh reads the lab's mesh mode and, with sidecars, gives the test
// danki's mesh identity: its requests straight to a pod go over Istio mTLS
// with a certificate minted by the lab's istiod for danki-system/danki
// (pkg/mtls, the real CA), the way danki's load reaches a STRICT pod.
func (l *lab) startMesh(t *testing.T, cache string) {
	t.Helper()
	mesh, err := scenario.LabMesh(cache)
	if err != nil {
		t.Fatal(err)
	}
	l.mesh = mesh
	t.Logf("lab mesh: LAB_MESH=%s", mesh)
	if !scenario.Meshed(mesh) {
		return
	}
	if err := scenario.EnsureDankiServiceAccount(l.ctx, l.kube, testMeshNamespace); err != nil {
		t.Fatal(err)
	}
	l.podMesh = mtls.NewMesh(scenario.MeshConfig(l.kube, testMeshNamespace))
	t.Cleanup(l.podMesh.Close)
}

// meshed says whether the lab's pods have sidecars.
func (l *lab) meshed() bool { return scenario.Meshed(l.mesh) }

// podDo sends one request straight to pod's port, as danki's load does:
// over Istio mTLS (proving the pod's SPIFFE ID) when the pod has a sidecar,
// plaintext otherwise. It returns the status and body.
func (l *lab) podDo(ctx context.Context, pod *corev1.Pod, method string, port int, path string, header http.Header, body io.Reader) (int, []byte, error) {
	want, err := l.podMesh.PeerID(ctx, mtls.Auto, pod)
	if err != nil {
		return 0, nil, fmt.Errorf("pod %s: danki's mesh identity: %w", pod.Name, err)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return l.podMesh.Dial(ctx, dialer.DialContext, network, addr, want, mtls.HTTP1)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("http://%s:%d%s", pod.Status.PodIP, port, path), body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// podGet GETs path on pod's port (podDo) and wants 200.
func (l *lab) podGet(ctx context.Context, pod *corev1.Pod, port int, path string) (string, error) {
	status, b, err := l.podDo(ctx, pod, http.MethodGet, port, path, nil, nil)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("pod %s: GET %s: status %d: %.200s", pod.Name, path, status, b)
	}
	return string(b), nil
}

// assertCertRenewal: against the lab's real istiod CA, a short-lived
// certificate for danki's ServiceAccount is minted with the lifetime asked
// for, renewed before it expires (a new key, a new serial), and the renewed
// identity still reaches a STRICT pod over mTLS.
func (l *lab) assertCertRenewal(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	const validity = 30 * time.Second
	c := scenario.MeshConfig(l.kube, testMeshNamespace)
	c.Validity = validity
	m := mtls.NewMesh(c)
	defer m.Close()
	id, err := m.Identity(l.ctx)
	if err != nil {
		t.Fatalf("minting danki's identity from the lab's istiod: %v", err)
	}
	minted := time.Now()
	first := id.Certificate().Leaf
	// istiod backdates NotBefore (2 min of clock skew): the lifetime left
	// is what was asked for.
	if left := time.Until(first.NotAfter); left > validity+5*time.Second || left < validity/2 {
		t.Errorf("istiod signed a certificate valid for %s more; asked for %s", left.Round(time.Second), validity)
	}
	t.Logf("minted %s from the lab's istiod: serial %s, valid until %s (%s from now; NotBefore %s back)", id.ID(), first.SerialNumber,
		first.NotAfter.Format(time.TimeOnly), time.Until(first.NotAfter).Round(time.Second), time.Since(first.NotBefore).Round(time.Second))
	var renewed *x509.Certificate
	waitFor(t, l.ctx, validity, "the certificate renewed before it expires", func() (bool, string) {
		renewed = id.Certificate().Leaf
		return renewed.SerialNumber.Cmp(first.SerialNumber) != 0, "serial " + renewed.SerialNumber.String()
	})
	// Renewed at 50–80 % of the lifetime, not at once (pkg/mtls counts
	// from the mint, not from the backdated NotBefore).
	if after := time.Since(minted); after < validity/3 {
		t.Errorf("renewed %s after the mint of a %s certificate: too early", after.Round(time.Second), validity)
	}
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate expires %s, not after the first's %s", renewed.NotAfter, first.NotAfter)
	}
	saved := l.podMesh
	l.podMesh = m
	defer func() { l.podMesh = saved }()
	if _, err := l.podGet(l.ctx, pod, 8080, "/healthz"); err != nil {
		t.Errorf("mTLS with the renewed certificate: %v", err)
	}
	t.Logf("renewed before expiry (serial %s, until %s); mTLS to %s with it: OK", renewed.SerialNumber, renewed.NotAfter.Format(time.TimeOnly), pod.Name)
}
