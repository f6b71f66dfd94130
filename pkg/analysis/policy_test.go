package analysis

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/policy"
)

// A library caller that passes no policy gets the strictest: no Prometheus
// at all, whichever constructor it uses.
func TestZeroPolicyAllowsNoPrometheus(t *testing.T) {
	cfg := istioConfig("http://prometheus.istio-system:9090")
	for name, build := range map[string]func() error{
		"NewAnalyzer":   func() error { _, err := NewAnalyzer(cfg); return err },
		"NewPrometheus": func() error { _, err := NewPrometheus(cfg, nil); return err },
		"NewStableTail": func() error { _, err := NewStableTail(cfg, time.Minute, nil); return err },
	} {
		if err := build(); err == nil || !strings.Contains(err.Error(), "prometheus.address") || !strings.Contains(err.Error(), "none is") {
			t.Errorf("%s without a policy: %v, want a refusal naming prometheus.address", name, err)
		}
	}
	if _, err := NewFortio(Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: "/etc/passwd"}}); err == nil || !strings.Contains(err.Error(), "fortio.canary") {
		t.Errorf("NewFortio without a policy read a path: %v", err)
	}
}

// The operator's credentials go to the operator's address only: a
// redirect from there is not followed.
func TestTenantPrometheusFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("operator-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := policy.Policy{Prometheus: []policy.Prometheus{{Address: redirecting.URL, BearerTokenFile: token}}}
	a, err := NewAnalyzer(istioConfig(redirecting.URL), WithPolicy(pol), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if v := a.Analyze(context.Background(), time.Time{}); v.Phase != Error {
		t.Fatalf("phase %s, want Error: %s", v.Phase, v.Summary)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times, with the operator's token", n)
	}
}

// Without a namespace in the context a Secret is not read from anywhere.
func TestBearerTokenSecretNeedsTheMeasurementsNamespace(t *testing.T) {
	fake := testutil.NewPrometheus(t)
	healthyIstio(fake, rand.New(rand.NewPCG(1, 2)), typical)
	cfg := istioConfig(fake.URL)
	cfg.Prometheus.BearerTokenSecret = &SecretKeyRef{Name: "prom", Key: "token"}
	a, err := NewAnalyzer(cfg, WithPolicy(policy.Policy{Prometheus: []policy.Prometheus{{Address: fake.URL}}}), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	v := a.Analyze(context.Background(), time.Time{})
	if v.Phase != Error || !strings.Contains(v.Summary, "prometheus.bearerTokenSecret: no namespace") {
		t.Fatalf("phase %s %q, want an Error: no namespace to read the Secret from", v.Phase, v.Summary)
	}
	if n := len(fake.Queries()); n != 0 {
		t.Fatalf("%d queries sent without the token", n)
	}
	// Both are checked at parse time, too.
	cfg.Prometheus.BearerToken = "inline"
	cfg.Prometheus.BearerTokenSecret = &SecretKeyRef{}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "prometheus.bearerTokenSecret: set together with") ||
		!strings.Contains(err.Error(), "prometheus.bearerTokenSecret.name: missing") || !strings.Contains(err.Error(), "prometheus.bearerTokenSecret.key: missing") {
		t.Fatalf("Validate = %v", err)
	}
}

// A fortio result is read up to the operator's cap, from a file or a URL,
// in every mode.
func TestFortioResultSizeCapped(t *testing.T) {
	big := []byte(`{"RunType":"HTTP","pad":"` + strings.Repeat("x", 200) + `"}`)
	file := filepath.Join(t.TempDir(), "canary.json")
	if err := os.WriteFile(file, big, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(big) }))
	t.Cleanup(srv.Close)
	local := policy.Local()
	local.Limits.FileBytes = 100
	for _, loc := range []string{file, srv.URL + "/canary.json"} {
		a, err := NewAnalyzer(Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: loc}, SLO: SLO{P99: dur("1s")}}, WithPolicy(local), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		if v := a.Analyze(context.Background(), time.Time{}); v.Phase != Error || !strings.Contains(v.Summary, "larger than 100 bytes") || !strings.Contains(v.Summary, "--max-file-bytes") {
			t.Errorf("%s: phase %s %q, want an Error naming the cap", loc, v.Phase, v.Summary)
		}
	}
}

// A tenant's fortio URL may not redirect outside the allowed targets, nor
// to what is never dialled.
func TestTenantFortioRedirectChecked(t *testing.T) {
	var to atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.Load().(string), http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	pol := policy.Policy{Network: policy.Network{AllowLoopback: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}
	for _, tc := range []struct{ target, want string }{
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://10.1.2.3/result.json", "outside the targets the operator allows"},
	} {
		to.Store(tc.target)
		a, err := NewAnalyzer(Config{Source: SourceFortio, Fortio: &FortioConfig{Canary: srv.URL + "/canary.json"}, SLO: SLO{P99: dur("1s")}}, WithPolicy(pol), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		if v := a.Analyze(context.Background(), time.Time{}); v.Phase != Error || !strings.Contains(v.Summary, tc.want) {
			t.Errorf("redirect to %s: phase %s %q, want an Error saying %s", tc.target, v.Phase, v.Summary, tc.want)
		}
	}
}
