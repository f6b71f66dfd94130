package warmup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/danki-dev/danki/pkg/mtls"
)

// Istio mTLS in the warm-up. A pod behind a sidecar in STRICT mode
// (PeerAuthentication) resets plaintext, and danki has no sidecar of its
// own: it dials the pod's IP through the warm-up's checked dialer (the
// operator's network policy and the run's pod guard, exactly as for
// plaintext), then completes Istio's mTLS handshake itself
// (policy.Policy.Mesh, pkg/mtls), as a sidecar would. The URL stays
// http://podIP:port: HTTP/1.1 (ALPN istio-http/1.1) or gRPC's HTTP/2
// (istio-h2) runs inside the TLS connection.
//
// Which pods: Config.MTLS (auto, istio or off; empty is the operator's
// default), per pod, at the start of Run (resolvePeers): Target.Peer is
// the SPIFFE ID of the pod's ServiceAccount, which the pod's certificate
// must name.

// MeshStatusPorts are the Istio agent's own ports on a pod with a sidecar
// (15020 merged metrics and app probes, 15021 health). The sidecar does
// not intercept them and they speak plaintext: Istio's injector rewrites a
// pod's httpGet readinessProbe to 15020 (/app-health/<container>/readyz),
// so a health URL taken from such a probe is dialled in plaintext, while
// one on any other port of the pod goes through the sidecar, with mTLS.
var MeshStatusPorts = []string{"15020", "15021"}

// mode is the mtls setting the config runs with: its own, else the
// operator's default (off with no mesh).
func (c *Config) mode() mtls.Mode { return c.policy().Mesh.Resolve(c.MTLS) }

// resolvePeers sets each target's Peer from its pod under the config's
// mode (a Peer already set is kept: the caller decided) and records, for
// the dialer, which addresses are dialled with mTLS (meshRoutes.peers) and
// which plaintext ones are pods with a sidecar (meshRoutes.plain: their
// resets are a STRICT sidecar's). danki's identity is minted here, on
// the first target that needs it; a mint that fails fails the run.
func (c *Config) resolvePeers(ctx context.Context, sets ...[]Target) (meshRoutes, error) {
	var routes meshRoutes
	m, mode := c.policy().Mesh, c.mode()
	for _, targets := range sets {
		for i := range targets {
			t := &targets[i]
			if t.Peer == "" && t.pod != nil {
				peer, err := m.PeerID(ctx, mode, t.pod)
				if err != nil {
					return routes, fmt.Errorf("mtls %s: %s: %w", mode, t, err)
				}
				t.Peer = peer
			}
			if t.Peer == "" && t.pod == nil && mode == mtls.Istio {
				return routes, fmt.Errorf("mtls: istio: %s is no pod (an explicit URL): Istio mTLS verifies the SPIFFE ID of a pod's ServiceAccount, and a URL names none; set mtls to auto or off to send plaintext to URL targets, or leave the URLs out to warm the rollout's pods", t)
			}
			c.notePeer(&routes, t)
		}
	}
	return routes, nil
}

// notePeer records t's addresses (its URL's, and its health URL's and JIT
// signal's unless on an agent port) as mTLS to t.Peer, or as plaintext to
// a pod with a sidecar.
func (c *Config) notePeer(routes *meshRoutes, t *Target) {
	jit := c.jitURL(*t)
	for _, raw := range []string{t.URL, t.HealthURL, jit} {
		addr := hostPort(raw)
		if addr == "" {
			continue
		}
		if _, port, _ := net.SplitHostPort(addr); raw != t.URL && slices.Contains(MeshStatusPorts, port) {
			continue
		}
		switch {
		case t.Peer != "":
			if routes.peers == nil {
				routes.peers = map[string]string{}
			}
			routes.peers[addr] = t.Peer
		case t.pod != nil && mtls.HasSidecar(t.pod):
			if routes.plain == nil {
				routes.plain = map[string]bool{}
			}
			routes.plain[addr] = true
		}
	}
}

// hostPort is raw's host:port as a dialer sees it ("" when raw is empty
// or not a URL).
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// dial is the warm-up's one dial: the checked dialer (Config.dialer) and,
// for an address of a target with a Peer, the mTLS handshake over it
// speaking p. A plain connection is returned as the checked dialer made it.
func (c *session) dial(ctx context.Context, network, address string, p mtls.Protocol) (net.Conn, error) {
	return c.policy().Mesh.Dial(ctx, c.dialer(c.Timeout.D()).DialContext, network, address, c.routes.peers[address], p)
}

// meshAddr says how address is dialled: mTLS (a Peer), or plaintext to a
// pod with a sidecar (strict: its resets mean STRICT).
func (c *session) meshAddr(address string) (mtlsPeer string, sidecar bool) {
	return c.routes.peers[address], c.routes.plain[address]
}

// explainer explains a target's failures in the mesh's terms.
type explainer struct {
	// peer is the SPIFFE ID the target proves ("" plaintext).
	peer string
	// explainResets: a plaintext target whose resets may be a STRICT
	// sidecar's: a pod with a sidecar (Istio's injector labels every one).
	// Not any target because danki has mesh settings: the operator's
	// default is auto everywhere, and a pod with no sidecar that resets
	// (a crash, a full accept queue) must not be blamed on a
	// PeerAuthentication.
	explainResets bool
	// self names danki's mesh identity for denials.
	self func() string
}

// explainerFor is the explainer of the target at rawURL.
func (c *session) explainerFor(rawURL string) explainer {
	peer, sidecar := c.meshAddr(hostPort(rawURL))
	return explainer{peer: peer, explainResets: peer == "" && sidecar, self: c.policy().Mesh.Self}
}

// transport explains a transport error (a failed request or dial).
func (e explainer) transport(err error) error {
	if e.explainResets {
		return mtls.ExplainPlaintextReset(err)
	}
	return err
}

// grpc explains a failed gRPC call: a reset, or an AuthorizationPolicy's
// PermissionDenied.
func (e explainer) grpc(err error) error {
	if e.peer != "" {
		return mtls.ExplainDenied(err, e.self())
	}
	return e.transport(err)
}

// deniedBodyBytes is how much of a 403's body is read to tell Envoy's
// RBAC denial from the application's own 403.
const deniedBodyBytes = 512

// http returns the denial of an AuthorizationPolicy when resp is one (an
// HTTP 403 "RBAC: access denied" over mTLS), leaving resp's body readable
// as it was; nil otherwise.
func (e explainer) http(resp *http.Response) error {
	if e.peer == "" || resp.StatusCode != http.StatusForbidden {
		return nil
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, deniedBodyBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err := mtls.DeniedHTTP(resp.StatusCode, head, e.self()); err != nil {
		return meshDenial{err}
	}
	return nil
}

// meshDenial is an AuthorizationPolicy's denial of danki's identity: a
// failure message shows it beside the answer's status.
type meshDenial struct{ error }

func (d meshDenial) Unwrap() error { return d.error }

// isIdentityMismatch reports whether err is a pod that proved another
// identity than the one wanted.
func isIdentityMismatch(err error) bool {
	var m *mtls.IdentityMismatchError
	return errors.As(err, &m)
}

// isMeshDenial reports whether err is an AuthorizationPolicy's denial.
func isMeshDenial(err error) bool {
	var d meshDenial
	return errors.As(err, &d)
}

// meshSummary says, for the summary line, whom the warm-up dialled with
// Istio mTLS and as whom: "over Istio mTLS as <danki> to <pods' IDs>"
// ("" when no target was).
func meshSummary(self string, targets []TargetResult) string {
	var peers []string
	n := 0
	for _, t := range targets {
		if t.Target.Peer != "" {
			n++
			if !slices.Contains(peers, t.Target.Peer) {
				peers = append(peers, t.Target.Peer)
			}
		}
	}
	if n == 0 {
		return ""
	}
	slices.Sort(peers)
	of := ""
	if n < len(targets) {
		of = fmt.Sprintf(" (%d of %d pods)", n, len(targets))
	}
	return fmt.Sprintf("over Istio mTLS%s as %s to %s", of, self, strings.Join(peers, ", "))
}
