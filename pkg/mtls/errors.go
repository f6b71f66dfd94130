package mtls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// explainCAError says what a failed CreateCertificate means. The gRPC
// status stays wrapped: status.Code still reads it.
func explainCAError(err error, addr, serverName, clusterID string, token TokenSource) error {
	switch status.Code(err) {
	case codes.Unauthenticated:
		who := "danki's token"
		if s, ok := token.(fmt.Stringer); ok {
			who = "the token of " + s.String()
		}
		return fmt.Errorf("mtls: istiod's CA at %s refused %s: it accepts only a token with audience %q that the API server of cluster %q can review; check the audience, the cluster ID, and that danki's RBAC allows create on serviceaccounts/token for its own ServiceAccount: %w",
			addr, who, TokenAudience, clusterID, err)
	case codes.Unavailable:
		return fmt.Errorf("mtls: istiod's CA at %s: %w (is istiod's CA on and reachable at that address, and does the mesh root verify its serving certificate as %s?)", addr, err, serverName)
	}
	return fmt.Errorf("mtls: istiod's CA at %s: %w", addr, err)
}

// IdentityMismatchError is a pod whose certificate, signed by the mesh
// root, names another identity than the pod's ServiceAccount: the address
// now belongs to another workload, or the pod runs as another
// ServiceAccount than danki was told.
type IdentityMismatchError struct {
	Want string
	Got  []string
}

func (e *IdentityMismatchError) Error() string {
	got := "no SPIFFE ID"
	if len(e.Got) > 0 {
		got = strings.Join(e.Got, ", ")
	}
	return fmt.Sprintf("mtls: want %s, the pod presented %s (another workload at this address, or the pod runs as another ServiceAccount)", e.Want, got)
}

// ExplainPlaintextReset returns err with the likely reason when it is what a
// STRICT sidecar does to a plaintext connection (a reset, or EOF before any
// answer), for errors of plaintext dials only: err unchanged otherwise.
func ExplainPlaintextReset(err error) error {
	if err == nil || !looksReset(err) {
		return err
	}
	return fmt.Errorf("%w (the pod's sidecar closed a plaintext connection: a PeerAuthentication in STRICT mode admits only Istio mTLS; set mtls to auto or istio so danki dials the pod with its mesh certificate)", err)
}

var eofWord = regexp.MustCompile(`\bEOF\b`)

// looksReset: a reset or an EOF, as a wrapped errno or only as text (gRPC
// and some load libraries flatten the error into a message).
func looksReset(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection reset by peer") || eofWord.MatchString(msg)
}

// explainHandshake says what a failed TLS handshake with a pod means, for
// the failures with one likely cause.
func explainHandshake(err error, addr string) error {
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		return fmt.Errorf("mtls: %s answered in plaintext: the pod has no sidecar on that port (set mtls to auto or off for it): %w", addr, err)
	case strings.Contains(err.Error(), "unknown certificate authority"):
		return fmt.Errorf("mtls: %s does not trust danki's certificate: is the CA danki asked the one of the pod's mesh? %w", addr, err)
	}
	return fmt.Errorf("mtls: TLS to %s: %w", addr, err)
}

// rbacDenied is what Envoy's RBAC filter answers when an AuthorizationPolicy
// denies a request: the body of an HTTP 403, the message of a gRPC
// PermissionDenied.
const rbacDenied = "RBAC: access denied"

// Principal is how an AuthorizationPolicy names an identity: the SPIFFE ID
// without "spiffe://" (cluster.local/ns/danki-system/sa/danki).
func Principal(spiffeID string) string {
	return strings.TrimPrefix(spiffeID, "spiffe://")
}

// DeniedHTTP returns an error naming the principal to allow when an HTTP
// response (its status code and body) is an AuthorizationPolicy's denial of
// self (danki's SPIFFE ID), nil otherwise.
func DeniedHTTP(code int, body []byte, self string) error {
	if code != http.StatusForbidden || !strings.Contains(string(body), rbacDenied) {
		return nil
	}
	return deniedError(fmt.Errorf("HTTP 403 %q", rbacDenied), self)
}

// ExplainDenied returns a gRPC error with the principal to allow when it is
// an AuthorizationPolicy's denial of self (PermissionDenied, "RBAC: access
// denied"), err unchanged otherwise.
func ExplainDenied(err error, self string) error {
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), rbacDenied) {
		return err
	}
	return deniedError(err, self)
}

func deniedError(err error, self string) error {
	return fmt.Errorf("mtls: an AuthorizationPolicy denied danki's warm-up: allow principal %q (danki's mesh identity) on the pod's workload: %w", Principal(self), err)
}
