package mtls

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Mode says when danki dials a pod with Istio mTLS (the mtls setting).
type Mode string

// The Mode values.
const (
	// Auto dials with mTLS the pods that have a sidecar (HasSidecar) and
	// plaintext the others: a mesh with some pods outside it works.
	Auto Mode = "auto"
	// Istio dials every pod with mTLS.
	Istio Mode = "istio"
	// Off dials every pod in plaintext, as before this package.
	Off Mode = "off"
)

// Istio's names for a pod in the mesh. They are Istio's, not danki's, so
// they live here and not in pkg/wellknown.
const (
	// TLSModeLabel is the label Istio's injector puts on a pod with a
	// sidecar; Istio's own clients (auto mTLS) send mTLS to endpoints whose
	// value is TLSModeIstio and plaintext to the others.
	TLSModeLabel = "security.istio.io/tlsMode"
	// TLSModeIstio is TLSModeLabel's value for "accepts Istio mTLS".
	TLSModeIstio = "istio"
	// ProxyContainer is the injected sidecar's container name (an init
	// container with restartPolicy Always when Istio runs native sidecars).
	ProxyContainer = "istio-proxy"
)

// ParseMode reads the mtls setting; empty is Auto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(s)); m {
	case "":
		return Auto, nil
	case Auto, Istio, Off:
		return m, nil
	}
	return "", fmt.Errorf("mtls: %q: want %s, %s or %s", s, Auto, Istio, Off)
}

// UnmarshalJSON reads the setting with ParseMode's checks. Its error is a
// *json.UnmarshalTypeError, so that a config decoded with pkg/config names
// the field's path (load.mtls) and the values it takes (ConfigValues).
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Mode]()}
	}
	v, err := ParseMode(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: reflect.TypeFor[Mode]()}
	}
	*m = v
	return nil
}

// ConfigValues says what a Mode may be, for pkg/config's decoding errors.
func (Mode) ConfigValues() string { return fmt.Sprintf("%s, %s or %s", Auto, Istio, Off) }

// ForPod reports whether danki dials pod with mTLS under mode m (the zero
// Mode is Auto).
func (m Mode) ForPod(pod *corev1.Pod) bool {
	switch m {
	case Istio:
		return true
	case Off:
		return false
	}
	return HasSidecar(pod)
}

// HasSidecar reports whether pod has an Istio sidecar that expects mTLS.
// The tlsMode label decides when it is set, as for Istio's own clients (a
// pod labelled "disabled" asks for plaintext even with a proxy); without it,
// an istio-proxy container (or native-sidecar init container) does.
func HasSidecar(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	if v, ok := pod.Labels[TLSModeLabel]; ok {
		return v == TLSModeIstio
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == ProxyContainer {
				return true
			}
		}
	}
	return false
}
