package mtls

import (
	"cmp"
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TokenAudience is the audience istiod's CA accepts (a token for any other
// audience is refused with Unauthenticated).
const TokenAudience = "istio-ca"

// TokenSource gives the bearer token that proves danki's identity to the
// CA. istiod reads the identity from it (by TokenReview), not from the CSR.
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// ServiceAccountToken is a TokenSource that asks the API server for a
// fresh token of one ServiceAccount (TokenRequest, the create verb on
// serviceaccounts/token). danki asks for its own ServiceAccount only, so its
// RBAC can name that one (resourceNames) and no Secret is read.
type ServiceAccountToken struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Audience is the token's audience; empty is TokenAudience.
	Audience string
	// Expiration is the token's lifetime; empty is 10m, the API server's
	// least. The token is used at once, for one CSR, and never kept.
	Expiration time.Duration
}

// Token requests a token.
func (s ServiceAccountToken) Token(ctx context.Context) (string, error) {
	secs := int64(cmp.Or(s.Expiration, 10*time.Minute) / time.Second)
	tr, err := s.Client.CoreV1().ServiceAccounts(s.Namespace).CreateToken(ctx, s.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{s.audience()},
			ExpirationSeconds: &secs,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("mtls: %s: %w (danki needs RBAC create on serviceaccounts/token for its own ServiceAccount)", s, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("mtls: %s: the API server returned an empty token", s)
	}
	return tr.Status.Token, nil
}

// String names the request, for errors: the ServiceAccount and audience.
func (s ServiceAccountToken) String() string {
	return fmt.Sprintf("TokenRequest for ServiceAccount %s/%s (audience %q)", s.Namespace, s.Name, s.audience())
}

func (s ServiceAccountToken) audience() string { return cmp.Or(s.Audience, TokenAudience) }
