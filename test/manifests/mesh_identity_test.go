package manifests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/test/testenv"
)

// testMeshIdentity applies the RBAC of danki's mesh identity for real —
// deploy/rbac/mesh-identity.yaml (the plugins) and deploy/gate/rbac.yaml (the
// gate) — and runs pkg/mtls's own calls as the ServiceAccount each binds:
// the TokenRequest for danki's ServiceAccount with audience istio-ca
// succeeds and the API server reviews that token as danki's identity; a
// token for any other ServiceAccount, any Secret, any other ConfigMap is
// Forbidden; the mesh root ConfigMap is readable.
//
// It must run before testRBAC: there the controller's ServiceAccount also
// gets the ClusterRole danki-plugins (which may get Secrets, for
// bearerTokenSecret), and "no Secret" would no longer be the mesh role's.
func testMeshIdentity(t *testing.T, e *testenv.Env, k *kubectl, files ...string) {
	ctx := context.Background()
	if _, err := e.Kube.RbacV1().ClusterRoleBindings().Get(ctx, "danki-plugins", metav1.GetOptions{}); err == nil {
		t.Fatal("the ClusterRoleBinding danki-plugins exists already: this test must run before the rbac one")
	}
	createNamespaces(t, e.Kube, map[string]bool{"argo-rollouts": true, "danki-gate": true})
	for _, f := range files {
		if out, err := k.run("apply", "--server-side", "--field-manager=danki-manifests-test", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}

	for _, tc := range []struct {
		ns, caller string // where danki runs, and the ServiceAccount it runs as
	}{
		{"argo-rollouts", "argo-rollouts"}, // the plugins, inside the Argo Rollouts controller
		{"danki-gate", "danki-gate"},       // the gate
	} {
		t.Run(tc.ns, func(t *testing.T) {
			seedMeshNamespace(t, e.Kube, tc.ns, tc.caller)
			user := "system:serviceaccount:" + tc.ns + ":" + tc.caller
			waitMayCreateToken(t, e.Kube, user, tc.ns, "danki")
			kube := impersonate(t, e.Config, user)

			// danki's own token: the call Mesh makes before asking istiod.
			own := mtls.ServiceAccountToken{Client: kube, Namespace: tc.ns, Name: "danki"}
			token, err := own.Token(ctx)
			if err != nil {
				t.Fatalf("%s as %s: %v", own, user, err)
			}
			// What istiod does with it (TokenReview for audience istio-ca):
			// the identity is danki's, not the caller's.
			review, err := e.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
				Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{mtls.TokenAudience}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := "system:serviceaccount:" + tc.ns + ":danki"; !review.Status.Authenticated || review.Status.User.Username != want {
				t.Errorf("TokenReview of danki's token: authenticated %v as %q (%s), want %s", review.Status.Authenticated, review.Status.User.Username, review.Status.Error, want)
			}

			forbidden := map[string]func() error{
				"a token for the caller's own ServiceAccount": func() error {
					_, err := mtls.ServiceAccountToken{Client: kube, Namespace: tc.ns, Name: tc.caller}.Token(ctx)
					return err
				},
				"a token for another ServiceAccount of the namespace": func() error {
					_, err := mtls.ServiceAccountToken{Client: kube, Namespace: tc.ns, Name: "other"}.Token(ctx)
					return err
				},
				"a token for danki in the default namespace": func() error {
					_, err := mtls.ServiceAccountToken{Client: kube, Namespace: "default", Name: "danki"}.Token(ctx)
					return err
				},
				"get a Secret": func() error {
					_, err := kube.CoreV1().Secrets(tc.ns).Get(ctx, "other", metav1.GetOptions{})
					return err
				},
				"list Secrets": func() error {
					_, err := kube.CoreV1().Secrets(tc.ns).List(ctx, metav1.ListOptions{})
					return err
				},
				"get another ConfigMap": func() error {
					_, err := kube.CoreV1().ConfigMaps(tc.ns).Get(ctx, "other", metav1.GetOptions{})
					return err
				},
			}
			for what, call := range forbidden {
				if err := call(); !apierrors.IsForbidden(err) {
					t.Errorf("%s as %s: want Forbidden, got %v", what, user, err)
				}
			}

			if _, err := mtls.RootsFromConfigMap(ctx, kube, tc.ns); err != nil {
				t.Errorf("the mesh root as %s: %v", user, err)
			}
		})
	}

	// The control: a ServiceAccount the RBAC does not bind may not mint
	// danki's token (so the successes above are the Role's).
	kube := impersonate(t, e.Config, "system:serviceaccount:argo-rollouts:not-bound")
	if _, err := (mtls.ServiceAccountToken{Client: kube, Namespace: "argo-rollouts", Name: "danki"}).Token(ctx); !apierrors.IsForbidden(err) {
		t.Errorf("danki's token as an unbound ServiceAccount: want Forbidden, got %v", err)
	}
}

// seedMeshNamespace creates, as admin, what the calls above act on: the
// mesh root istiod would publish (a real self-signed PEM), the caller's
// and another ServiceAccount (so a refused token is RBAC's Forbidden, not
// NotFound), a Secret and another ConfigMap.
func seedMeshNamespace(t *testing.T, kube kubernetes.Interface, ns, caller string) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range []func() error{
		func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: mtls.RootConfigMap, Namespace: ns},
				Data:       map[string]string{mtls.RootConfigMapKey: meshRootPEM(t)},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: caller, Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := obj(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("seed %s: %v", ns, err)
		}
	}
}

// waitMayCreateToken polls SubjectAccessReviews until the RBAC authorizer
// has the new Role and RoleBinding (it learns of them through informers).
func waitMayCreateToken(t *testing.T, kube kubernetes.Interface, user, ns, sa string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: sa,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if sar.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may not create serviceaccounts/token %s/%s after applying the mesh RBAC: %s", user, ns, sa, sar.Status.Reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func impersonate(t *testing.T, admin *rest.Config, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(user, ":")[2], "system:authenticated"}}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// meshRootPEM stands in for istiod's root in the istio-ca-root-cert
// ConfigMap: a self-signed CA certificate (RootsFromConfigMap parses it).
func meshRootPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
