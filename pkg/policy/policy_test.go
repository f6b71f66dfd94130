package policy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestZeroPolicyRefusesFilesAndEveryPrometheus(t *testing.T) {
	var p Policy
	if err := p.CheckFile("prometheus.bearerTokenFile", "/var/run/secrets/kubernetes.io/serviceaccount/token", "use bearerTokenSecret"); err == nil || !strings.Contains(err.Error(), "prometheus.bearerTokenFile") {
		t.Errorf("CheckFile = %v, want a refusal naming the field", err)
	}
	if err := Local().CheckFile("grpcDescriptorSet", "/tmp/x.pb", ""); err != nil {
		t.Errorf("the command line may read files: %v", err)
	}
	if _, err := p.PrometheusFor("http://evil.example:9090"); err == nil || !strings.Contains(err.Error(), "none is") {
		t.Errorf("PrometheusFor = %v, want none allowed", err)
	}
}

func TestPrometheusForMatchesTheOperatorsEntryOnly(t *testing.T) {
	prom, err := ParsePrometheus("http://prometheus.istio-system:9090/,bearerTokenFile=/t,caFile=/c")
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{Prometheus: []Prometheus{prom}}
	got, err := p.PrometheusFor("http://prometheus.istio-system:9090")
	if err != nil || got.BearerTokenFile != "/t" || got.CAFile != "/c" {
		t.Errorf("PrometheusFor = %+v, %v", got, err)
	}
	for _, addr := range []string{"http://prometheus.istio-system:9091", "https://prometheus.istio-system:9090", "http://prometheus.istio-system:9090.evil.example"} {
		if _, err := p.PrometheusFor(addr); err == nil || !strings.Contains(err.Error(), "http://prometheus.istio-system:9090") {
			t.Errorf("PrometheusFor(%s) = %v, want a refusal listing the allowed one", addr, err)
		}
	}
	for _, bad := range []string{"prometheus:9090", "http://p:9090,token=/x", "ftp://p"} {
		if _, err := ParsePrometheus(bad); err == nil {
			t.Errorf("ParsePrometheus(%q) accepted", bad)
		}
	}
}

func TestNetworkRefusesLoopbackLinkLocalAndTheAPIServer(t *testing.T) {
	var n Network
	if err := n.DenyHost(context.Background(), "10.96.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "::ffff:127.0.0.1", "10.96.0.1", "224.0.0.1"} {
		if err := n.CheckAddr(netip.MustParseAddr(ip)); err == nil {
			t.Errorf("CheckAddr(%s) allowed", ip)
		}
	}
	if err := n.CheckAddr(netip.MustParseAddr("10.244.0.7")); err != nil {
		t.Errorf("a pod IP: %v", err)
	}
	n.AllowLoopback = true
	if err := n.CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("AllowLoopback: %v", err)
	}
	if err := n.CheckAddr(netip.MustParseAddr("169.254.169.254")); err == nil {
		t.Error("AllowLoopback must not allow link-local")
	}
	if err := (Network{AnyTarget: true}).CheckAddr(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("AnyTarget: %v", err)
	}
}

func TestCheckURLNeedsTheOperatorsAllowList(t *testing.T) {
	var n Network
	if err := n.CheckURL("urls[0]", "http://10.0.0.5:8080"); err == nil || !strings.Contains(err.Error(), "urls[0]") || !strings.Contains(err.Error(), "--allow-target") {
		t.Errorf("no allow-list: %v", err)
	}
	for _, s := range []string{"10.0.0.0/8", "app.example"} {
		if err := n.ParseTarget(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, ok := range []string{"http://10.0.0.5:8080", "http://APP.example:80"} {
		if err := n.CheckURL("urls[0]", ok); err != nil {
			t.Errorf("CheckURL(%s): %v", ok, err)
		}
	}
	for _, bad := range []string{"http://192.168.1.1:80", "http://169.254.169.254", "http://other.example", "http://127.0.0.1:80"} {
		if err := n.CheckURL("urls[0]", bad); err == nil {
			t.Errorf("CheckURL(%s) allowed", bad)
		}
	}
}

// TestDialerRefusesAtConnectTime proves the check runs on the address
// actually dialled, not on the URL's text: a name that resolves to
// loopback is refused.
func TestDialerRefusesAtConnectTime(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := Network{AllowHosts: []string{"localhost"}}
	if c, err := n.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port)); err == nil {
		c.Close()
		t.Fatal("dialled localhost: want the loopback refusal")
	} else if !strings.Contains(err.Error(), "loopback") {
		t.Errorf("err = %v, want it to say loopback", err)
	}
	n.AllowLoopback = true
	c, err := n.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("AllowLoopback: %v", err)
	}
	c.Close()
}

func TestOverNamesTheCap(t *testing.T) {
	if s := Over(1e9, DefaultLimits.QPS, "--max-qps"); !strings.Contains(s, "--max-qps") || !strings.Contains(s, "500") {
		t.Errorf("Over = %q", s)
	}
	if s := Over(20, DefaultLimits.QPS, "--max-qps"); s != "" {
		t.Errorf("Over(20) = %q, want empty", s)
	}
	if l := (Limits{QPS: 5}).WithDefaults(); l.QPS != 5 || l.Connections != DefaultLimits.Connections {
		t.Errorf("WithDefaults = %+v", l)
	}
}

// A guard (a run's own pods) is asked after the network check, also where
// any address is allowed (the command line with a pod guard).
func TestGuardedDialerAsksTheGuardAfterTheCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	refuse := func(netip.Addr) error { return errGone }
	for _, n := range []Network{{AllowLoopback: true}, {AnyTarget: true}} {
		if c, err := n.GuardedDialer(nil, refuse).DialContext(ctx, "tcp", l.Addr().String()); err == nil {
			c.Close()
			t.Errorf("%+v: dialled past the guard", n)
		}
		c, err := n.GuardedDialer(nil, nil).DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			t.Errorf("%+v without a guard: %v", n, err)
			continue
		}
		c.Close()
	}
	if c, err := (Network{}).GuardedDialer(nil, func(netip.Addr) error { return nil }).DialContext(ctx, "tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Error("a guard that allows must not lift the loopback refusal")
	}
}

var errGone = errors.New("not the run's pod any more")

func TestReadFileRefusesWhatIsNoRegularFileOrTooLarge(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(small, 10); err != nil || string(data) != "0123456789" {
		t.Errorf("ReadFile(10 bytes, limit 10) = %q, %v", data, err)
	}
	for path, want := range map[string]string{"/dev/zero": "not a regular file", dir: "not a regular file", small: "larger than 5 bytes"} {
		if _, err := ReadFile(path, 5); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadFile(%s, 5) = %v, want %q", path, err, want)
		}
	}
	if _, err := ReadAtMost(strings.NewReader("0123456789"), 9); err == nil || !strings.Contains(err.Error(), "--max-file-bytes") {
		t.Errorf("ReadAtMost over the limit: %v", err)
	}
}
