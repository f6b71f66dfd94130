package gate

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/danki-dev/danki/pkg/wellknown"
)

// clientCA is a CA that issues client certificates (as the one an API
// server's admission-control kubeconfig presents).
type clientCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newClientCA(t *testing.T) *clientCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &clientCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue is a client certificate named cn.
func (ca *clientCA) issue(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestWebhookServesOnlyTheAPIServersCertificate: with a client CA (and a
// name), the webhook answers a caller presenting that CA's certificate of
// that name, and refuses at the handshake one with none, one from another
// CA and one of another name.
func TestWebhookServesOnlyTheAPIServersCertificate(t *testing.T) {
	dir := t.TempDir()
	serving, err := SelfSignedCerts(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	apiServers := newClientCA(t)
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, apiServers.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := webhookClientAuth(caFile, []string{"kube-apiserver"})
	if err != nil {
		t.Fatal(err)
	}
	addr := startWebhook(t, webhook.Options{Host: "127.0.0.1", CertDir: dir, TLSOpts: []func(*tls.Config){auth}})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serving)

	for _, tc := range []struct {
		name     string
		cert     []tls.Certificate
		answered bool
	}{
		{"the API server's certificate", []tls.Certificate{apiServers.issue(t, "kube-apiserver")}, true},
		{"no certificate", nil, false},
		{"another CA's certificate of the same name", []tls.Certificate{newClientCA(t).issue(t, "kube-apiserver")}, false},
		{"the CA's certificate of another name", []tls.Certificate{apiServers.issue(t, "a-tenant")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: tc.cert, MinVersion: tls.VersionTLS12}}}
			resp, err := client.Post("https://"+addr+WebhookPath, "application/json", bytes.NewReader(admissionReview(t)))
			if !tc.answered {
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					t.Fatalf("answered %s: %.200s", resp.Status, body)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			defer resp.Body.Close()
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil || !review.Response.Allowed || len(review.Response.Patch) == 0 {
				t.Fatalf("answer %s: %+v, %v; want the gated pod's patch", resp.Status, review.Response, err)
			}
		})
	}
}

func TestWebhookClientAuthNeedsACA(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{empty, filepath.Join(t.TempDir(), "missing.crt")} {
		if _, err := webhookClientAuth(f, nil); err == nil {
			t.Errorf("client CA %s accepted", f)
		}
	}
}

// startWebhook serves the Injector with o (its port chosen here) and
// returns its address once it accepts connections.
func startWebhook(t *testing.T, o webhook.Options) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv := webhook.NewServer(o)
	srv.Register(WebhookPath, &webhook.Admission{Handler: &Injector{decoder: admission.NewDecoder(clientgoscheme.Scheme), RecordKey: testKey}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("webhook server did not start")
		}
	}
}

// admissionReview is an AdmissionReview of an opted-in pod requesting CPU,
// as the API server sends one.
func admissionReview(t *testing.T) []byte {
	t.Helper()
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: "shop", Annotations: map[string]string{wellknown.WarmUpAnnotation: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v2", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32")}}}}}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "review", Operation: admissionv1.Create, Namespace: "shop",
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   k8sruntime.RawExtension{Raw: raw}}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
