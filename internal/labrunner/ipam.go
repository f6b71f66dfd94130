package labrunner

import (
	"fmt"
	"net/netip"
	"sync"
)

// ipam hands out pod IPs from the node's pod CIDR. The first addresses are
// reserved: .0 (network), .1 (the host end of the veth, the pods' gateway)
// and .2 (the namespace end's own address).
type ipam struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[netip.Addr]string // address → pod key
}

const reservedAddrs = 3

func newIPAM(cidr string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if !p.Addr().Is4() || p.Bits() > 29 {
		return nil, fmt.Errorf("pod CIDR %q: need an IPv4 prefix of /29 or wider", cidr)
	}
	return &ipam{prefix: p.Masked(), used: map[netip.Addr]string{}}, nil
}

// allocate returns the address already held by key, prefer (if free and in
// range), or the lowest free address.
func (a *ipam) allocate(key string, prefer netip.Addr) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, k := range a.used {
		if k == key {
			return ip, nil
		}
	}
	if prefer.IsValid() && a.usable(prefer) {
		if _, taken := a.used[prefer]; !taken {
			a.used[prefer] = key
			return prefer, nil
		}
	}
	ip := a.prefix.Addr()
	for i := 0; i < reservedAddrs; i++ {
		ip = ip.Next()
	}
	for ; a.usable(ip); ip = ip.Next() {
		if _, taken := a.used[ip]; !taken {
			a.used[ip] = key
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full (%d pods): delete pods or widen the node's podCIDR", a.prefix, len(a.used))
}

func (a *ipam) release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

// usable: inside the prefix, past the reserved addresses, not broadcast.
func (a *ipam) usable(ip netip.Addr) bool {
	if !a.prefix.Contains(ip) {
		return false
	}
	first := a.prefix.Addr()
	for i := 0; i < reservedAddrs; i++ {
		if ip == first {
			return false
		}
		first = first.Next()
	}
	return ip != lastAddr(a.prefix)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= (1 << host) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
