package shift

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
)

// Route kinds, as the VirtualService spec names its route lists.
const (
	KindHTTP = "http"
	KindTLS  = "tls"
	KindTCP  = "tcp"
)

// role is what a destination is to danki.
type role int

const (
	roleForeign role = iota // neither stable, canary nor an extra: never touched
	roleStable
	roleCanary
	roleExtra      // an additional destination asked for now
	roleStaleExtra // an additional destination danki added earlier, no longer asked for
)

func (r role) String() string {
	switch r {
	case roleStable:
		return "stable"
	case roleCanary:
		return "canary"
	case roleExtra, roleStaleExtra:
		return "extra"
	}
	return "other"
}

// matcher classifies destinations for one Target.
type matcher struct {
	ns string
	// subset is true for subset-level routing: host is the
	// DestinationRule's spec.host and the subsets decide the role.
	subset                     bool
	stableHost, canaryHost     string
	host                       string
	stableSubset, canarySubset string
	extras                     []Extra
	stale                      []Extra
}

func (m *matcher) withExtras(extras, stale []Extra) *matcher {
	c := *m
	c.extras = make([]Extra, len(extras))
	for i, e := range extras {
		if e.Host == "" {
			e.Host = m.host
		}
		c.extras[i] = e
	}
	c.stale = nil
	for _, s := range stale {
		// The extras annotation is writable by whoever edits the
		// VirtualService: a destination it names is danki's to drop only
		// if danki could have added it, in this namespace.
		if !c.local(s) {
			continue
		}
		if !slices.ContainsFunc(c.extras, func(e Extra) bool { return c.same(e, s) }) {
			c.stale = append(c.stale, s)
		}
	}
	return &c
}

// local reports whether an additional destination is one danki adds: a
// subset of the DestinationRule's host (subset-level routing), or a Service
// in the VirtualService's namespace (host-level; Argo experiments' Services
// live with the rollout).
func (m *matcher) local(e Extra) bool {
	if m.subset {
		return e.Subset != "" && hostMatch(e.Host, m.host, m.ns)
	}
	if e.Subset != "" || e.Host == "" {
		return false
	}
	name, _, _ := strings.Cut(e.Host, ".")
	return hostMatch(e.Host, name, m.ns)
}

func (m *matcher) same(a, b Extra) bool {
	return a.Subset == b.Subset && hostMatch(a.Host, b.Host, m.ns)
}

// classify returns the destination's role and, for roleExtra, the index in
// m.extras.
func (m *matcher) classify(d *networking.Destination) (role, int) {
	if d == nil {
		return roleForeign, -1
	}
	if m.subset {
		if hostMatch(d.Host, m.host, m.ns) {
			switch d.Subset {
			case m.stableSubset:
				return roleStable, -1
			case m.canarySubset:
				return roleCanary, -1
			}
		}
	} else {
		switch {
		case hostMatch(d.Host, m.stableHost, m.ns):
			return roleStable, -1
		case hostMatch(d.Host, m.canaryHost, m.ns):
			return roleCanary, -1
		}
	}
	as := Extra{Host: d.Host, Subset: d.Subset}
	for i, e := range m.extras {
		if m.same(e, as) {
			return roleExtra, i
		}
	}
	for _, e := range m.stale {
		if m.same(e, as) {
			return roleStaleExtra, -1
		}
	}
	return roleForeign, -1
}

// describe names the two roles for error messages.
func (m *matcher) describe() string {
	if m.subset {
		return fmt.Sprintf("host %q subsets %q (stable) and %q (canary)", m.host, m.stableSubset, m.canarySubset)
	}
	return fmt.Sprintf("stable host %q and canary host %q", m.stableHost, m.canaryHost)
}

func (m *matcher) roleField(r role) string {
	if m.subset {
		if r == roleStable {
			return fmt.Sprintf("stable subset %q of host %q", m.stableSubset, m.host)
		}
		return fmt.Sprintf("canary subset %q of host %q", m.canarySubset, m.host)
	}
	if r == roleStable {
		return fmt.Sprintf("stable host %q", m.stableHost)
	}
	return fmt.Sprintf("canary host %q", m.canaryHost)
}

// routeRef points at one route of a VirtualService spec.
type routeRef struct {
	kind  string
	index int
	name  string // http routes only
}

func (r routeRef) path() string {
	p := fmt.Sprintf("spec.%s[%d]", r.kind, r.index)
	if r.name != "" {
		p += fmt.Sprintf(" (%q)", r.name)
	}
	return p
}

// destView is a read-only view of one weighted destination.
type destView struct {
	dest   *networking.Destination
	weight int32
}

// destinations returns the weighted destinations of a route.
func destinations(spec *networking.VirtualService, r routeRef) []destView {
	var out []destView
	switch r.kind {
	case KindHTTP:
		for _, d := range spec.Http[r.index].GetRoute() {
			out = append(out, destView{d.GetDestination(), d.GetWeight()})
		}
	case KindTLS:
		for _, d := range spec.Tls[r.index].GetRoute() {
			out = append(out, destView{d.GetDestination(), d.GetWeight()})
		}
	case KindTCP:
		for _, d := range spec.Tcp[r.index].GetRoute() {
			out = append(out, destView{d.GetDestination(), d.GetWeight()})
		}
	}
	return out
}

// allRoutes lists every route of the spec, http first.
func allRoutes(spec *networking.VirtualService) []routeRef {
	var out []routeRef
	for i, r := range spec.Http {
		out = append(out, routeRef{KindHTTP, i, r.GetName()})
	}
	for i := range spec.Tls {
		out = append(out, routeRef{KindTLS, i, ""})
	}
	for i := range spec.Tcp {
		out = append(out, routeRef{KindTCP, i, ""})
	}
	return out
}

func (m *matcher) holdsBoth(spec *networking.VirtualService, r routeRef) bool {
	var stable, canary bool
	for _, d := range destinations(spec, r) {
		switch ro, _ := m.classify(d.dest); ro {
		case roleStable:
			stable = true
		case roleCanary:
			canary = true
		}
	}
	return stable && canary
}

// primaryRoutes selects the routes whose weights danki manages: by name and
// match when the Target names any, else every route holding both the stable
// and canary destination. Managed (header/mirror) routes are never primary.
func primaryRoutes(spec *networking.VirtualService, t Target, m *matcher) ([]routeRef, error) {
	var out []routeRef
	if !t.explicit() {
		for _, r := range allRoutes(spec) {
			if r.kind == KindHTTP && slices.Contains(t.ManagedRoutes, r.name) {
				continue
			}
			if m.holdsBoth(spec, r) {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no http, tls or tcp route holds both the %s: name the routes to manage, or add both destinations to the route", m.describe())
		}
		return out, nil
	}
	var errs []error
	for _, name := range t.HTTPRoutes {
		i := slices.IndexFunc(spec.Http, func(r *networking.HTTPRoute) bool { return r.GetName() == name })
		if i < 0 {
			var names []string
			for _, r := range spec.Http {
				names = append(names, fmt.Sprintf("%q", r.GetName()))
			}
			errs = append(errs, fmt.Errorf("http route %q: spec.http has no route of that name (it has %s): fix the route name", name, orNone(names)))
			continue
		}
		out = append(out, routeRef{KindHTTP, i, name})
	}
	for si, sel := range t.TLSRoutes {
		found := false
		for i, r := range spec.Tls {
			if tlsMatches(r, sel) {
				out = append(out, routeRef{KindTLS, i, ""})
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("tls routes[%d] {port: %d, sniHosts: %v}: no spec.tls route matches only that port and those SNI hosts", si, sel.Port, sel.SNIHosts))
		}
	}
	for si, sel := range t.TCPRoutes {
		found := false
		for i, r := range spec.Tcp {
			if tcpMatches(r, sel) {
				out = append(out, routeRef{KindTCP, i, ""})
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("tcp routes[%d] {port: %d}: no spec.tcp route matches only that port", si, sel.Port))
		}
	}
	for _, r := range out {
		if len(destinations(spec, r)) == 0 {
			errs = append(errs, fmt.Errorf("%s: has no route destinations (it redirects, delegates or responds directly): manage a route that forwards to both destinations", r.path()))
		}
	}
	return out, errors.Join(errs...)
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func tlsMatches(r *networking.TLSRoute, sel TLSRouteSelector) bool {
	if len(r.GetMatch()) == 0 {
		return false
	}
	var snis []string
	for _, m := range r.GetMatch() {
		if m.GetPort() != sel.Port {
			return false
		}
		for _, h := range m.GetSniHosts() {
			if !slices.Contains(snis, h) {
				snis = append(snis, h)
			}
		}
	}
	if len(sel.SNIHosts) == 0 {
		return true
	}
	want := slices.Clone(sel.SNIHosts)
	slices.Sort(want)
	want = slices.Compact(want)
	slices.Sort(snis)
	return slices.Equal(snis, want)
}

func tcpMatches(r *networking.TCPRoute, sel TCPRouteSelector) bool {
	if len(r.GetMatch()) == 0 {
		return false
	}
	for _, m := range r.GetMatch() {
		if m.GetPort() != sel.Port {
			return false
		}
	}
	return true
}

// mirrorRoutes lists danki's managed mirror routes (isOwnMirrorRoute) that
// carry the stable/canary split: their weights follow the primary routes (as
// with Argo's native Istio router).
func mirrorRoutes(spec *networking.VirtualService, t Target, m *matcher) []routeRef {
	var out []routeRef
	for i, r := range spec.Http {
		if !slices.Contains(t.ManagedRoutes, r.GetName()) || (r.GetMirror() == nil && len(r.GetMirrors()) == 0) {
			continue
		}
		ref := routeRef{KindHTTP, i, r.GetName()}
		if m.holdsBoth(spec, ref) && isOwnMirrorRoute(r, m, nil) {
			out = append(out, ref)
		}
	}
	return out
}

// reweigh sets canary, stable and extra weights on one route of spec (in
// place), adds missing extras and drops stale ones. It fails, changing
// nothing it reports, when the route lacks a stable or canary destination,
// holds one twice, or holds a destination in neither role.
func reweigh(spec *networking.VirtualService, r routeRef, m *matcher, canary int, extras []Extra) error {
	stable := int32(100 - canary)
	for _, e := range extras {
		stable -= int32(e.Weight)
	}
	switch r.kind {
	case KindHTTP:
		route := spec.Http[r.index]
		out, err := reweighList(route.Route, r, m, int32(canary), stable,
			func(d *networking.HTTPRouteDestination) (*networking.Destination, *int32) {
				return d.Destination, &d.Weight
			},
			func(d *networking.Destination, w int32) *networking.HTTPRouteDestination {
				return &networking.HTTPRouteDestination{Destination: d, Weight: w}
			})
		if err != nil {
			return err
		}
		route.Route = out
	case KindTLS:
		route := spec.Tls[r.index]
		out, err := reweighList(route.Route, r, m, int32(canary), stable, routeDestAccess, newRouteDest)
		if err != nil {
			return err
		}
		route.Route = out
	case KindTCP:
		route := spec.Tcp[r.index]
		out, err := reweighList(route.Route, r, m, int32(canary), stable, routeDestAccess, newRouteDest)
		if err != nil {
			return err
		}
		route.Route = out
	}
	return nil
}

func routeDestAccess(d *networking.RouteDestination) (*networking.Destination, *int32) {
	return d.Destination, &d.Weight
}

func newRouteDest(d *networking.Destination, w int32) *networking.RouteDestination {
	return &networking.RouteDestination{Destination: d, Weight: w}
}

func reweighList[T any](in []T, r routeRef, m *matcher, canary, stable int32,
	access func(T) (*networking.Destination, *int32), mk func(*networking.Destination, int32) T,
) ([]T, error) {
	var (
		out                    []T
		stableAt, canaryAt     = -1, -1
		found                  = make([]bool, len(m.extras))
		errs                   []error
		canaryPort, stablePort *networking.PortSelector
	)
	for j, d := range in {
		dest, w := access(d)
		field := fmt.Sprintf("%s.route[%d].destination", r.path(), j)
		ro, ei := m.classify(dest)
		switch ro {
		case roleStable:
			if stableAt >= 0 {
				errs = append(errs, fmt.Errorf("%s: a second destination for the %s (first is route[%d]): keep one per role", field, m.roleField(roleStable), stableAt))
			}
			stableAt, stablePort = j, dest.Port
			*w = stable
		case roleCanary:
			if canaryAt >= 0 {
				errs = append(errs, fmt.Errorf("%s: a second destination for the %s (first is route[%d]): keep one per role", field, m.roleField(roleCanary), canaryAt))
			}
			canaryAt, canaryPort = j, dest.Port
			*w = canary
		case roleExtra:
			found[ei] = true
			*w = int32(m.extras[ei].Weight)
		case roleStaleExtra:
			continue // added by danki for an experiment that has ended
		default:
			if dest == nil {
				errs = append(errs, fmt.Errorf("%s: missing: every destination of a managed route needs a host", field))
			} else {
				what := fmt.Sprintf("host %q", dest.Host)
				if dest.Subset != "" {
					what = fmt.Sprintf("host %q subset %q", dest.Host, dest.Subset)
				}
				errs = append(errs, fmt.Errorf("%s: %s is in neither role (%s, nor an additional destination): danki sets every weight of a managed route, so remove that destination or manage another route", field, what, m.describe()))
			}
		}
		out = append(out, d)
	}
	if stableAt < 0 {
		errs = append(errs, fmt.Errorf("%s: no destination for the %s: add it to the route, or fix the stable host/subset", r.path(), m.roleField(roleStable)))
	}
	if canaryAt < 0 {
		errs = append(errs, fmt.Errorf("%s: no destination for the %s: add it to the route, or fix the canary host/subset", r.path(), m.roleField(roleCanary)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	port := canaryPort
	if port == nil {
		port = stablePort
	}
	for i, e := range m.extras {
		if found[i] {
			continue
		}
		d := &networking.Destination{Host: e.Host, Subset: e.Subset}
		if port != nil {
			d.Port = proto.Clone(port).(*networking.PortSelector)
		}
		out = append(out, mk(d, int32(e.Weight)))
	}
	return out, nil
}

// routeWeights reads the canary and extra weights of a managed route.
func routeWeights(spec *networking.VirtualService, r routeRef, m *matcher) (canary int, extras map[Extra]int) {
	extras = map[Extra]int{}
	for _, d := range destinations(spec, r) {
		switch ro, ei := m.classify(d.dest); ro {
		case roleCanary:
			canary = int(d.weight)
		case roleExtra:
			extras[Extra{Host: m.extras[ei].Host, Subset: m.extras[ei].Subset}] = int(d.weight)
		}
	}
	return canary, extras
}
