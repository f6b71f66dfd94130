package gate

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RecordKey is the gate's HMAC-SHA256 key for the records it keeps on pods
// of their CPU requests (wellknown.CPURequestsSignatureAnnotation, wellknown.CPUYieldCondition):
// a record that does not verify against it was not written by this gate —
// a pod's author wrote or changed it — and the gate refuses it. Every
// replica of the gate (they all serve the webhook) uses the same key, from
// the Secret RecordKeySecret in the gate's own namespace (LoadRecordKey),
// so a record outlives the replica that wrote it. An empty key verifies
// nothing: the gate then never resizes a pod.
type RecordKey []byte

// RecordKeySecret names the Secret holding the RecordKey (data key
// "key"), in the gate's namespace. The gate creates it, with a random key,
// when it is missing; it is immutable. Deleting it changes the key: pods
// admitted before keep their full CPU weight (their records no longer
// verify), and a pod lowered at that moment keeps its lowered request
// until it is replaced.
const RecordKeySecret = "danki-gate-record-key"

const recordKeyField = "key"

// minRecordKey is the least key length accepted, in bytes.
const minRecordKey = 32

// sign is the key's MAC over parts (each length-prefixed, so no two lists
// of parts sign alike), URL-safe base64.
func (k RecordKey) sign(parts ...string) string {
	m := hmac.New(sha256.New, k)
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		m.Write(n[:])
		m.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify reports whether sig is the key's MAC over parts; an empty key
// verifies nothing.
func (k RecordKey) verify(sig string, parts ...string) bool {
	if len(k) == 0 {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	want, _ := base64.RawURLEncoding.DecodeString(k.sign(parts...))
	return hmac.Equal(got, want)
}

// LoadRecordKey reads the RecordKey from the Secret RecordKeySecret in
// namespace, creating it with a random key if it does not exist (another
// replica creating it at the same time wins; its key is read). c must read
// from the API server, not a cache: the gate may get and create this one
// Secret (deploy/gate/rbac.yaml), not list or watch Secrets.
func LoadRecordKey(ctx context.Context, c client.Client, namespace string) (RecordKey, error) {
	name := client.ObjectKey{Namespace: namespace, Name: RecordKeySecret}
	for range 2 {
		var s corev1.Secret
		err := c.Get(ctx, name, &s)
		if err == nil {
			k := s.Data[recordKeyField]
			if len(k) < minRecordKey {
				return nil, fmt.Errorf("secret %s: data %q has %d bytes, want at least %d", name, recordKeyField, len(k), minRecordKey)
			}
			return RecordKey(k), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the record key (secret %s): %w", name, err)
		}
		key := make([]byte, minRecordKey)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("generate the record key: %w", err)
		}
		immutable := true
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RecordKeySecret,
				Labels: map[string]string{"app.kubernetes.io/name": "danki-gate"}},
			Immutable: &immutable,
			Type:      corev1.SecretTypeOpaque,
			Data:      map[string][]byte{recordKeyField: key},
		}
		err = c.Create(ctx, &s)
		if err == nil {
			return RecordKey(key), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create the record key (secret %s): %w", name, err)
		}
		// Another replica made it first: read theirs.
	}
	return nil, fmt.Errorf("record key (secret %s): created and deleted again meanwhile", name)
}

// gateNamespace is where the gate's own objects live: namespace if given,
// else the namespace of the pod it runs in, else "danki-gate".
func gateNamespace(namespace string) string {
	if namespace != "" {
		return namespace
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "danki-gate"
}
