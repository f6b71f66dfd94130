package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parsePolicyFlags(t *testing.T, args ...string) (*policyFlags, error) {
	t.Helper()
	var f policyFlags
	fs := pflag.NewFlagSet("plugin", pflag.ContinueOnError)
	f.addFlags(fs)
	return &f, fs.Parse(args)
}

// The plugin's args become the operator's policy; a bad value names its
// flag, and the API server's address is never a load target.
func TestPolicyFlags(t *testing.T) {
	f, err := parsePolicyFlags(t, "--prometheus", "https://prom.monitoring:9091,bearerTokenFile=/etc/danki/token",
		"--allow-target", "10.0.0.0/8", "--allow-target", "app.shop", "--deny-cidr", "10.96.0.0/12",
		"--allow-virtualservice-namespace", "gateways", "--max-qps", "1000")
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.policy(context.Background(), "https://10.1.2.3:6443")
	if err != nil {
		t.Fatal(err)
	}
	if prom, err := p.PrometheusFor("https://prom.monitoring:9091"); err != nil || prom.BearerTokenFile != "/etc/danki/token" {
		t.Errorf("PrometheusFor = %+v, %v", prom, err)
	}
	if p.Limits.QPS != 1000 || len(p.VirtualServiceNamespaces) != 1 || !p.Tenant() {
		t.Errorf("policy %+v", p)
	}
	if err := p.Network.CheckURL("urls[0]", "http://app.shop:8080"); err != nil {
		t.Errorf("allowed host: %v", err)
	}
	for _, ip := range []string{"10.1.2.3", "10.96.0.1"} {
		if err := p.Network.CheckAddr(netip.MustParseAddr(ip)); err == nil {
			t.Errorf("CheckAddr(%s) allowed: want the API server's and --deny-cidr's refused", ip)
		}
	}
	for _, bad := range [][]string{
		{"--prometheus", "prom:9090"},
		{"--allow-target", "not a host"},
		{"--deny-cidr", "app.shop"},
	} {
		f, err := parsePolicyFlags(t, bad...)
		if err == nil {
			_, err = f.policy(context.Background(), "")
		}
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
}
