package mtls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	k8stesting "k8s.io/client-go/testing"
)

func TestMintsACertificateForItsOwnServiceAccount(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(2 * time.Hour)

	if id.ID() != dankiID || id.TrustDomain() != DefaultTrustDomain {
		t.Errorf("ID %s, trust domain %s; want %s", id.ID(), id.TrustDomain(), dankiID)
	}
	cert := id.Certificate()
	if len(cert.Certificate) != 2 || !slices.Equal(cert.Certificate[1], m.Root.Raw) {
		t.Errorf("chain has %d certificates; want [leaf, root]", len(cert.Certificate))
	}
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Errorf("key %T; want ECDSA P-256", cert.PrivateKey)
	}
	if got := cert.Leaf.NotAfter.Sub(m.Clock.Now()); got != 2*time.Hour {
		t.Errorf("valid for %s; want the 2h asked for", got)
	}
	if !slices.Equal(m.Validities(), []int64{7200}) {
		t.Errorf("ValidityDuration sent %v; want [7200]", m.Validities())
	}

	// One TokenRequest, for danki's own ServiceAccount, audience istio-ca.
	var asked []string
	for _, a := range m.Client.Actions() {
		if c, ok := a.(k8stesting.CreateActionImpl); ok && a.GetSubresource() == "token" {
			tr := c.Object.(*authenticationv1.TokenRequest)
			asked = append(asked, a.GetNamespace()+"/"+c.Name+" "+strings.Join(tr.Spec.Audiences, ","))
		}
	}
	if want := []string{"danki-system/danki istio-ca"}; !slices.Equal(asked, want) {
		t.Errorf("TokenRequests %q; want %q", asked, want)
	}
}

func TestTheIdentityIsTheTokensNotTheCSRs(t *testing.T) {
	m := newTestMesh(t)
	// The CSR asks for danki; the token is another ServiceAccount's.
	token := ServiceAccountToken{Client: m.Client, Namespace: "shop", Name: "cart"}
	id, err := NewIdentity(context.Background(), Config{Namespace: dankiNS, ServiceAccount: dankiSA, CA: m.ca(token), Clock: m.Clock})
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	if want := SPIFFEID("", "shop", "cart"); id.ID() != want {
		t.Errorf("ID %s; want the token's %s", id.ID(), want)
	}
}

func TestRenewsBeforeExpiryAndTheNextHandshakeUsesTheNewCertificate(t *testing.T) {
	m := newTestMesh(t)
	pod := m.StrictPod(SPIFFEID("", "shop", "cart"), nil)
	id := m.identity(time.Hour)
	// One client for the whole test: a renewal needs no new config.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   id.ClientConfig(SPIFFEID("", "shop", "cart"), HTTP1),
		DisableKeepAlives: true, // each request is a new handshake
	}}
	serial := func() string {
		t.Helper()
		resp, err := client.Get("https://" + pod.Addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header.Get("X-Client-Serial")
	}

	first := id.Certificate()
	if got := serial(); got != first.Leaf.SerialNumber.String() {
		t.Fatalf("the pod saw serial %s; want the minted %s", got, first.Leaf.SerialNumber)
	}
	eventually(t, "the renewal timer", m.Clock.HasWaiters)
	if id.Certificate() != first || len(m.signedLeaves()) != 1 {
		t.Fatal("renewed before its time")
	}

	m.Clock.Step(50 * time.Minute) // past 80 % of its 62 minutes (2 backdated)
	eventually(t, "the renewal", func() bool { return id.Certificate() != first })
	second := id.Certificate()
	if got := second.Leaf.NotAfter.Sub(m.Clock.Now()); got != time.Hour {
		t.Errorf("the renewed certificate is valid for %s; want the hour asked for", got)
	}
	if second.PrivateKey.(*ecdsa.PrivateKey).Equal(first.PrivateKey) {
		t.Error("the renewal kept the old key")
	}
	if got := serial(); got != second.Leaf.SerialNumber.String() {
		t.Errorf("after the renewal the pod saw serial %s; want the new %s", got, second.Leaf.SerialNumber)
	}
	if id.ID() != dankiID {
		t.Errorf("ID after the renewal %s", id.ID())
	}
}

// istiod backdates NotBefore by two minutes: a short-lived certificate's
// renewal is counted from when it arrived, not from NotBefore (which would
// renew a 30 s certificate at once, in a loop).
func TestAShortLivedBackdatedCertificateIsRenewedOnceItIsHalfUsed(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(30 * time.Second)
	first := id.Certificate()
	if age := m.Clock.Now().Sub(first.Leaf.NotBefore); age < time.Minute {
		t.Fatalf("the test CA's NotBefore is %s before now; want it backdated as istiod does", age)
	}
	eventually(t, "the renewal timer", m.Clock.HasWaiters)
	m.Clock.Step(14 * time.Second) // before 50 % of the 30 s
	if id.Certificate() != first || len(m.signedLeaves()) != 1 {
		t.Fatalf("renewed after 14 s of a 30 s certificate (%d signed)", len(m.signedLeaves()))
	}
	m.Clock.Step(11 * time.Second) // past 80 %
	eventually(t, "the renewal", func() bool { return id.Certificate() != first })
	if n := len(m.signedLeaves()); n != 2 {
		t.Errorf("%d certificates signed after one renewal; want 2", n)
	}
}

func TestAnExpiredCertificateFailsTheHandshakeWithTheRenewalsError(t *testing.T) {
	m := newTestMesh(t)
	id := m.identity(time.Hour)
	m.SetRefuse(true)
	eventually(t, "the renewal timer", m.Clock.HasWaiters)
	m.Clock.Step(59 * time.Minute) // the renewal fails; the certificate is still good
	eventually(t, "a failed renewal", func() bool { return m.Clock.HasWaiters() && id.lastError() != nil })
	if _, err := id.GetClientCertificate(nil); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	m.Clock.Step(2 * time.Minute)
	_, err := id.GetClientCertificate(nil)
	if err == nil || !strings.Contains(err.Error(), "expired") || status.Code(err) != codes.Unauthenticated {
		t.Fatalf("after expiry: %v; want expired, with the CA's refusal", err)
	}

	m.SetRefuse(false) // the CA is back: the retries recover
	eventually(t, "the retry timer", m.Clock.HasWaiters)
	m.Clock.Step(maxRetry)
	eventually(t, "a good certificate", func() bool { _, err := id.GetClientCertificate(nil); return err == nil })
}

func TestTheCARefusesAWrongAudienceAndTheErrorSaysWhy(t *testing.T) {
	m := newTestMesh(t)
	token := m.token()
	token.Audience = "kubernetes.default.svc"
	_, err := NewIdentity(context.Background(), Config{Namespace: dankiNS, ServiceAccount: dankiSA, CA: m.ca(token), Clock: m.Clock})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v; want Unauthenticated", err)
	}
	for _, want := range []string{`audience "istio-ca"`, `audience "kubernetes.default.svc"`, "danki-system/danki", "serviceaccounts/token", m.CAAddress} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestAForbiddenTokenRequestNamesTheRBACItNeeds(t *testing.T) {
	m := newTestMesh(t)
	m.SetDenyTokens(true)
	_, err := NewIdentity(context.Background(), Config{CA: m.ca(m.token()), Clock: m.Clock})
	if err == nil || !strings.Contains(err.Error(), "create on serviceaccounts/token") || !strings.Contains(err.Error(), "danki-system/danki") {
		t.Fatalf("got %v", err)
	}
}

func TestACAUnderAnotherRootIsRefused(t *testing.T) {
	m := newTestMesh(t)
	other := newTestMesh(t)
	ca := m.ca(m.token())
	ca.Roots = other.Roots // the operator gave another mesh's root
	_, err := NewIdentity(context.Background(), Config{CA: ca, Clock: m.Clock})
	if err == nil || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "mesh root verify its serving certificate") {
		t.Fatalf("got %v", err)
	}
}

func (m *testMesh) signedLeaves() []string {
	var s []string
	for _, c := range m.Signed() {
		s = append(s, c.SerialNumber.String())
	}
	return s
}

func (id *Identity) lastError() error {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.lastErr
}

// TestHandshakesDuringRenewals: clients keep handshaking while the
// certificate is renewed three times, and none fails. The fake clock jumps
// 50 minutes at once; real time does not jump in the middle of a handshake,
// so a jump waits for the handshakes in flight (jump), or a handshake begun
// with a certificate two renewals old could be judged after the jump.
func TestHandshakesDuringRenewals(t *testing.T) {
	m := newTestMesh(t)
	var jump sync.RWMutex
	pod := m.StrictPod(cartID, nil)
	id := m.identity(time.Hour)
	tr := &http.Transport{TLSClientConfig: id.ClientConfig(cartID, HTTP1), DisableKeepAlives: true}

	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				jump.RLock()
				_, err := get(t, tr, "https://"+pod.Addr+"/")
				jump.RUnlock()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 3 {
		before := id.Certificate()
		eventually(t, "the renewal timer", m.Clock.HasWaiters)
		jump.Lock()
		m.Clock.Step(50 * time.Minute)
		jump.Unlock()
		eventually(t, "the renewal", func() bool { return id.Certificate() != before })
	}
	close(stop)
	wg.Wait()
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := len(m.signedLeaves()); n != 4 {
		t.Errorf("the CA signed %d certificates; want 4 (the mint and 3 renewals)", n)
	}
}
