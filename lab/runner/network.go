package runner

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
)

// Network gives pods their addresses and runs their processes where those
// addresses live.
type Network interface {
	// AddAddress makes ip usable by pod processes.
	AddAddress(ctx context.Context, ip netip.Addr) error
	// RemoveAddress undoes AddAddress.
	RemoveAddress(ctx context.Context, ip netip.Addr) error
	// Command returns argv wrapped to run inside the network.
	Command(argv []string) []string
}

// Netns is a Linux network namespace (created by test/lab) holding the pod
// IPs on Device, reached from the host through a veth pair. Needs root.
type Netns struct {
	Name      string // e.g. danki-lab
	Device    string // the namespace end of the veth, e.g. danki-lab1
	PrefixLen int    // the pod CIDR's length, so each address brings the on-link route
}

// AddAddress implements Network.
func (n Netns) AddAddress(ctx context.Context, ip netip.Addr) error {
	return n.ip(ctx, "addr", "replace", fmt.Sprintf("%s/%d", ip, n.PrefixLen), "dev", n.Device)
}

// RemoveAddress implements Network.
func (n Netns) RemoveAddress(ctx context.Context, ip netip.Addr) error {
	err := n.ip(ctx, "addr", "del", fmt.Sprintf("%s/%d", ip, n.PrefixLen), "dev", n.Device)
	if err != nil && strings.Contains(err.Error(), "Cannot assign requested address") {
		return nil // already gone
	}
	return err
}

// Command implements Network. It enters only the network namespace
// (nsenter --net), not what `ip netns exec` adds: that also remounts /sys
// for the namespace, which hides /sys/fs/cgroup, so a JVM would find no
// cgroup and size its heap and threads from the host's memory and CPUs
// instead of the pod's limits, unlike in a container.
func (n Netns) Command(argv []string) []string {
	return append([]string{"nsenter", "--net=" + filepath.Join(netnsDir, n.Name), "--"}, argv...)
}

// netnsDir is where `ip netns add` pins named network namespaces.
const netnsDir = "/run/netns"

func (n Netns) ip(ctx context.Context, args ...string) error {
	full := append([]string{"-n", n.Name}, args...)
	out, err := exec.CommandContext(ctx, "ip", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s (is the lab's network namespace %q up? lab/scripts/up.sh creates it, as root)",
			strings.Join(full, " "), err, strings.TrimSpace(string(out)), n.Name)
	}
	return nil
}

// Loopback runs pods on the host with 127.x addresses, which Linux routes
// locally without configuration. For tests without root: EndpointSlices
// reject loopback addresses, so Services do not work with it.
type Loopback struct{}

// AddAddress implements Network.
func (Loopback) AddAddress(context.Context, netip.Addr) error { return nil }

// RemoveAddress implements Network.
func (Loopback) RemoveAddress(context.Context, netip.Addr) error { return nil }

// Command implements Network.
func (Loopback) Command(argv []string) []string { return argv }
