package warmup

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// GuardRefresh is how often a PodGuard reads the run's pods again from the
// API server: a pod deleted (and its IP handed to another pod) stops getting
// new connections at most this long after the API server knows.
const GuardRefresh = 5 * time.Second

// guardStaleAfter is how many refreshes in a row may fail before the guard
// refuses every pod address: load nobody can vouch for stops.
const guardStaleAfter = 3

// PodGuardQuery is where a run's pods are: the same query the pod lookup
// (KubeTargets) makes, in the Rollout's namespace, for the Rollout's
// selector and each pod-template hash the run's targets come from.
type PodGuardQuery struct {
	Namespace string
	// Selector is the Rollout's spec.selector as a label selector string
	// ("" when it has none: the hash alone selects).
	Selector string
	// Hashes are the pod-template hashes of the ReplicaSets whose pods are
	// targets (the canary's, and the stable's when it is compared with).
	Hashes []string
}

func (q PodGuardQuery) String() string {
	return fmt.Sprintf("pods of %s %v matching %q in namespace %s", PodTemplateHashLabel, q.Hashes, q.Selector, q.Namespace)
}

// PodGuard holds the addresses a run may connect to: its target pods, each
// pinned by name and UID when the guard starts and read again every
// GuardRefresh with the pod lookup's query, plus any explicit URL targets
// (their addresses when the guard starts). Check is the run's Config.Guard.
// A target pod deleted, terminating, finished or with another IP, or its
// IP now another pod's (the UID differs), is refused from the next refresh
// on: pod IPs are reused, and the load must not follow the address to
// whatever has it now.
type PodGuard struct {
	kube  kubernetes.Interface
	query PodGuardQuery
	every time.Duration
	log   *slog.Logger

	// static are the explicit URL targets' addresses: not pods, fixed for
	// the run (the operator's policy checks them at connect time too).
	static map[netip.Addr]bool
	// pinned are the target pods, by name, as they were when the run found
	// them.
	pinned map[string]pinnedPod

	mu      sync.RWMutex
	allowed map[netip.Addr]string // address → a pinned pod that still has it
	gone    map[netip.Addr]string // address → why its pod no longer counts
	readAt  time.Time             // last successful refresh
	failed  int                   // refreshes failed in a row
	lastErr error
}

type pinnedPod struct {
	ip  netip.Addr
	uid types.UID
}

// NewPodGuard pins the pod targets (by name and address) to the pods the API
// server has now and starts refreshing them every `every` (≤ 0:
// GuardRefresh) until ctx ends. urls are targets that are no pods (explicit
// URLs): their addresses are allowed as they are, host names resolved once,
// now. A pod target that has no pod of that name and address in the query
// any more is refused from the start.
func NewPodGuard(ctx context.Context, kube kubernetes.Interface, q PodGuardQuery, pods, urls []Target, every time.Duration, log *slog.Logger) (*PodGuard, error) {
	if every <= 0 {
		every = GuardRefresh
	}
	if log == nil {
		log = slog.Default()
	}
	g := &PodGuard{kube: kube, query: q, every: every, log: log, static: map[netip.Addr]bool{}, pinned: map[string]pinnedPod{}}
	for _, t := range urls {
		addrs, err := targetAddrs(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			g.static[a] = true
		}
	}
	current, err := g.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("pin the run's pods: %w", err)
	}
	gone := map[netip.Addr]string{}
	for _, t := range pods {
		// A pod target is addressed at its pod IP (KubeTargets): no name
		// to resolve.
		u, err := url.Parse(t.URL)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", t, err)
		}
		ip, err := netip.ParseAddr(u.Hostname())
		if err != nil {
			return nil, fmt.Errorf("pod target %s is not addressed by its pod IP: %w", t, err)
		}
		ip = ip.Unmap()
		p, ok := current[t.Name]
		if !ok || !podHasIP(p, ip) {
			gone[ip] = fmt.Sprintf("pod %s/%s with address %s is not among the %s any more", q.Namespace, t.Name, ip, q)
			continue
		}
		g.pinned[t.Name] = pinnedPod{ip: ip, uid: p.UID}
	}
	g.apply(current, time.Now())
	g.mu.Lock()
	for ip, why := range gone {
		if _, ok := g.allowed[ip]; !ok {
			g.gone[ip] = why
		}
	}
	g.mu.Unlock()
	go g.loop(ctx)
	return g, nil
}

// Check refuses an address that is not (any more) one of the run's target
// pods or explicit URL targets.
func (g *PodGuard) Check(ip netip.Addr) error {
	ip = ip.Unmap()
	if g.static[ip] {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.failed >= guardStaleAfter {
		return fmt.Errorf("address %s: the run's pods could not be read from the API server since %s (%v): no load to pods nobody can vouch for", ip, g.readAt.Format(time.RFC3339), g.lastErr)
	}
	if _, ok := g.allowed[ip]; ok {
		return nil
	}
	if why, ok := g.gone[ip]; ok {
		return fmt.Errorf("address %s refused: %s", ip, why)
	}
	return fmt.Errorf("address %s is not a target pod of this run (%s): the warm-up sends load to the rollout's own pods only", ip, g.query)
}

// Allowed lists the addresses Check allows now (the pods' and the explicit
// URLs'), sorted.
func (g *PodGuard) Allowed() []netip.Addr {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var all []netip.Addr
	for ip := range g.static {
		all = append(all, ip)
	}
	if g.failed < guardStaleAfter {
		for ip := range g.allowed {
			if !g.static[ip] {
				all = append(all, ip)
			}
		}
	}
	slices.SortFunc(all, netip.Addr.Compare)
	return all
}

// Refresh reads the pods again now (the loop does every `every`).
func (g *PodGuard) Refresh(ctx context.Context) error {
	current, err := g.list(ctx)
	if err != nil {
		g.mu.Lock()
		g.failed++
		g.lastErr = err
		failed := g.failed
		g.mu.Unlock()
		g.log.Warn("pod guard: cannot read the run's pods", "query", g.query.String(), "failed", failed, "err", err)
		return err
	}
	g.apply(current, time.Now())
	return nil
}

func (g *PodGuard) loop(ctx context.Context) {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, max(g.every, time.Second))
			err := g.Refresh(rctx)
			cancel()
			if err != nil && ctx.Err() != nil {
				return
			}
		}
	}
}

// apply recomputes the allowed addresses from the pods the API server has.
func (g *PodGuard) apply(current map[string]*corev1.Pod, at time.Time) {
	allowed, gone := map[netip.Addr]string{}, map[netip.Addr]string{}
	names := make([]string, 0, len(g.pinned))
	for name := range g.pinned {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pin := g.pinned[name]
		p := current[name]
		why := ""
		switch {
		case p == nil:
			why = fmt.Sprintf("pod %s/%s is gone (deleted, or no longer one of the %s)", g.query.Namespace, name, g.query)
		case p.UID != pin.uid:
			why = fmt.Sprintf("pod %s/%s was replaced (UID %s, was %s)", g.query.Namespace, name, p.UID, pin.uid)
		case p.DeletionTimestamp != nil:
			why = fmt.Sprintf("pod %s/%s is terminating", g.query.Namespace, name)
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			why = fmt.Sprintf("pod %s/%s has finished (%s)", g.query.Namespace, name, p.Status.Phase)
		case !podHasIP(p, pin.ip):
			why = fmt.Sprintf("pod %s/%s no longer has address %s", g.query.Namespace, name, pin.ip)
		}
		if why != "" {
			gone[pin.ip] = why
			continue
		}
		allowed[pin.ip] = name
	}
	// Several targets may share an address (pods on the host network, a
	// test's loopback): one live pod keeps it.
	for ip := range allowed {
		delete(gone, ip)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for ip, why := range gone {
		if _, was := g.gone[ip]; !was {
			g.log.Info("pod guard: address refused from now on", "address", ip, "reason", why)
		}
	}
	g.allowed, g.gone, g.readAt, g.failed, g.lastErr = allowed, gone, at, 0, nil
}

// guardListWhy says, in a Forbidden's error, why the guard lists pods.
const guardListWhy = "the pod guard lists them to pin the run's pods by name, UID and address"

// list returns the pods of the query by name. A Forbidden names the RBAC
// rule to grant (ForbiddenError).
func (g *PodGuard) list(ctx context.Context) (map[string]*corev1.Pod, error) {
	base, err := labels.Parse(g.query.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", g.query.Selector, err)
	}
	out := map[string]*corev1.Pod{}
	if len(g.query.Hashes) == 0 {
		// Pods found by Service or selector alone (a source: load
		// measurement): the selector's pods of the namespace, each target
		// still pinned by name, UID and address.
		pods, err := g.kube.CoreV1().Pods(g.query.Namespace).List(ctx, metav1.ListOptions{LabelSelector: base.String()})
		if err != nil {
			return nil, fmt.Errorf("pods matching %q: %w", base, apiError(err, "list", "", "pods", g.query.Namespace, guardListWhy))
		}
		for i := range pods.Items {
			out[pods.Items[i].Name] = &pods.Items[i]
		}
		return out, nil
	}
	for _, hash := range g.query.Hashes {
		req, err := labels.NewRequirement(PodTemplateHashLabel, "=", []string{hash})
		if err != nil {
			return nil, fmt.Errorf("pod-template hash %q: %w", hash, err)
		}
		sel := base.Add(*req)
		pods, err := g.kube.CoreV1().Pods(g.query.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("pods matching %q: %w", sel, apiError(err, "list", "", "pods", g.query.Namespace, guardListWhy))
		}
		for i := range pods.Items {
			out[pods.Items[i].Name] = &pods.Items[i]
		}
	}
	return out, nil
}

func podHasIP(p *corev1.Pod, ip netip.Addr) bool {
	if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && a.Unmap() == ip {
		return true
	}
	for _, pip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(pip.IP); err == nil && a.Unmap() == ip {
			return true
		}
	}
	return false
}

// targetAddrs is the address of a target's URL: its IP, or what its host
// name resolves to now.
func targetAddrs(ctx context.Context, t Target) ([]netip.Addr, error) {
	u, err := url.Parse(t.URL)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", t, err)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("target %s: resolve %s: %w", t, host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("target %s: %s resolves to no address", t, host)
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// GuardChain returns a guard that asks each non-nil guard in turn (nil when
// there is none).
func GuardChain(guards ...func(netip.Addr) error) func(netip.Addr) error {
	guards = slices.DeleteFunc(slices.Clone(guards), func(g func(netip.Addr) error) bool { return g == nil })
	switch len(guards) {
	case 0:
		return nil
	case 1:
		return guards[0]
	}
	return func(ip netip.Addr) error {
		for _, g := range guards {
			if err := g(ip); err != nil {
				return err
			}
		}
		return nil
	}
}
