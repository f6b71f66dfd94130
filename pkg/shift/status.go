package shift

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/danki-dev/danki/pkg/wellknown"
)

// Status is what Get found on a VirtualService.
type Status struct {
	// Routes lists every route of the VirtualService, http first.
	Routes []RouteStatus
	// CanaryWeight is the managed routes' lowest canary weight; -1 when the
	// roles are unknown (no hosts/subsets given) or no route is managed.
	CanaryWeight int
	// Ramp is the ramp state kept on the VirtualService, if any.
	Ramp *State
	// RampProblem says why the kept ramp state cannot be used: unreadable
	// (Ramp is nil) or inconsistent. The next ramp move restarts from the
	// current weight (an unreadable one must be deleted first); weight 0
	// always works.
	RampProblem string
	// Problem explains why no route is managed, when the Target had roles
	// but they did not fit the VirtualService.
	Problem string
}

// RouteStatus is one route.
type RouteStatus struct {
	Kind  string // KindHTTP, KindTLS or KindTCP
	Index int
	Name  string
	// Managed is "primary" (weights managed), "mirror" or "header" (a
	// managed route) or "" (not danki's).
	Managed      string
	Destinations []DestinationStatus
}

// DestinationStatus is one weighted destination.
type DestinationStatus struct {
	Host   string
	Subset string
	Port   uint32
	Weight int
	// Role is "stable", "canary", "extra", "other", or "" when unknown.
	Role string
}

// Get reads the routes, destinations and weights of t's VirtualService. The
// roles (stable/canary) and managed routes are filled in when t names hosts
// or subsets; only the namespace and name are required.
func (s *Shifter) Get(ctx context.Context, t Target) (*Status, error) {
	vs, err := s.getVS(ctx, t)
	if err != nil {
		return nil, err
	}
	st := &Status{CanaryWeight: -1}
	// Show the routes whatever the annotation holds: `shift get` is how
	// one finds out what is wrong.
	if st.Ramp, err = parseState(vs.Annotations[wellknown.RampAnnotation]); err != nil {
		st.RampProblem = err.Error()
	} else if st.Ramp != nil {
		// Get does not know the plan: accept increment 0 (a ladder's).
		if err := st.Ramp.Check(true, time.Now()); err != nil {
			st.RampProblem = fmt.Sprintf("annotation %s is inconsistent: %v", wellknown.RampAnnotation, err)
		}
	}
	var (
		m       *matcher
		primary []routeRef
		mirrors []routeRef
	)
	if t.StableHost != "" || t.CanaryHost != "" || t.Subsets != nil {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if m, err = s.matcher(ctx, t); err != nil {
			return nil, err
		}
		stale, err := staleExtras(vs)
		if err != nil {
			return nil, err
		}
		m = m.withExtras(stale, nil) // extras danki added count as extras here
		if primary, err = primaryRoutes(&vs.Spec, t, m); err != nil {
			st.Problem = err.Error()
		}
		mirrors = mirrorRoutes(&vs.Spec, t, m)
	}
	for _, ref := range allRoutes(&vs.Spec) {
		rs := RouteStatus{Kind: ref.kind, Index: ref.index, Name: ref.name}
		switch {
		case slices.Contains(primary, ref):
			rs.Managed = "primary"
			c, _ := routeWeights(&vs.Spec, ref, m)
			if st.CanaryWeight < 0 || c < st.CanaryWeight {
				st.CanaryWeight = c
			}
		case slices.Contains(mirrors, ref):
			rs.Managed = "mirror"
		case ref.kind == KindHTTP && ref.name != "" && slices.Contains(t.ManagedRoutes, ref.name):
			rs.Managed = "header"
			if r := vs.Spec.Http[ref.index]; r.GetMirror() != nil || len(r.GetMirrors()) > 0 {
				rs.Managed = "mirror"
			}
		}
		dests := destinations(&vs.Spec, ref)
		for _, d := range dests {
			ds := DestinationStatus{Host: d.dest.GetHost(), Subset: d.dest.GetSubset(), Port: d.dest.GetPort().GetNumber(), Weight: int(d.weight)}
			if len(dests) == 1 {
				// Istio sends all of a route's traffic to its only
				// destination, whatever (or whether) its weight is written.
				ds.Weight = 100
			}
			if m != nil {
				ro, _ := m.classify(d.dest)
				ds.Role = ro.String()
			}
			rs.Destinations = append(rs.Destinations, ds)
		}
		st.Routes = append(st.Routes, rs)
	}
	return st, nil
}
