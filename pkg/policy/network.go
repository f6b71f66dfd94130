package policy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
)

// Network says which addresses danki may send load to. Pod targets come
// from the API server (the rollout's own pods); explicit URLs (urls,
// stableURLs, load.urls) only within AllowCIDRs and AllowHosts; and some
// addresses are never dialled, checked on the address actually connected
// to (after DNS), not on the URL's text.
type Network struct {
	// AnyTarget allows any explicit URL and any address, loopback
	// included: the command line's setting.
	AnyTarget bool
	// AllowCIDRs are the networks explicit URL targets may name by IP and
	// resolve to.
	AllowCIDRs []netip.Prefix
	// AllowHosts are host names explicit URL targets may name.
	AllowHosts []string
	// Deny are addresses never dialled besides the built-in ones
	// (loopback, link-local — the cloud metadata endpoint —, unspecified,
	// multicast): the API server's, found at start.
	Deny []netip.Prefix
	// AllowLoopback lifts the loopback refusal, for a controller run
	// outside a cluster against pods on its own machine (a local lab).
	AllowLoopback bool
}

// alwaysDenied are never a pod of a rollout.
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"), // link-local: cloud metadata
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// CheckAddr refuses an address danki may never send load to.
func (n Network) CheckAddr(ip netip.Addr) error {
	if n.AnyTarget {
		return nil
	}
	ip = ip.Unmap()
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return fmt.Errorf("address %s: not a target", ip)
	case !n.AllowLoopback && slices.ContainsFunc(loopback, func(p netip.Prefix) bool { return p.Contains(ip) }):
		return fmt.Errorf("address %s is loopback: danki sends no load to its own machine (the Argo Rollouts controller or the gate)", ip)
	case slices.ContainsFunc(alwaysDenied, func(p netip.Prefix) bool { return p.Contains(ip) }):
		return fmt.Errorf("address %s is link-local, multicast or unspecified (a cloud metadata endpoint, not a pod): danki never sends load there", ip)
	case slices.ContainsFunc(n.Deny, func(p netip.Prefix) bool { return p.Contains(ip) }):
		return fmt.Errorf("address %s is denied by the operator (the API server's, or --deny-cidr): danki never sends load there", ip)
	}
	return nil
}

// CheckURL checks an explicit target URL's host against AllowCIDRs and
// AllowHosts. field names the setting in errors.
func (n Network) CheckURL(field, raw string) error {
	if n.AnyTarget {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := n.CheckAddr(ip); err != nil {
			return fmt.Errorf("%s: %q: %w", field, raw, err)
		}
		if slices.ContainsFunc(n.AllowCIDRs, func(p netip.Prefix) bool { return p.Contains(ip.Unmap()) }) {
			return nil
		}
	} else if slices.ContainsFunc(n.AllowHosts, func(h string) bool { return strings.EqualFold(h, host) }) {
		return nil
	}
	return fmt.Errorf("%s: %q is outside the targets the operator allows for explicit URLs (%s): leave %s out to warm the rollout's own pods, or ask the operator to allow it with --allow-target (docs/security.md)", field, raw, n.allowed(), field)
}

func (n Network) allowed() string {
	var all []string
	for _, p := range n.AllowCIDRs {
		all = append(all, p.String())
	}
	all = append(all, n.AllowHosts...)
	if len(all) == 0 {
		return "none"
	}
	return strings.Join(all, ", ")
}

// Control is a net.Dialer Control function that refuses, at connect time,
// the addresses CheckAddr refuses: a host name that resolves to one is
// refused too.
func (n Network) Control(network, address string, rc syscall.RawConn) error {
	return n.controlWith(nil)(network, address, rc)
}

// controlWith is Control, then guard (when not nil) on the same address.
func (n Network) controlWith(guard func(netip.Addr) error) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial %s: %w", address, err)
		}
		if err := n.CheckAddr(ap.Addr()); err != nil {
			return err
		}
		if guard != nil {
			return guard(ap.Addr())
		}
		return nil
	}
}

// Dialer returns d (a zero Dialer when nil) with Control set to n's check.
func (n Network) Dialer(d *net.Dialer) *net.Dialer { return n.GuardedDialer(d, nil) }

// GuardedDialer is Dialer, with guard (when not nil) asked about every
// address after n's own check: a run's own pods only (warmup.PodGuard).
func (n Network) GuardedDialer(d *net.Dialer, guard func(netip.Addr) error) *net.Dialer {
	if d == nil {
		d = &net.Dialer{}
	} else {
		c := *d
		d = &c
	}
	if !n.AnyTarget || guard != nil {
		d.Control = n.controlWith(guard)
	}
	return d
}

// DialContext is Dialer(nil).DialContext: the dial function of an
// http.Transport or a gRPC client (grpc.WithContextDialer).
func (n Network) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return n.Dialer(nil).DialContext(ctx, network, address)
}

// ParseTarget reads an --allow-target value: a CIDR, an IP, or a host name.
func (n *Network) ParseTarget(s string) error {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		n.AllowCIDRs = append(n.AllowCIDRs, p.Masked())
		return nil
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		n.AllowCIDRs = append(n.AllowCIDRs, netip.PrefixFrom(ip, ip.BitLen()))
		return nil
	}
	if s == "" || strings.ContainsAny(s, "/:@ ") {
		return fmt.Errorf("%q: want a CIDR (10.0.0.0/8), an IP or a host name", s)
	}
	n.AllowHosts = append(n.AllowHosts, s)
	return nil
}

// DenyHost adds host's addresses (an IP, or a name resolved now) to Deny:
// the API server's, at start.
func (n *Network) DenyHost(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		n.Deny = append(n.Deny, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		return nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, ip := range addrs {
		n.Deny = append(n.Deny, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return nil
}
