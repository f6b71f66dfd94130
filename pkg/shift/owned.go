package shift

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"

	"github.com/danki-dev/danki/pkg/wellknown"
)

// The routes danki adds to a VirtualService (header and mirror routes,
// warm-up mirror copies) and how danki knows a route is one of them.
//
// Headers. Every route danki adds carries the headers block (request and
// response manipulation) of the primary route it sits above, and danki adds
// the removal of the warm-up marker header (wellknown.MarkerHeader)
// itself: warm-up requests carry it and applications roll back their
// writes, so no request from outside may keep it, whichever route Envoy
// picks.
//
// Ownership. Route names come from the Rollout and state from annotations
// on the VirtualService, both writable by the tenant; neither proves that a
// route is danki's. danki deletes, replaces, reorders or reweighs an added
// route only when its content is what danki builds: a route that merely
// has a listed or danki-like name stays untouched.

// markerHeader is the header every warm-up request carries.
const markerHeader = wellknown.MarkerHeader

// isMarker reports whether a header name is the marker (header names are
// case-insensitive).
func isMarker(name string) bool { return strings.EqualFold(name, markerHeader) }

// stripsMarker reports whether a headers block removes the marker header
// from requests.
func stripsMarker(h *networking.Headers) bool {
	return slices.ContainsFunc(h.GetRequest().GetRemove(), isMarker)
}

// addedHeaders is the headers block of a route danki adds above primary:
// the primary's request and response manipulation, never setting the
// marker, and removing it.
func addedHeaders(primary *networking.HTTPRoute) *networking.Headers {
	h := &networking.Headers{}
	if ph := primary.GetHeaders(); ph != nil {
		h = proto.Clone(ph).(*networking.Headers)
	}
	if h.Request == nil {
		h.Request = &networking.Headers_HeaderOperations{}
	}
	for name := range h.Request.Set {
		if isMarker(name) {
			delete(h.Request.Set, name)
		}
	}
	for name := range h.Request.Add {
		if isMarker(name) {
			delete(h.Request.Add, name)
		}
	}
	if !stripsMarker(h) {
		h.Request.Remove = append(h.Request.Remove, markerHeader)
	}
	return h
}

// ownHeaders reports whether a route's headers block can be one danki
// built: none (danki before it copied the primary's headers) or one that
// strips the marker.
func ownHeaders(r *networking.HTTPRoute) bool {
	return r.GetHeaders() == nil || stripsMarker(r.GetHeaders())
}

// onlyFields reports whether msg has no field set but the named ones.
func onlyFields(msg proto.Message, keep ...string) bool {
	only := true
	msg.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(keep, string(fd.Name())) {
			only = false
		}
		return only
	})
	return only
}

// isOwnHeaderRoute reports whether r is a header route as SetHeaderRoute
// builds it: a name, alternatives matching one header each, every request
// to the canary, the headers block, nothing else.
func isOwnHeaderRoute(r *networking.HTTPRoute, m *matcher) bool {
	if !onlyFields(r, "name", "match", "route", "headers") || !ownHeaders(r) || len(r.GetMatch()) == 0 || len(r.GetRoute()) != 1 {
		return false
	}
	for _, mr := range r.GetMatch() {
		if len(mr.GetHeaders()) != 1 || !onlyFields(mr, "headers") {
			return false
		}
	}
	d := r.GetRoute()[0]
	ro, _ := m.classify(d.GetDestination())
	return ro == roleCanary && d.GetWeight() == 100 && onlyFields(d, "destination", "weight")
}

// isOwnMirrorRoute reports whether r is a mirror route as SetMirrorRoute
// builds it: a name, alternatives matching method, path and headers only,
// the stable/canary split (the primary route's destinations), a mirror to
// the canary, the headers block, nothing else.
func isOwnMirrorRoute(r *networking.HTTPRoute, m *matcher, primary *networking.HTTPRoute) bool {
	if !onlyFields(r, "name", "match", "route", "mirror", "mirror_percentage", "headers") || !ownHeaders(r) || len(r.GetMatch()) == 0 {
		return false
	}
	if ro, _ := m.classify(r.GetMirror()); ro != roleCanary {
		return false
	}
	for _, mr := range r.GetMatch() {
		if !onlyFields(mr, "method", "uri", "headers") {
			return false
		}
	}
	var stable, canary bool
	for _, d := range r.GetRoute() {
		ro, _ := m.classify(d.GetDestination())
		switch ro {
		case roleStable:
			stable = true
		case roleCanary:
			canary = true
		case roleForeign:
			// Only a destination of the primary route it was copied from.
			if !slices.ContainsFunc(primary.GetRoute(), func(p *networking.HTTPRouteDestination) bool {
				return proto.Equal(p.GetDestination(), d.GetDestination())
			}) {
				return false
			}
		}
	}
	return stable && canary
}

// isOwnManagedRoute reports whether r is a header or mirror route danki
// built.
func isOwnManagedRoute(r *networking.HTTPRoute, m *matcher, primary *networking.HTTPRoute) bool {
	return isOwnHeaderRoute(r, m) || isOwnMirrorRoute(r, m, primary)
}

// hasMirrorRouteName reports whether a name has the form danki gives its
// warm-up mirror copies: mirrorRouteName or mirrorRouteName-N.
func hasMirrorRouteName(name string) bool {
	if name == mirrorRouteName {
		return true
	}
	n, ok := strings.CutPrefix(name, mirrorRouteName+"-")
	return ok && n != "" && strings.Trim(n, "0123456789") == "" && n[0] != '0'
}

// isOwnWarmupCopy reports whether r is a warm-up mirror copy as addMirror
// builds it from one of the primaries: danki's name, the primary's
// destinations (whatever their weights), its match alternatives each
// limited to a method, its headers (with the marker strip), its mirrors
// plus one to the canary, and every other field the primary's.
func isOwnWarmupCopy(r *networking.HTTPRoute, m *matcher, primaries []*networking.HTTPRoute) bool {
	if !hasMirrorRouteName(r.GetName()) || r.GetMirror() != nil {
		return false
	}
	canaryMirror := func(p *networking.HTTPMirrorPolicy) bool {
		ro, _ := m.classify(p.GetDestination())
		return ro == roleCanary
	}
	if !slices.ContainsFunc(r.GetMirrors(), canaryMirror) {
		return false
	}
	for _, p := range primaries {
		if hasMirrorRouteName(p.GetName()) {
			continue
		}
		if copiedFrom(r, p, canaryMirror) {
			return true
		}
	}
	return false
}

// copiedFrom is isOwnWarmupCopy's comparison with one primary route.
func copiedFrom(r, p *networking.HTTPRoute, canaryMirror func(*networking.HTTPMirrorPolicy) bool) bool {
	// Destinations: the same, in order; weights may have moved since.
	if len(r.GetRoute()) != len(p.GetRoute()) {
		return false
	}
	for i, d := range r.GetRoute() {
		a, b := proto.Clone(d).(*networking.HTTPRouteDestination), proto.Clone(p.GetRoute()[i]).(*networking.HTTPRouteDestination)
		a.Weight, b.Weight = 0, 0
		if !proto.Equal(a, b) {
			return false
		}
	}
	// Mirrors: the primary's, and danki's to the canary.
	if !slices.EqualFunc(slices.DeleteFunc(slices.Clone(r.GetMirrors()), canaryMirror), slices.DeleteFunc(slices.Clone(p.GetMirrors()), canaryMirror), func(a, b *networking.HTTPMirrorPolicy) bool { return proto.Equal(a, b) }) {
		return false
	}
	// Matches: each an alternative of the primary's, limited to a method.
	pm := p.GetMatch()
	if len(pm) == 0 {
		pm = []*networking.HTTPMatchRequest{{}}
	}
	if len(r.GetMatch()) == 0 {
		return false
	}
	for _, rm := range r.GetMatch() {
		if rm.GetMethod() == nil {
			return false
		}
		a := proto.Clone(rm).(*networking.HTTPMatchRequest)
		a.Method = nil
		if !slices.ContainsFunc(pm, func(x *networking.HTTPMatchRequest) bool {
			b := proto.Clone(x).(*networking.HTTPMatchRequest)
			b.Method = nil
			return proto.Equal(a, b) && (x.GetMethod() == nil || proto.Equal(x.GetMethod(), rm.GetMethod()))
		}) {
			return false
		}
	}
	// Headers: the primary's, with the marker strip (or as they were
	// before danki added it).
	if !proto.Equal(r.GetHeaders(), addedHeaders(p)) && !proto.Equal(r.GetHeaders(), p.GetHeaders()) {
		return false
	}
	// Everything else: the primary's.
	a, b := proto.Clone(r).(*networking.HTTPRoute), proto.Clone(p).(*networking.HTTPRoute)
	for _, c := range []*networking.HTTPRoute{a, b} {
		c.Name, c.Match, c.Route, c.Mirrors, c.Headers = "", nil, nil, nil, nil
	}
	return proto.Equal(a, b)
}
