package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/danki-dev/danki/pkg/policy"
)

// policyFlags are the operator's settings of the plugins (their args in
// argo-rollouts-config) and of the gate: what tenant configs may ask for.
// docs/security.md explains each.
type policyFlags struct {
	prometheus    []string
	allowTargets  []string
	denyCIDRs     []string
	allowLoopback bool
	vsNamespaces  []string
	limits        policy.Limits
}

// addFlags registers the plugins' policy flags.
func (f *policyFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.prometheus, "prometheus", nil, "a Prometheus tenant configs may query (prometheus.address), as ADDRESS[,bearerTokenFile=PATH][,caFile=PATH]: the credentials are the operator's and are sent to that address only (repeatable; none: no Prometheus)")
	fs.StringArrayVar(&f.allowTargets, "allow-target", nil, "a CIDR, IP or host name explicit URL targets (urls, stableURLs, load.urls) may name (repeatable; none: pods only)")
	fs.StringArrayVar(&f.vsNamespaces, "allow-virtualservice-namespace", nil, "a namespace besides a Rollout's own where its danki/istio config may name the VirtualService, e.g. a shared gateway namespace (repeatable; none: the Rollout's own only)")
	f.addLoadFlags(fs)
}

// addLoadFlags registers the flags that bound the load itself — where it
// may go and how much of it — the gate's share of the policy: its pods'
// annotations name no Prometheus and no URL.
func (f *policyFlags) addLoadFlags(fs *pflag.FlagSet) {
	d := policy.DefaultLimits
	fs.StringArrayVar(&f.denyCIDRs, "deny-cidr", nil, "a CIDR load is never sent to, besides loopback, link-local, multicast and the API server's addresses (repeatable)")
	fs.BoolVar(&f.allowLoopback, "allow-loopback-targets", false, "allow load to loopback addresses: only for a process run outside a cluster against pods on its own machine (a local lab)")
	fs.Float64Var(&f.limits.QPS, "max-qps", d.QPS, "cap on requests per second per target")
	fs.IntVar(&f.limits.Connections, "max-connections", d.Connections, "cap on concurrent connections per target")
	fs.Int64Var(&f.limits.Requests, "max-requests", d.Requests, "cap on requests per target (maxRequests)")
	fs.DurationVar(&f.limits.Deadline, "max-deadline", d.Deadline, "cap on a warm-up's or load test's deadline")
	fs.DurationVar(&f.limits.HealthTimeout, "max-health-timeout", d.HealthTimeout, "cap on healthTimeout")
	fs.DurationVar(&f.limits.Timeout, "max-timeout", d.Timeout, "cap on one request's timeout")
	fs.IntVar(&f.limits.Retries, "max-retries", d.Retries, "cap on the gate's attempts per pod (retries)")
	fs.Int64Var(&f.limits.FileBytes, "max-file-bytes", d.FileBytes, "cap on a file danki reads")
}

// policy builds the tenant policy; apiServer is the API server's URL, whose
// addresses load is never sent to ("" when unknown).
func (f *policyFlags) policy(ctx context.Context, apiServer string) (policy.Policy, error) {
	p := policy.Policy{Limits: f.limits, VirtualServiceNamespaces: f.vsNamespaces}
	for _, s := range f.prometheus {
		prom, err := policy.ParsePrometheus(s)
		if err != nil {
			return p, fmt.Errorf("--prometheus %w", err)
		}
		p.Prometheus = append(p.Prometheus, prom)
	}
	for _, s := range f.allowTargets {
		if err := p.Network.ParseTarget(s); err != nil {
			return p, fmt.Errorf("--allow-target %w", err)
		}
	}
	deny := policy.Network{}
	for _, s := range f.denyCIDRs {
		if err := deny.ParseTarget(s); err != nil || len(deny.AllowHosts) > 0 {
			return p, fmt.Errorf("--deny-cidr %q: want a CIDR or an IP", s)
		}
	}
	p.Network.Deny = deny.AllowCIDRs
	p.Network.AllowLoopback = f.allowLoopback
	if err := denyAPIServer(ctx, &p.Network, apiServer); err != nil {
		return p, err
	}
	return p, nil
}

// denyAPIServer adds the API server's addresses (its URL's host and, in a
// cluster, the kubernetes Service's) to the denied ones.
func denyAPIServer(ctx context.Context, n *policy.Network, apiServer string) error {
	var hosts []string
	if u, err := url.Parse(apiServer); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	if h := os.Getenv("KUBERNETES_SERVICE_HOST"); h != "" {
		hosts = append(hosts, h)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, h := range hosts {
		if err := n.DenyHost(ctx, h); err != nil {
			return fmt.Errorf("the API server's address (never a load target): %w", err)
		}
	}
	return nil
}
