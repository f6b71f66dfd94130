package gate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/danki-dev/danki/internal/testutil"
)

// verifies reports whether bundle (PEM) verifies leaf for host at now.
func verifies(t *testing.T, bundle []byte, leaf *x509.Certificate, host string, now time.Time) bool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("bundle holds no certificate")
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, CurrentTime: now})
	return err == nil
}

func TestCertsRenewAtTwoThirds(t *testing.T) {
	now := time.Now()
	c, err := NewCerts([]string{"gate.svc", "127.0.0.1"}, 3*time.Hour, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
	if got, want := c.RenewAt(), c.Leaf.NotBefore.Add(life*2/3); got.Sub(want).Abs() > time.Second {
		t.Fatalf("RenewAt %s, want two thirds into the life %s–%s", got, c.Leaf.NotBefore, c.Leaf.NotAfter)
	}
	if !c.SelfManaged() || !c.Covers([]string{"gate.svc", "127.0.0.1"}) || c.Covers([]string{"other.svc"}) {
		t.Fatalf("self-managed %v, covers its hosts %v", c.SelfManaged(), c.Covers([]string{"gate.svc", "127.0.0.1"}))
	}
	if !verifies(t, c.CABundle, c.Leaf, "gate.svc", now) {
		t.Fatal("the bundle does not verify the serving certificate")
	}
}

func TestEnsureCerts(t *testing.T) {
	hosts := []string{"danki-gate.danki-gate.svc"}
	start := time.Now()

	t.Run("an empty directory gets a self-managed certificate", func(t *testing.T) {
		dir := t.TempDir()
		c, wrote, err := EnsureCerts(dir, hosts, time.Hour, start)
		if err != nil || !wrote || !c.SelfManaged() {
			t.Fatalf("EnsureCerts: wrote %v, err %v", wrote, err)
		}
		again, wrote, err := EnsureCerts(dir, append(hosts, ""), time.Hour, start.Add(time.Minute))
		if err != nil || wrote || !bytes.Equal(again.CertPEM, c.CertPEM) {
			t.Fatalf("a fresh certificate was replaced (wrote %v, err %v)", wrote, err)
		}
	})

	t.Run("a persisted certificate near expiry is renewed at start, its CA kept in the bundle", func(t *testing.T) {
		dir := t.TempDir()
		old, _, err := EnsureCerts(dir, hosts, 3*time.Hour, start)
		if err != nil {
			t.Fatal(err)
		}
		later := start.Add(2*time.Hour + 30*time.Minute) // past two thirds, before expiry
		c, wrote, err := EnsureCerts(dir, hosts, 3*time.Hour, later)
		if err != nil || !wrote {
			t.Fatalf("not renewed at %s (renew at %s): wrote %v, err %v", later, old.RenewAt(), wrote, err)
		}
		onDisk, err := ReadCerts(dir)
		if err != nil {
			t.Fatal(err)
		}
		if onDisk.Leaf.SerialNumber.Cmp(old.Leaf.SerialNumber) == 0 || !bytes.Equal(onDisk.CABundle, c.CABundle) {
			t.Fatal("the directory still holds the old certificate")
		}
		if !onDisk.Leaf.NotAfter.After(old.Leaf.NotAfter) {
			t.Fatalf("renewed certificate expires %s, no later than the old one (%s)", onDisk.Leaf.NotAfter, old.Leaf.NotAfter)
		}
		// Both the old certificate (still served until the webhook server
		// reloads) and the new one verify against the new bundle.
		if !verifies(t, c.CABundle, old.Leaf, hosts[0], later) || !verifies(t, c.CABundle, c.Leaf, hosts[0], later) {
			t.Fatal("the new bundle does not verify both the old and the new certificate")
		}
		// At the next renewal the first CA has expired: dropped.
		third, _, err := EnsureCerts(dir, hosts, 3*time.Hour, later.Add(2*time.Hour+30*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(third.CABundle, []byte("BEGIN CERTIFICATE")); n != 2 {
			t.Fatalf("bundle after two renewals holds %d CAs, want 2 (the expired first dropped)", n)
		}
	})

	t.Run("a certificate for other hosts is renewed", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, err := EnsureCerts(dir, []string{"old.svc"}, time.Hour, start); err != nil {
			t.Fatal(err)
		}
		c, wrote, err := EnsureCerts(dir, hosts, time.Hour, start)
		if err != nil || !wrote || !c.Covers(hosts) {
			t.Fatalf("wrote %v, err %v", wrote, err)
		}
	})

	t.Run("a certificate from elsewhere is left alone, even near expiry", func(t *testing.T) {
		dir := t.TempDir()
		foreign := foreignCerts(t, dir, time.Hour)
		c, wrote, err := EnsureCerts(dir, hosts, time.Hour, start.Add(55*time.Minute))
		if err != nil || wrote || c.SelfManaged() || !bytes.Equal(c.CertPEM, foreign) {
			t.Fatalf("cert-manager's certificate touched: wrote %v, self-managed %v, err %v", wrote, c.SelfManaged(), err)
		}
	})
}

// foreignCerts writes a certificate issued by another CA (as cert-manager's
// Secret would hold) to dir and returns it.
func foreignCerts(t *testing.T, dir string, validity time.Duration) []byte {
	t.Helper()
	c, err := issue("cert-manager CA", []string{"danki-gate.danki-gate.svc"}, validity, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(dir); err != nil {
		t.Fatal(err)
	}
	return c.CertPEM
}

func TestMergeCABundle(t *testing.T) {
	now := time.Now()
	mk := func(validity time.Duration, at time.Time) []byte {
		c, err := NewCerts([]string{"h"}, validity, at, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.CABundle
	}
	ours, theirs, expired := mk(time.Hour, now), mk(time.Hour, now), mk(time.Minute, now.Add(-time.Hour))
	got, err := MergeCABundle(append(append(append([]byte{}, theirs...), expired...), ours...), ours, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, ours...), theirs...); !bytes.Equal(got, want) {
		t.Fatalf("merged bundle:\n%s\nwant ours then theirs, the expired and the duplicate dropped:\n%s", got, want)
	}
	// A stale bundle (another CA only, or garbage) gets ours.
	if got, _ := MergeCABundle([]byte("not PEM"), ours, now); !bytes.Equal(got, ours) {
		t.Fatalf("merging into garbage: %q", got)
	}
	// Bounded: many replicas' CAs leave at most maxBundle.
	var many []byte
	for i := 0; i < maxBundle+3; i++ {
		many = append(many, mk(time.Hour, now.Add(-time.Duration(i)*time.Minute))...)
	}
	got, _ = MergeCABundle(many, ours, now)
	if n := bytes.Count(got, []byte("BEGIN CERTIFICATE")); n != maxBundle || !bytes.HasPrefix(got, ours) {
		t.Fatalf("%d CAs kept (ours first: %v), want %d", n, bytes.HasPrefix(got, ours), maxBundle)
	}
}

// TestCertRotator renews a certificate valid for a few seconds: the
// caBundle is patched (new CA and old) before the new certificate is
// written, and controller-runtime's webhook server, watching the directory,
// serves the new certificate without a restart.
func TestCertRotator(t *testing.T) {
	dir := t.TempDir()
	hosts := []string{"127.0.0.1"}
	const validity = 6 * time.Second
	first, _, err := EnsureCerts(dir, hosts, validity, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l := testutil.ListenLoopback(t)
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { _ = srv.Start(ctx) })

	var mu sync.Mutex
	var patched [][]byte
	var onDiskAtPatch []*x509.Certificate
	renewed := make(chan *Certs, 4)
	rot := &certRotator{dir: dir, hosts: hosts, validity: validity, resync: time.Hour,
		log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		patch: func(_ context.Context, bundle []byte) (bool, error) {
			cur, err := ReadCerts(dir)
			if err != nil {
				return false, err
			}
			mu.Lock()
			defer mu.Unlock()
			patched = append(patched, bytes.Clone(bundle))
			onDiskAtPatch = append(onDiskAtPatch, cur.Leaf)
			return true, nil
		},
		renewed: func(c *Certs) { renewed <- c },
	}
	wg.Go(func() { _ = rot.Start(ctx) })

	var next *Certs
	select {
	case next = <-renewed:
	case <-time.After(time.Minute):
		t.Fatalf("not renewed within a minute of %s (renew at %s)", time.Now(), first.RenewAt())
	}
	mu.Lock()
	var leafThen *x509.Certificate
	for i, b := range patched { // the first patch with the new bundle
		if bytes.Equal(b, next.CABundle) {
			leafThen = onDiskAtPatch[i]
			break
		}
	}
	mu.Unlock()
	if leafThen == nil {
		t.Fatal("the webhook configuration was not given the new bundle")
	}
	if leafThen.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Fatal("the new certificate was on disk before the caBundle trusting it was patched")
	}
	if !verifies(t, next.CABundle, first.Leaf, hosts[0], time.Now()) {
		t.Fatal("the patched bundle no longer trusts the certificate still being served")
	}
	// The webhook server reloads it: a TLS client trusting only the new
	// bundle's first CA (the new one) gets through once it has.
	pool := x509.NewCertPool()
	newCA, _ := parseCerts(next.CABundle)
	pool.AddCert(newCA[0])
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err == nil {
			served := conn.ConnectionState().PeerCertificates[0]
			_ = conn.Close()
			if served.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
				t.Fatal("verified the old certificate against the new CA alone")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook server still serves the old certificate a minute after the renewal: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}
