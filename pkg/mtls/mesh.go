package mtls

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// MeshConfig is the operator's mesh settings (plugin args, gate flags,
// command-line flags): where istiod's CA is, which root to trust, and
// danki's own ServiceAccount. Tenants choose only a Mode per config.
type MeshConfig struct {
	// Mode is the default for configs that set no mtls; empty is Auto.
	Mode Mode
	// CA's address, serving name and cluster ID; empty fields are the
	// Default* constants.
	CAAddress    string
	CAServerName string
	ClusterID    string
	// RootFile, if set, is a PEM file with the mesh root (an external CA
	// such as istio-csr); otherwise the root is read from the
	// istio-ca-root-cert ConfigMap of Namespace.
	RootFile string
	// Namespace and ServiceAccount are danki's own: the token it asks for,
	// so the identity its load carries.
	Namespace      string
	ServiceAccount string
	// Validity is the certificate lifetime asked for; zero is DefaultValidity.
	Validity time.Duration
	// Client asks the API server for tokens and the root ConfigMap.
	Client kubernetes.Interface
	// Clock; nil is the real clock.
	Clock clock.Clock
}

// RetryAfter is how long a Mesh gives back the same error after a failed
// mint before asking the CA again: a warm-up of many pods that all need
// mTLS asks once, not once per pod, and a CA that comes up is used soon.
const RetryAfter = 10 * time.Second

// MintTimeout bounds one mint of danki's identity (the token, the root,
// the CA's signature). The mint runs under a context of its own, not the
// caller's: one process serves every tenant's warm-ups, and a tenant run
// cancelled mid-mint must not leave its "context canceled" as everyone's
// answer.
const MintTimeout = 30 * time.Second

// Mesh is danki's place in the mesh for one process: its settings and its
// Identity, minted on the first connection that needs mTLS (a cluster
// without Istio never asks istiod anything) and then shared and renewed
// by every load path until Close. A nil *Mesh dials everything in
// plaintext (mode off), for library callers with no mesh.
type Mesh struct {
	cfg   MeshConfig
	clock clock.Clock

	mu      sync.Mutex
	id      *Identity
	err     error     // of the last failed mint
	errTime time.Time // when it failed
	// minting is closed when the mint under way ends (nil: none is);
	// stopMint cancels it. closes counts Close calls: a mint that ends
	// after one is dropped.
	minting  chan struct{}
	stopMint context.CancelFunc
	closes   int
}

// NewMesh keeps the settings; nothing is asked of the CA before the first
// Identity call.
func NewMesh(c MeshConfig) *Mesh {
	m := &Mesh{cfg: c, clock: c.Clock}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if m.cfg.Mode == "" {
		m.cfg.Mode = Auto
	}
	return m
}

// Mode is the mode of a config that sets none: the operator's default.
func (m *Mesh) Mode() Mode {
	if m == nil {
		return Off
	}
	return m.cfg.Mode
}

// Resolve is the mode a config runs with: its own (a tenant's mtls
// setting) when set, else the operator's default.
func (m *Mesh) Resolve(own Mode) Mode {
	if m == nil {
		return Off
	}
	if own != "" {
		return own
	}
	return m.cfg.Mode
}

// Identity returns danki's identity, minting it on the first call. After a
// failed mint, calls within RetryAfter return the same error at once.
//
// The mint runs in the background under its own MintTimeout, started by
// the first caller and shared by every caller meanwhile; each waits only
// as long as its own ctx allows. A caller whose ctx ends gets its ctx's
// error, which is never kept: the mint goes on for the others.
func (m *Mesh) Identity(ctx context.Context) (*Identity, error) {
	if m == nil {
		return nil, errors.New("mtls: danki has no mesh settings here (mode off)")
	}
	m.mu.Lock()
	if m.id != nil {
		defer m.mu.Unlock()
		return m.id, nil
	}
	if m.minting == nil {
		if m.err != nil && m.clock.Since(m.errTime) < RetryAfter {
			defer m.mu.Unlock()
			return nil, m.err
		}
		m.startMint()
	}
	done := m.minting
	m.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("mtls: waiting for danki's mesh certificate (still being minted for later callers): %w", ctx.Err())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.id != nil:
		return m.id, nil
	case m.err != nil:
		return nil, m.err
	}
	return nil, errors.New("mtls: the mesh was closed while danki's certificate was minted")
}

// startMint mints in the background; m.mu is held. The mint's result is
// kept when it ends: the identity, or its error for RetryAfter — unless
// Close came first.
func (m *Mesh) startMint() {
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), MintTimeout)
	m.minting, m.stopMint = done, cancel
	gen := m.closes
	go func() {
		defer close(done)
		defer cancel()
		id, err := m.mint(ctx)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("mtls: minting danki's mesh certificate took over %s: %w", MintTimeout, err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.minting, m.stopMint = nil, nil
		switch {
		case m.closes != gen: // closed meanwhile: nothing is kept
			if id != nil {
				id.Close()
			}
		case err != nil:
			m.err, m.errTime = err, m.clock.Now()
		default:
			m.id, m.err = id, nil
		}
	}()
}

func (m *Mesh) mint(ctx context.Context) (*Identity, error) {
	c := m.cfg
	if c.Namespace == "" || c.ServiceAccount == "" {
		return nil, errors.New("mtls: danki's own namespace and ServiceAccount are unknown (the operator's --mesh-namespace and --mesh-service-account: the namespace defaults to $POD_NAMESPACE or the pod's own, the ServiceAccount to danki): they name the identity danki asks istiod for")
	}
	if c.Client == nil {
		return nil, errors.New("mtls: no Kubernetes client to ask for danki's token")
	}
	roots, err := m.roots(ctx)
	if err != nil {
		return nil, err
	}
	return NewIdentity(ctx, Config{
		Namespace:      c.Namespace,
		ServiceAccount: c.ServiceAccount,
		CA: CA{
			Address:    c.CAAddress,
			ServerName: c.CAServerName,
			ClusterID:  c.ClusterID,
			Roots:      roots,
			Token:      ServiceAccountToken{Client: c.Client, Namespace: c.Namespace, Name: c.ServiceAccount},
		},
		Validity: c.Validity,
		Clock:    m.clock,
	})
}

func (m *Mesh) roots(ctx context.Context) (*x509.CertPool, error) {
	if m.cfg.RootFile == "" {
		return RootsFromConfigMap(ctx, m.cfg.Client, m.cfg.Namespace)
	}
	data, err := os.ReadFile(m.cfg.RootFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: mesh root: %w", err)
	}
	pool, err := RootsFromPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.cfg.RootFile, err)
	}
	return pool, nil
}

// PeerID says how to dial pod under mode: "" for plaintext, else the SPIFFE
// ID the pod's sidecar must prove (its ServiceAccount's, in the trust
// domain of danki's own certificate — minted here if need be).
func (m *Mesh) PeerID(ctx context.Context, mode Mode, pod *corev1.Pod) (string, error) {
	if m == nil || !mode.ForPod(pod) {
		return "", nil
	}
	id, err := m.Identity(ctx)
	if err != nil {
		return "", err
	}
	return PodSPIFFEID(id.TrustDomain(), pod), nil
}

// Dial dials addr with dial (the caller's checked dialer) and, when want
// is not empty, completes the mTLS handshake with the pod that must prove
// want. With want empty it is dial, its errors explained as a STRICT
// sidecar's reset would be.
func (m *Mesh) Dial(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), network, addr, want string, p Protocol) (net.Conn, error) {
	raw, err := dial(ctx, network, addr)
	if err != nil || want == "" {
		return raw, err
	}
	id, err := m.Identity(ctx)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return id.Handshake(ctx, raw, addr, want, p)
}

// Self is danki's SPIFFE ID once minted, "" before (for messages).
func (m *Mesh) Self() string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.id == nil {
		return ""
	}
	return m.id.ID()
}

// Close stops the renewals of the identity, if one was minted, and waits
// for a mint under way to end (it is cancelled).
func (m *Mesh) Close() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.closes++
	if m.id != nil {
		m.id.Close()
		m.id = nil
	}
	done := m.minting
	if m.stopMint != nil {
		m.stopMint()
	}
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}
