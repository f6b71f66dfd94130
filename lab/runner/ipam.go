package runner

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ipam hands out pod IPs from the node's pod CIDR. The first addresses are
// reserved: .0 (network), .1 (the host end of the veth, the pods' gateway)
// and .2 (the namespace end's own address).
type ipam struct {
	mu     sync.Mutex
	prefix netip.Prefix
	used   map[netip.Addr]string // address → pod key
	// released remembers when addresses were freed: a new pod gets an
	// address that has rested reuseAfter if there is one. Handing a fresh
	// pod the address a deleted pod held a moment ago made its first
	// connections fail with "no route to host" (the host's neighbour entry
	// for it had gone FAILED while nobody held it: Envoy, Prometheus and the
	// warm-up still tried the old pod), which failed a warm-up in the lab.
	released map[netip.Addr]time.Time
	clock    clock.PassiveClock
}

// reuseAfter is how long a freed address rests before it is handed out
// again (unless no other address is free).
const reuseAfter = 2 * time.Minute

const reservedAddrs = 3

func newIPAM(cidr string) (*ipam, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if !p.Addr().Is4() || p.Bits() > 29 {
		return nil, fmt.Errorf("pod CIDR %q: need an IPv4 prefix of /29 or wider", cidr)
	}
	return &ipam{prefix: p.Masked(), used: map[netip.Addr]string{}, released: map[netip.Addr]time.Time{}, clock: clock.RealClock{}}, nil
}

// allocate returns the address already held by key, prefer (if free and in
// range), or the lowest free address that has rested reuseAfter since it
// was freed (else the lowest free one).
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
	first := a.prefix.Addr()
	for i := 0; i < reservedAddrs; i++ {
		first = first.Next()
	}
	for _, rested := range []bool{true, false} {
		for ip := first; a.usable(ip); ip = ip.Next() {
			if _, taken := a.used[ip]; taken {
				continue
			}
			if at, ok := a.released[ip]; rested && ok && a.clock.Since(at) < reuseAfter {
				continue
			}
			a.used[ip] = key
			delete(a.released, ip)
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full (%d pods): delete pods or widen the node's podCIDR", a.prefix, len(a.used))
}

func (a *ipam) release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
	a.released[ip] = a.clock.Now()
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
