package mtls

import (
	"encoding/json"
	"strings"
	"testing"

	"istio.io/api/label"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/config"
)

func TestParseModeNamesTheFieldAndTheValues(t *testing.T) {
	for in, want := range map[string]Mode{"": Auto, "auto": Auto, " istio ": Istio, "off": Off} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "Istio", "on", "strict"} {
		_, err := ParseMode(in)
		if want := `mtls: "` + in + `": want auto, istio or off`; err == nil || err.Error() != want {
			t.Errorf("ParseMode(%q) = %v; want %s", in, err, want)
		}
	}
}

func TestModeDecodesFromJSON(t *testing.T) {
	var c struct {
		Load struct {
			MTLS Mode `json:"mtls"`
		} `json:"load"`
	}
	if err := config.Decode([]byte(`{"load": {"mtls":"istio"}}`), &c); err != nil || c.Load.MTLS != Istio {
		t.Fatalf("got %q, %v", c.Load.MTLS, err)
	}
	// Decoded as tenant configs are (pkg/config): the field's path and
	// the values it takes.
	for in, want := range map[string]string{
		`{"load": {"mtls":"x"}}`:  `load.mtls: want auto, istio or off, got "x"`,
		`{"load": {"mtls":true}}`: `load.mtls: want auto, istio or off, got true`,
	} {
		if err := config.Decode([]byte(in), &c); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %s", in, err, want)
		}
	}
	// Plain encoding/json still names the field.
	if err := json.Unmarshal([]byte(`{"load": {"mtls":"x"}}`), &c); err == nil || !strings.Contains(err.Error(), "load.mtls") {
		t.Errorf("encoding/json: %v", err)
	}
}

func TestForPodChoosesMTLSForPodsWithASidecar(t *testing.T) {
	pod := func(labels map[string]string, containers, inits []string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
		for _, n := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n})
		}
		for _, n := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n})
		}
		return p
	}
	tlsMode := func(v string) map[string]string { return map[string]string{TLSModeLabel: v} }
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		auto bool
	}{
		{"no sidecar", pod(nil, []string{"app"}, nil), false},
		{"tlsMode label", pod(tlsMode("istio"), []string{"app"}, nil), true},
		{"istio-proxy container", pod(nil, []string{"app", "istio-proxy"}, nil), true},
		{"native sidecar", pod(nil, []string{"app"}, []string{"istio-proxy"}), true},
		{"istio-init only", pod(nil, []string{"app"}, []string{"istio-init"}), false},
		{"label and proxy", pod(tlsMode("istio"), []string{"app", "istio-proxy"}, nil), true},
		{"tlsMode disabled wins over the proxy", pod(tlsMode("disabled"), []string{"app", "istio-proxy"}, nil), false},
		{"other labels", pod(map[string]string{"app": "cart"}, []string{"app"}, nil), false},
		{"nil pod", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for mode, want := range map[Mode]bool{Auto: tc.auto, "": tc.auto, Istio: true, Off: false} {
				if got := mode.ForPod(tc.pod); got != want {
					t.Errorf("Mode(%q).ForPod = %v, want %v", mode, got, want)
				}
			}
		})
	}
}

func TestSPIFFEIDs(t *testing.T) {
	if got, want := SPIFFEID("", "shop", "cart"), "spiffe://cluster.local/ns/shop/sa/cart"; got != want {
		t.Errorf("SPIFFEID = %s, want %s", got, want)
	}
	if got, want := SPIFFEID("corp.example", "shop", "cart"), "spiffe://corp.example/ns/shop/sa/cart"; got != want {
		t.Errorf("SPIFFEID = %s, want %s", got, want)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	if got, want := PodSPIFFEID("", p), "spiffe://cluster.local/ns/shop/sa/default"; got != want {
		t.Errorf("PodSPIFFEID without a ServiceAccount = %s, want %s", got, want)
	}
	p.Spec.ServiceAccountName = "cart"
	if got, want := PodSPIFFEID("td", p), "spiffe://td/ns/shop/sa/cart"; got != want {
		t.Errorf("PodSPIFFEID = %s, want %s", got, want)
	}
	if td, err := TrustDomainOf("spiffe://corp.example/ns/a/sa/b"); err != nil || td != "corp.example" {
		t.Errorf("TrustDomainOf = %q, %v", td, err)
	}
	for _, bad := range []string{"", "https://x/ns/a", "spiffe:///ns/a"} {
		if _, err := TrustDomainOf(bad); err == nil {
			t.Errorf("TrustDomainOf(%q): no error", bad)
		}
	}
}

func TestTheLabelIsIstios(t *testing.T) {
	if TLSModeLabel != label.SecurityTlsMode.Name {
		t.Errorf("TLSModeLabel %q; Istio's API says %q", TLSModeLabel, label.SecurityTlsMode.Name)
	}
}
