package shift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
)

// mirrorRouteName names the route added above a primary http route when
// the mirror is limited to some methods.
const mirrorRouteName = "danki-warmup-mirror"

// WarmupMirror copies a share of the managed routes' requests to the canary
// (Envoy's request mirroring: the user gets the routed answer, the copy's
// answer is dropped) so a cold canary warms on the real request mix while
// its weight is still 0.
type WarmupMirror struct {
	// Percent of the requests to mirror, >0 and ≤100 (fractions allowed).
	Percent float64
	// Methods, if set, mirrors only requests with these methods (e.g. GET,
	// HEAD): a copy of each primary http route, restricted to them, is
	// added above it. Empty: the primary routes themselves mirror every
	// request.
	Methods []string
}

// MirrorState is what the warm-up mirror added, kept in wellknown.MirrorAnnotation.
type MirrorState struct {
	Percent float64  `json:"percent"`
	Methods []string `json:"methods,omitempty"`
	// Destination is the canary destination the mirror sends to.
	Destination MirrorDestination `json:"destination"`
	// Added lists the http routes danki added (Methods set). It is for
	// people and tools reading the state: removal never trusts it (the
	// VirtualService's owner can write it) and judges the routes instead.
	Added []string `json:"added,omitempty"`
}

// MirrorDestination is the mirror's destination as kept in MirrorState.
type MirrorDestination struct {
	Host   string `json:"host"`
	Subset string `json:"subset,omitempty"`
}

// ParseMirrorState reads wellknown.MirrorAnnotation's value; nil for none.
func ParseMirrorState(raw string) (*MirrorState, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var st MirrorState
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: delete the annotation and any mirrors to the canary on the managed routes", wellknown.MirrorAnnotation, err)
	}
	return &st, nil
}

// validate checks a mirror request before anything is read.
func (w WarmupMirror) validate() error {
	if w.Percent <= 0 || w.Percent > 100 {
		return fmt.Errorf("mirror percent %g: must be above 0 and at most 100", w.Percent)
	}
	for i, m := range w.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " |") {
			return fmt.Errorf("mirror methods[%d] %q: write an HTTP method in capitals, e.g. GET", i, m)
		}
	}
	return nil
}

// SetWarmupMirror mirrors w.Percent % of the managed http routes' requests
// to the canary, or changes the percentage of the mirror already there; in
// one Update with the state in wellknown.MirrorAnnotation. Weights are not touched;
// foreign routes are not touched. A primary route that already has its own
// single mirror (spec.http[].mirror) is refused: Istio allows mirror or
// mirrors on a route, not both.
func (s *Shifter) SetWarmupMirror(ctx context.Context, t Target, w WarmupMirror) error {
	if err := w.validate(); err != nil {
		return fmt.Errorf("set warm-up mirror on VirtualService %s: %w", t, err)
	}
	_, err := s.update(ctx, t, fmt.Sprintf("set warm-up mirror to %g%%", w.Percent), func(vs *networkingv1.VirtualService) error {
		m, err := s.matcher(ctx, t)
		if err != nil {
			return err
		}
		// The previous state (if any) is replaced; what to strip is judged
		// by the routes, not by it.
		if _, kept := stripMirror(vs, t, m); len(kept) > 0 && len(w.Methods) > 0 {
			i := slices.IndexFunc(vs.Spec.Http, func(r *networking.HTTPRoute) bool { return r.GetName() == kept[0] })
			return fmt.Errorf("spec.http[%d] (%q): has the name danki gives its warm-up mirror routes (%s, %s-1, ...) but is not one danki built: rename that route", i, kept[0], mirrorRouteName, mirrorRouteName)
		}
		st, err := addMirror(vs, t, m, w)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(st)
		setAnnotation(&vs.ObjectMeta, wellknown.MirrorAnnotation, string(b))
		return nil
	})
	if err == nil {
		s.log.Info("set warm-up mirror", "virtualService", t.String(), "percent", w.Percent, "methods", w.Methods)
	}
	return err
}

// RemoveWarmupMirror removes the warm-up mirror and its annotation. It is
// idempotent (nothing to remove writes nothing, a missing VirtualService
// has nothing to remove) and works from the routes, not the annotation
// (which the VirtualService's owner can write): it removes the mirrors to
// the canary on the managed routes and the routes that are provably
// danki's warm-up mirror copies (danki's name and a copy's content, see
// isOwnWarmupCopy), whatever the annotation lists, and nothing else. It
// reports whether there was a mirror.
func (s *Shifter) RemoveWarmupMirror(ctx context.Context, t Target) (bool, error) {
	var had bool
	_, err := s.update(ctx, t, "remove warm-up mirror", func(vs *networkingv1.VirtualService) error {
		m, err := s.matcher(ctx, t)
		if err != nil {
			return err
		}
		_, annotated := vs.Annotations[wellknown.MirrorAnnotation]
		removed, kept := stripMirror(vs, t, m)
		had = removed || annotated
		for _, name := range kept {
			s.log.Warn("a route has the name of danki's warm-up mirror route but is not one danki built: left as it is", "virtualService", t.String(), "route", name)
		}
		setAnnotation(&vs.ObjectMeta, wellknown.MirrorAnnotation, "")
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err == nil && had {
		s.log.Info("removed warm-up mirror", "virtualService", t.String())
	}
	return had, err
}

// WarmupMirrorState reads the warm-up mirror's state (nil: none).
func (s *Shifter) WarmupMirrorState(ctx context.Context, t Target) (*MirrorState, error) {
	vs, err := s.getVS(ctx, t)
	if err != nil {
		return nil, err
	}
	return ParseMirrorState(vs.Annotations[wellknown.MirrorAnnotation])
}

// stripMirror removes danki's warm-up mirror copies (isOwnWarmupCopy: the
// annotation's word is not enough) and the mirrors to the canary on the
// primary http routes. It reports whether anything was removed, and the
// routes it left that have a copy's name but not its content.
func stripMirror(vs *networkingv1.VirtualService, t Target, m *matcher) (removed bool, kept []string) {
	stale, _ := staleExtras(vs)
	m = m.withExtras(nil, stale)
	var primaries []*networking.HTTPRoute
	if routes, err := primaryRoutes(&vs.Spec, t, m); err == nil {
		for _, ref := range routes {
			if ref.kind == KindHTTP {
				primaries = append(primaries, vs.Spec.Http[ref.index])
			}
		}
	}
	before := len(vs.Spec.Http)
	vs.Spec.Http = slices.DeleteFunc(vs.Spec.Http, func(r *networking.HTTPRoute) bool {
		if !hasMirrorRouteName(r.GetName()) {
			return false
		}
		if !isOwnWarmupCopy(r, m, primaries) {
			kept = append(kept, r.GetName())
			return false
		}
		return true
	})
	removed = len(vs.Spec.Http) != before
	routes, err := primaryRoutes(&vs.Spec, t, m)
	if err != nil {
		return removed, kept
	}
	for _, ref := range routes {
		if ref.kind != KindHTTP || hasMirrorRouteName(ref.name) {
			continue
		}
		r := vs.Spec.Http[ref.index]
		n := len(r.Mirrors)
		r.Mirrors = slices.DeleteFunc(r.Mirrors, func(p *networking.HTTPMirrorPolicy) bool {
			ro, _ := m.classify(p.GetDestination())
			return ro == roleCanary
		})
		if len(r.Mirrors) == 0 {
			r.Mirrors = nil
		}
		removed = removed || len(r.Mirrors) != n
	}
	return removed, kept
}

// addMirror adds the mirror to every primary http route (or a
// method-restricted copy above each) and returns the state to keep.
func addMirror(vs *networkingv1.VirtualService, t Target, m *matcher, w WarmupMirror) (*MirrorState, error) {
	stale, err := staleExtras(vs)
	if err != nil {
		return nil, err
	}
	routes, err := primaryRoutes(&vs.Spec, t, m.withExtras(nil, stale))
	if err != nil {
		return nil, err
	}
	st := &MirrorState{Percent: w.Percent, Methods: slices.Clone(w.Methods)}
	var primaries []*networking.HTTPRoute
	var canary *networking.Destination
	for _, ref := range routes {
		if ref.kind != KindHTTP {
			continue
		}
		r := vs.Spec.Http[ref.index]
		if r.GetMirror() != nil {
			return nil, fmt.Errorf("%s: has its own mirror (mirror: %s): Istio allows mirror or mirrors on a route, not both; remove that mirror or move it to mirrors", ref.path(), r.GetMirror().GetHost())
		}
		for _, d := range r.GetRoute() {
			if ro, _ := m.classify(d.GetDestination()); ro == roleCanary && canary == nil {
				canary = proto.Clone(d.GetDestination()).(*networking.Destination)
			}
		}
		primaries = append(primaries, r)
	}
	if len(primaries) == 0 {
		return nil, errors.New("warm-up mirror: needs a managed http route (Envoy mirrors http requests only), but the managed routes are tls/tcp only")
	}
	if canary == nil {
		return nil, fmt.Errorf("warm-up mirror: no managed http route has a destination for the %s", m.roleField(roleCanary))
	}
	st.Destination = MirrorDestination{Host: canary.Host, Subset: canary.Subset}
	policy := func() *networking.HTTPMirrorPolicy {
		return &networking.HTTPMirrorPolicy{
			Destination: proto.Clone(canary).(*networking.Destination),
			Percentage:  &networking.Percent{Value: w.Percent},
		}
	}
	if len(w.Methods) == 0 {
		for _, r := range primaries {
			r.Mirrors = append(r.Mirrors, policy())
		}
		return st, nil
	}
	out := make([]*networking.HTTPRoute, 0, len(vs.Spec.Http)+len(primaries))
	for _, r := range vs.Spec.Http {
		if i := slices.Index(primaries, r); i >= 0 {
			name := mirrorRouteName
			if i > 0 {
				name = fmt.Sprintf("%s-%d", mirrorRouteName, i)
			}
			c := restrictToMethods(r, w.Methods)
			if c != nil {
				c.Name = name
				c.Headers = addedHeaders(r)
				c.Mirrors = append(c.Mirrors, policy())
				out = append(out, c)
				st.Added = append(st.Added, name)
			}
		}
		out = append(out, r)
	}
	vs.Spec.Http = out
	return st, nil
}

// restrictToMethods copies a route (timeouts, retries, headers and all;
// addMirror then adds the marker strip to the headers),
// keeping only requests with the given methods: each match alternative gets
// the method match, an alternative with a method of its own is kept only if
// that method is one of them. nil when no alternative is left.
func restrictToMethods(r *networking.HTTPRoute, methods []string) *networking.HTTPRoute {
	c := proto.Clone(r).(*networking.HTTPRoute)
	method := &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: methods[0]}}
	if len(methods) > 1 {
		method = &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: strings.Join(methods, "|")}}
	}
	if len(c.Match) == 0 {
		c.Match = []*networking.HTTPMatchRequest{{}}
	}
	var kept []*networking.HTTPMatchRequest
	for _, m := range c.Match {
		if m.Method != nil {
			if ex := m.Method.GetExact(); ex == "" || !slices.Contains(methods, ex) {
				continue // its own method match: keep only an exact one of ours
			}
			kept = append(kept, m)
			continue
		}
		m.Method = proto.Clone(method).(*networking.StringMatch)
		kept = append(kept, m)
	}
	if len(kept) == 0 {
		return nil
	}
	c.Match = kept
	return c
}
