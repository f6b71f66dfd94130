package analysis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// QueryObserver counts the queries a Prometheus source runs: danki's own
// metrics (pkg/metrics.Plugin implements it).
type QueryObserver interface {
	// PrometheusQuery is called once per query: errorKind is empty when
	// it succeeded, else one of bad_query (Prometheus rejected the PromQL),
	// server (another error Prometheus answered), timeout, tls,
	// unreachable, credentials (danki could not read its token) or result
	// (the answer was not an instant vector).
	PrometheusQuery(errorKind string)
}

// WithQueryObserver counts the Prometheus source's queries with o.
func WithQueryObserver(o QueryObserver) Option { return func(a *Analyzer) { a.queries = o } }

// queryErrorKind is the QueryObserver's word for a query's outcome ("" for
// a usable answer). Prometheus.explain words its message by the same kind.
func queryErrorKind(err error, val model.Value) string {
	if err == nil {
		switch val.(type) {
		case model.Vector, *model.Scalar, nil:
			return ""
		}
		return "result"
	}
	var apiErr *promv1.Error
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var netErr net.Error
	var urlErr *url.Error
	if _, ok := asCredentialError(err); ok {
		return "credentials"
	}
	switch {
	case errors.As(err, &apiErr) && apiErr.Type == promv1.ErrBadData:
		return "bad_query"
	case errors.As(err, &apiErr):
		return "server"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return "tls"
	case errors.As(err, &netErr), errors.As(err, &urlErr):
		return "unreachable"
	}
	return "server"
}
