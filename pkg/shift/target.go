package shift

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Target names the VirtualService danki manages and, on it, the routes and
// destinations that carry the stable/canary split.
type Target struct {
	// Namespace and VirtualService name the VirtualService.
	Namespace      string
	VirtualService string

	// HTTPRoutes names the spec.http routes to manage. TLSRoutes and
	// TCPRoutes select spec.tls and spec.tcp routes by their match (those
	// routes have no names). When all three are empty, every route of any
	// kind that holds both a stable and a canary destination is managed.
	HTTPRoutes []string
	TLSRoutes  []TLSRouteSelector
	TCPRoutes  []TCPRouteSelector

	// StableHost and CanaryHost are the destination hosts of host-level
	// routing: two Services, e.g. "reviews-stable" and "reviews-canary".
	// Short names match their fully qualified forms in the VirtualService's
	// namespace ("reviews-stable.<ns>.svc.cluster.local").
	StableHost string
	CanaryHost string

	// Subsets, when set, switches to subset-level routing: one host (the
	// DestinationRule's spec.host), split between two of its subsets.
	Subsets *Subsets

	// ManagedRoutes are the names of the header and mirror routes danki may
	// add, in precedence order (Argo's trafficRouting.managedRoutes). They
	// sit above the primary routes in this order; mirror routes among them
	// follow the primary routes' weights.
	ManagedRoutes []string
}

// Subsets configures subset-level routing.
type Subsets struct {
	// DestinationRule names the DestinationRule (in Namespace, default: the
	// VirtualService's namespace) whose spec.host the routes send to.
	DestinationRule string
	Namespace       string
	// StableSubset and CanarySubset name its stable and canary subsets.
	StableSubset string
	CanarySubset string
}

// TLSRouteSelector selects spec.tls routes: every match of the route is on
// Port and, when SNIHosts is set, the route's matches name exactly these SNI
// hosts (in any order).
type TLSRouteSelector struct {
	Port     uint32   `json:"port"`
	SNIHosts []string `json:"sniHosts,omitempty"`
}

// TCPRouteSelector selects spec.tcp routes whose every match is on Port.
type TCPRouteSelector struct {
	Port uint32 `json:"port"`
}

// Extra is an additional destination on every managed route (an Argo
// experiment's service): a host, or in subset-level routing a subset of the
// DestinationRule's host, with a fixed weight. Extras are added when missing;
// extras danki added earlier and no longer asked for are removed.
type Extra struct {
	Host   string `json:"host,omitempty"`
	Subset string `json:"subset,omitempty"`
	Weight int    `json:"weight"`
}

func (e Extra) String() string {
	if e.Subset != "" {
		return e.Host + "/" + e.Subset
	}
	return e.Host
}

func (t Target) String() string { return t.Namespace + "/" + t.VirtualService }

// explicit reports whether routes are chosen by name/match rather than by
// content.
func (t Target) explicit() bool {
	return len(t.HTTPRoutes) > 0 || len(t.TLSRoutes) > 0 || len(t.TCPRoutes) > 0
}

// Validate checks the Target on its own (without reading the cluster).
func (t Target) Validate() error {
	var errs []error
	if t.Namespace == "" {
		errs = append(errs, errors.New("namespace: required (the VirtualService's namespace)"))
	}
	if t.VirtualService == "" {
		errs = append(errs, errors.New("virtual service: name required"))
	}
	seen := map[string]bool{}
	for i, r := range t.HTTPRoutes {
		if r == "" {
			errs = append(errs, fmt.Errorf("http routes[%d]: empty name: name the spec.http route, or list no routes to manage every route that holds both destinations", i))
		}
		if seen[r] {
			errs = append(errs, fmt.Errorf("http routes[%d]: %q listed twice", i, r))
		}
		seen[r] = true
	}
	for i, s := range t.TLSRoutes {
		if s.Port == 0 {
			errs = append(errs, fmt.Errorf("tls routes[%d].port: required (the port of the spec.tls route's match)", i))
		}
	}
	for i, s := range t.TCPRoutes {
		if s.Port == 0 {
			errs = append(errs, fmt.Errorf("tcp routes[%d].port: required (the port of the spec.tcp route's match)", i))
		}
	}
	if t.Subsets != nil {
		s := t.Subsets
		if s.DestinationRule == "" {
			errs = append(errs, errors.New("destination rule: name required for subset-level routing"))
		}
		if s.StableSubset == "" {
			errs = append(errs, errors.New("destination rule stable subset: name required"))
		}
		if s.CanarySubset == "" {
			errs = append(errs, errors.New("destination rule canary subset: name required"))
		}
		if s.StableSubset != "" && s.StableSubset == s.CanarySubset {
			errs = append(errs, fmt.Errorf("destination rule subsets: stable and canary subset are both %q: they must differ", s.StableSubset))
		}
	} else {
		if t.StableHost == "" {
			errs = append(errs, errors.New("stable host: required (the stable Service), or configure a destination rule for subset-level routing"))
		}
		if t.CanaryHost == "" {
			errs = append(errs, errors.New("canary host: required (the canary Service), or configure a destination rule for subset-level routing"))
		}
		if t.StableHost != "" && hostMatch(t.StableHost, t.CanaryHost, t.Namespace) {
			errs = append(errs, fmt.Errorf("stable and canary host: both are %q: they must be different Services (or use destination rule subsets)", t.StableHost))
		}
	}
	managed := map[string]bool{}
	for i, m := range t.ManagedRoutes {
		if m == "" {
			errs = append(errs, fmt.Errorf("managed routes[%d]: empty name", i))
		}
		if managed[m] {
			errs = append(errs, fmt.Errorf("managed routes[%d]: %q listed twice", i, m))
		}
		managed[m] = true
		if slices.Contains(t.HTTPRoutes, m) {
			errs = append(errs, fmt.Errorf("managed routes[%d]: %q is also a primary http route: a route is either weighted or managed (header/mirror), not both", i, m))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid shift target %s: %w", t, errors.Join(errs...))
	}
	return nil
}

// validateExtras checks additional destinations and the canary weight
// against each other: together they must leave the stable destination a
// weight in 0..100.
func validateExtras(canary int, extras []Extra) error {
	if canary < 0 || canary > 100 {
		return fmt.Errorf("canary weight %d: must be between 0 and 100 (percent)", canary)
	}
	sum := canary
	seen := map[Extra]bool{}
	for i, e := range extras {
		if e.Host == "" && e.Subset == "" {
			return fmt.Errorf("additional destinations[%d]: host (or subset) required", i)
		}
		if e.Weight < 0 || e.Weight > 100 {
			return fmt.Errorf("additional destinations[%d] (%s).weight %d: must be between 0 and 100", i, e, e.Weight)
		}
		key := Extra{Host: e.Host, Subset: e.Subset}
		if seen[key] {
			return fmt.Errorf("additional destinations[%d]: %s listed twice", i, e)
		}
		seen[key] = true
		sum += e.Weight
	}
	if sum > 100 {
		parts := []string{fmt.Sprintf("canary %d", canary)}
		for _, e := range extras {
			parts = append(parts, fmt.Sprintf("%s %d", e, e.Weight))
		}
		return fmt.Errorf("weights cannot sum to 100: %s = %d%% > 100%% before the stable destination gets any: lower the canary weight or the additional destinations' weights", strings.Join(parts, " + "), sum)
	}
	return nil
}

// hostMatch reports whether two destination hosts name the same service, the
// way Istio resolves short names: "reviews" in namespace ns is
// "reviews.ns.svc.cluster.local"; "reviews.other" is another namespace's.
func hostMatch(a, b, ns string) bool {
	if a == b {
		return true
	}
	if a == "" || b == "" {
		return false
	}
	la, lb := strings.Split(a, "."), strings.Split(b, ".")
	if la[0] != lb[0] {
		return false
	}
	nsA, nsB := ns, ns
	if len(la) > 1 {
		nsA = la[1]
	}
	if len(lb) > 1 {
		nsB = lb[1]
	}
	if nsA != nsB {
		return false
	}
	// Past name.namespace only the cluster suffix is left ("svc",
	// "svc.cluster.local"): a missing suffix matches a Kubernetes one, else
	// one suffix must be a prefix of the other.
	ra, rb := la[min(2, len(la)):], lb[min(2, len(lb)):]
	switch {
	case len(ra) == 0 && len(rb) == 0:
		return true
	case len(ra) == 0:
		return rb[0] == "svc"
	case len(rb) == 0:
		return ra[0] == "svc"
	}
	n := min(len(ra), len(rb))
	return slices.Equal(ra[:n], rb[:n])
}
