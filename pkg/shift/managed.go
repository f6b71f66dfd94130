package shift

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
)

// StringMatch matches a string one way: exactly, by prefix or by regular
// expression (RE2). Exactly one field is set.
type StringMatch struct {
	Exact  string `json:"exact,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	Regex  string `json:"regex,omitempty"`
}

func (s StringMatch) validate(field string) error {
	n := 0
	for _, v := range []string{s.Exact, s.Prefix, s.Regex} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%s: set exactly one of exact, prefix or regex", field)
	}
	return nil
}

func (s StringMatch) istio() *networking.StringMatch {
	switch {
	case s.Exact != "":
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: s.Exact}}
	case s.Prefix != "":
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: s.Prefix}}
	default:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: s.Regex}}
	}
}

// HeaderRoute sends requests carrying a header to the canary only (Argo's
// setHeaderRoute). No Match removes the route.
type HeaderRoute struct {
	Name string
	// Match lists alternatives: a request matching any one goes to the
	// canary.
	Match []HeaderMatch
}

// HeaderMatch matches one request header.
type HeaderMatch struct {
	Header string
	Value  StringMatch
}

// MirrorRoute copies matching requests to the canary while they are still
// served by the weighted destinations (Argo's setMirrorRoute). No Match
// removes the route.
type MirrorRoute struct {
	Name string
	// Match lists alternatives: a request matching any one is mirrored.
	Match []RequestMatch
	// Percentage of matching requests to mirror, 0–100; nil means 100.
	Percentage *int
}

// RequestMatch matches a request by method, path and headers (all that are
// set).
type RequestMatch struct {
	Method  *StringMatch
	Path    *StringMatch
	Headers map[string]StringMatch
}

func (t Target) checkManagedName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s name: required", kind)
	}
	if !slices.Contains(t.ManagedRoutes, name) {
		return fmt.Errorf("%s %q: not listed in the managed routes %v: list it there (managedRoutes), which also sets its precedence", kind, name, t.ManagedRoutes)
	}
	return nil
}

// SetHeaderRoute adds (or replaces) a header route that sends matching
// requests to the canary, placed above the primary routes in managed-route
// order; with no Match it removes the route.
func (s *Shifter) SetHeaderRoute(ctx context.Context, t Target, hr HeaderRoute) error {
	if err := t.checkManagedName("header route", hr.Name); err != nil {
		return fmt.Errorf("set header route on VirtualService %s: %w", t, err)
	}
	for i, m := range hr.Match {
		if m.Header == "" {
			return fmt.Errorf("set header route %q: match[%d].headerName: required", hr.Name, i)
		}
		if err := m.Value.validate(fmt.Sprintf("match[%d].headerValue", i)); err != nil {
			return fmt.Errorf("set header route %q: %w", hr.Name, err)
		}
	}
	_, err := s.update(ctx, t, fmt.Sprintf("set header route %q", hr.Name), func(vs *networkingv1.VirtualService) error {
		return s.placeManaged(ctx, vs, t, hr.Name, func(canary *networking.Destination, primary *networking.HTTPRoute) *networking.HTTPRoute {
			if len(hr.Match) == 0 {
				return nil
			}
			route := &networking.HTTPRoute{
				Name:    hr.Name,
				Route:   []*networking.HTTPRouteDestination{{Destination: canary, Weight: 100}},
				Headers: addedHeaders(primary),
			}
			for _, m := range hr.Match {
				route.Match = append(route.Match, &networking.HTTPMatchRequest{
					Headers: map[string]*networking.StringMatch{m.Header: m.Value.istio()},
				})
			}
			return route
		})
	})
	return err
}

// SetMirrorRoute adds (or replaces) a mirror route: matching requests keep
// the primary route's weighted destinations and are copied to the canary.
// It sits above the primary routes in managed-route order and its weights
// follow the primary routes'. With no Match it removes the route.
func (s *Shifter) SetMirrorRoute(ctx context.Context, t Target, mr MirrorRoute) error {
	if err := t.checkManagedName("mirror route", mr.Name); err != nil {
		return fmt.Errorf("set mirror route on VirtualService %s: %w", t, err)
	}
	pct := 100
	if mr.Percentage != nil {
		pct = *mr.Percentage
	}
	if pct < 0 || pct > 100 {
		return fmt.Errorf("set mirror route %q: percentage %d: must be 0–100", mr.Name, pct)
	}
	for i, m := range mr.Match {
		if m.Method != nil {
			if err := m.Method.validate(fmt.Sprintf("match[%d].method", i)); err != nil {
				return fmt.Errorf("set mirror route %q: %w", mr.Name, err)
			}
		}
		if m.Path != nil {
			if err := m.Path.validate(fmt.Sprintf("match[%d].path", i)); err != nil {
				return fmt.Errorf("set mirror route %q: %w", mr.Name, err)
			}
		}
		for h, v := range m.Headers {
			if err := v.validate(fmt.Sprintf("match[%d].headers[%q]", i, h)); err != nil {
				return fmt.Errorf("set mirror route %q: %w", mr.Name, err)
			}
		}
	}
	_, err := s.update(ctx, t, fmt.Sprintf("set mirror route %q", mr.Name), func(vs *networkingv1.VirtualService) error {
		return s.placeManaged(ctx, vs, t, mr.Name, func(canary *networking.Destination, primary *networking.HTTPRoute) *networking.HTTPRoute {
			if len(mr.Match) == 0 {
				return nil
			}
			route := &networking.HTTPRoute{
				Name:             mr.Name,
				Mirror:           canary,
				MirrorPercentage: &networking.Percent{Value: float64(pct)},
				Headers:          addedHeaders(primary),
			}
			for _, d := range primary.GetRoute() {
				route.Route = append(route.Route, proto.Clone(d).(*networking.HTTPRouteDestination))
			}
			for _, m := range mr.Match {
				req := &networking.HTTPMatchRequest{}
				if m.Method != nil {
					req.Method = m.Method.istio()
				}
				if m.Path != nil {
					req.Uri = m.Path.istio()
				}
				if len(m.Headers) > 0 {
					req.Headers = map[string]*networking.StringMatch{}
					for h, v := range m.Headers {
						req.Headers[h] = v.istio()
					}
				}
				route.Match = append(route.Match, req)
			}
			return route
		})
	})
	return err
}

// placeManaged removes the managed route name from vs, adds build's route
// (if not nil), and orders the managed routes above the first primary http
// route in managed-route order. build gets a copy of the canary destination
// and the first primary http route.
func (s *Shifter) placeManaged(ctx context.Context, vs *networkingv1.VirtualService, t Target, name string,
	build func(canary *networking.Destination, primary *networking.HTTPRoute) *networking.HTTPRoute,
) error {
	m, err := s.matcher(ctx, t)
	if err != nil {
		return err
	}
	stale, err := staleExtras(vs)
	if err != nil {
		return err
	}
	m = m.withExtras(nil, stale)
	routes, err := primaryRoutes(&vs.Spec, t, m)
	if err != nil {
		return err
	}
	var primary *networking.HTTPRoute
	for _, r := range routes {
		if r.kind == KindHTTP {
			primary = vs.Spec.Http[r.index]
			break
		}
	}
	if primary == nil {
		return fmt.Errorf("managed route %q: needs a primary http route (header and mirror routes are http routes), but the managed routes are tls/tcp only", name)
	}
	var canary *networking.Destination
	for _, d := range primary.GetRoute() {
		if ro, _ := m.classify(d.GetDestination()); ro == roleCanary {
			canary = proto.Clone(d.GetDestination()).(*networking.Destination)
			break
		}
	}
	if canary == nil {
		return fmt.Errorf("spec.http (%q): no destination for the %s", primary.GetName(), m.roleField(roleCanary))
	}
	newRoute := build(canary, primary)
	for i, r := range vs.Spec.Http {
		if r.GetName() != name || isOwnManagedRoute(r, m, primary) {
			continue
		}
		if newRoute == nil {
			// Nothing of danki's to remove; the route is someone else's.
			s.log.Warn("a route of the managed route's name is not one danki built: left as it is", "virtualService", t.String(), "route", name)
			continue
		}
		return fmt.Errorf("spec.http[%d] (%q): not a route danki built (a header route to the canary, or a mirror route over the stable/canary split), so danki will not replace it: rename the managed route (managedRoutes and its step), or rename or remove that route", i, name)
	}
	vs.Spec.Http = slices.DeleteFunc(vs.Spec.Http, func(r *networking.HTTPRoute) bool {
		return r.GetName() == name && isOwnManagedRoute(r, m, primary)
	})
	if newRoute != nil {
		vs.Spec.Http = append(vs.Spec.Http, newRoute)
	}
	return orderManaged(&vs.Spec, t.ManagedRoutes, primary, func(r *networking.HTTPRoute) bool { return isOwnManagedRoute(r, m, primary) })
}

// orderManaged moves danki's managed http routes (named in managed and
// own), in managed order, to just above the first primary route; every
// other route keeps its order.
func orderManaged(spec *networking.VirtualService, managed []string, primary *networking.HTTPRoute, own func(*networking.HTTPRoute) bool) error {
	var rest, mine []*networking.HTTPRoute
	for _, r := range spec.Http {
		if slices.Contains(managed, r.GetName()) && own(r) {
			mine = append(mine, r)
		} else {
			rest = append(rest, r)
		}
	}
	at := slices.Index(rest, primary)
	if at < 0 {
		return errors.New("internal: primary route lost while ordering managed routes")
	}
	rank := func(r *networking.HTTPRoute) int { return slices.Index(managed, r.GetName()) }
	sort.SliceStable(mine, func(i, j int) bool { return rank(mine[i]) < rank(mine[j]) })
	out := make([]*networking.HTTPRoute, 0, len(spec.Http))
	out = append(out, rest[:at]...)
	out = append(out, mine...)
	out = append(out, rest[at:]...)
	spec.Http = out
	return nil
}

// RemoveManagedRoutes removes the header and mirror routes danki built that
// are named in t.ManagedRoutes or also (route names from rollout steps). A
// route of such a name that is not one danki built (see isOwnManagedRoute)
// stays. A VirtualService that does not exist has nothing to remove.
func (s *Shifter) RemoveManagedRoutes(ctx context.Context, t Target, also ...string) error {
	names := append(slices.Clone(t.ManagedRoutes), also...)
	if len(names) == 0 {
		return nil
	}
	_, err := s.update(ctx, t, "remove managed routes", func(vs *networkingv1.VirtualService) error {
		m, err := s.matcher(ctx, t)
		if err != nil {
			// Not ErrNotFound for the caller: the VirtualService is there,
			// and without the canary's host danki cannot tell its routes.
			return fmt.Errorf("%v (danki needs it to tell its own routes from others)", err)
		}
		stale, _ := staleExtras(vs) // a broken annotation only weakens the proof
		m = m.withExtras(nil, stale)
		var primary *networking.HTTPRoute
		if routes, err := primaryRoutes(&vs.Spec, t, m); err == nil {
			for _, r := range routes {
				if r.kind == KindHTTP {
					primary = vs.Spec.Http[r.index]
					break
				}
			}
		}
		vs.Spec.Http = slices.DeleteFunc(vs.Spec.Http, func(r *networking.HTTPRoute) bool {
			if r.GetName() == "" || !slices.Contains(names, r.GetName()) {
				return false
			}
			if !isOwnManagedRoute(r, m, primary) {
				s.log.Warn("a route of a managed route's name is not one danki built: left as it is", "virtualService", t.String(), "route", r.GetName())
				return false
			}
			return true
		})
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		s.log.Debug("VirtualService gone: no managed routes to remove", "virtualService", t.String())
		return nil
	}
	return err
}
