package mtls

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRootsFromTheConfigMapIstiodWrites(t *testing.T) {
	m := newTestMesh(t)
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: dankiNS, Name: RootConfigMap},
		Data:       map[string]string{RootConfigMapKey: string(m.RootPEM)},
	})
	pool, err := RootsFromConfigMap(context.Background(), client, dankiNS)
	if err != nil {
		t.Fatal(err)
	}
	if !pool.Equal(m.Roots) {
		t.Error("the pool is not the mesh root")
	}

	_, err = RootsFromConfigMap(context.Background(), client, "elsewhere")
	if err == nil || !strings.Contains(err.Error(), "elsewhere/istio-ca-root-cert not found") || !strings.Contains(err.Error(), "root PEM") {
		t.Errorf("missing ConfigMap: %v", err)
	}
}

func TestRootsFromPEMRefusesWhatHoldsNoCertificate(t *testing.T) {
	for _, in := range []string{"", "not PEM", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"} {
		if _, err := RootsFromPEM([]byte(in)); err == nil || !strings.Contains(err.Error(), "no PEM CERTIFICATE") {
			t.Errorf("RootsFromPEM(%q) = %v", in, err)
		}
	}
	bad := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	if _, err := RootsFromPEM([]byte(bad)); err == nil || !strings.Contains(err.Error(), "certificate 1") {
		t.Errorf("a broken certificate: %v", err)
	}
}
