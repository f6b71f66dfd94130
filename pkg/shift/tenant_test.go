package shift

import (
	"slices"
	"testing"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
)

// Tests of the tenant boundary: whoever writes the Rollout, the
// VirtualService's annotations or its routes must not be able to use danki
// to send the warm-up marker through the gateway or to delete routes that
// are not danki's.

// routeNamed returns the http route of that name (nil if none).
func routeNamed(spec *networking.VirtualService, name string) *networking.HTTPRoute {
	for _, r := range spec.Http {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

// withoutRoutes is spec without the http routes of these names.
func withoutRoutes(spec *networking.VirtualService, names ...string) *networking.VirtualService {
	c := proto.Clone(spec).(*networking.VirtualService)
	c.Http = slices.DeleteFunc(c.Http, func(r *networking.HTTPRoute) bool { return slices.Contains(names, r.GetName()) })
	return c
}

// primaryHeaders is request and response manipulation on the primary route
// that the routes danki adds above it must keep.
func primaryHeaders() *networking.Headers {
	return &networking.Headers{
		Request: &networking.Headers_HeaderOperations{
			Set:    map[string]string{"x-via": "gateway"},
			Add:    map[string]string{"x-team": "reviews"},
			Remove: []string{"x-internal-token"},
		},
		Response: &networking.Headers_HeaderOperations{
			Set:    map[string]string{"cache-control": "no-store"},
			Remove: []string{"server"},
		},
	}
}

// withMarkerStrip is h with the marker header's removal added.
func withMarkerStrip(h *networking.Headers) *networking.Headers {
	c := proto.Clone(h).(*networking.Headers)
	if c == nil {
		c = &networking.Headers{}
	}
	if c.Request == nil {
		c.Request = &networking.Headers_HeaderOperations{}
	}
	c.Request.Remove = append(c.Request.Remove, "X-Danki-Warmup")
	return c
}

func TestManagedRoutesCarryThePrimaryHeadersAndStripTheMarker(t *testing.T) {
	spec := hostSpec()
	spec.Http[1].Headers = primaryHeaders()
	s, _ := newFake(t, virtualService("reviews", spec))
	tg := managedTarget("header-canary", "mirror-canary")
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Match: []RequestMatch{{Path: &StringMatch{Prefix: "/api"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	want := withMarkerStrip(primaryHeaders())
	for _, name := range []string{"header-canary", "mirror-canary"} {
		r := routeNamed(&got.Spec, name)
		if r == nil {
			t.Fatalf("no route %q: %v", name, httpNames(&got.Spec))
		}
		assertSpec(t, want, r.GetHeaders())
	}
	// The primary route and the foreign routes are untouched.
	assertSpec(t, spec, withoutRoutes(&got.Spec, "header-canary", "mirror-canary"))
}

func TestManagedRoutesStripTheMarkerWhenThePrimaryHasNoHeaders(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	tg := subsetTarget()
	tg.ManagedRoutes = []string{"canary-by-header"}
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "canary-by-header", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "1"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	assertSpec(t, &networking.Headers{Request: &networking.Headers_HeaderOperations{Remove: []string{"X-Danki-Warmup"}}}, routeNamed(&got.Spec, "canary-by-header").GetHeaders())
	assertSpec(t, subsetSpec(), withoutRoutes(&got.Spec, "canary-by-header"))
}

// A primary route that strips the marker already (in any letter case) is
// copied as it is: no second removal.
func TestManagedRoutesDoNotStripTheMarkerTwice(t *testing.T) {
	spec := hostSpec()
	spec.Http[1].Headers = &networking.Headers{Request: &networking.Headers_HeaderOperations{Remove: []string{"x-danki-warmup"}}}
	s, _ := newFake(t, virtualService("reviews", spec))
	tg := managedTarget("header-canary")
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	assertSpec(t, spec.Http[1].Headers, routeNamed(&got.Spec, "header-canary").GetHeaders())
}

func TestWarmupMirrorRouteStripsTheMarker(t *testing.T) {
	spec := hostSpec()
	spec.Http[1].Headers = primaryHeaders()
	s, _ := newFake(t, virtualService("reviews", spec))
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 10, Methods: []string{"GET"}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	r := routeNamed(&got.Spec, mirrorRouteName)
	if r == nil {
		t.Fatalf("no warm-up mirror route: %v", httpNames(&got.Spec))
	}
	assertSpec(t, withMarkerStrip(primaryHeaders()), r.GetHeaders())
	assertSpec(t, spec, withoutRoutes(&got.Spec, mirrorRouteName))
	if _, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, spec, &readVS(t, s, "reviews").Spec)
}

// paymentsRoute is another team's route on the same VirtualService.
func paymentsRoute(name string) *networking.HTTPRoute {
	return &networking.HTTPRoute{
		Name:  name,
		Match: []*networking.HTTPMatchRequest{{Uri: prefix("/payments")}},
		Route: []*networking.HTTPRouteDestination{dest("payments.billing.svc.cluster.local", 8080, 100)},
	}
}

// specWithPayments is hostSpec with foreign routes above the primary one.
func specWithPayments(names ...string) *networking.VirtualService {
	spec := hostSpec()
	var foreign []*networking.HTTPRoute
	for _, n := range names {
		foreign = append(foreign, paymentsRoute(n))
	}
	spec.Http = slices.Insert(spec.Http, 1, foreign...)
	return spec
}

// The mirror annotation is writable by the tenant: routes it names are not
// danki's for that, nor is a route that merely has the name danki gives
// its warm-up mirror routes.
func TestRemoveWarmupMirrorDeletesOnlyItsOwnRoutes(t *testing.T) {
	spec := specWithPayments("payments", mirrorRouteName+"-7")
	// Someone else's mirror on the primary route (an audit copy).
	spec.Http[3].Mirrors = []*networking.HTTPMirrorPolicy{{Destination: &networking.Destination{Host: "audit.security.svc.cluster.local"}, Percentage: &networking.Percent{Value: 1}}}
	vs := virtualService("reviews", spec)
	vs.Annotations[wellknown.MirrorAnnotation] = `{"percent":5,"destination":{"host":"audit.security.svc.cluster.local"},"added":["payments","ratings","health"]}`
	s, _ := newFake(t, vs)

	had, err := s.RemoveWarmupMirror(ctx, hostTarget())
	if err != nil {
		t.Fatal(err)
	}
	if !had {
		t.Fatal("an annotation was there: remove should report it")
	}
	got := readVS(t, s, "reviews")
	assertSpec(t, spec, &got.Spec)
	if _, ok := got.Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatal("annotation left behind")
	}
}

// Danki's own warm-up mirror route is still removed when the annotation
// lies about it, and after the weights moved.
func TestRemoveWarmupMirrorStillRemovesItsCopyAfterWeightsMoved(t *testing.T) {
	spec := specWithPayments("payments")
	s, cs := newFake(t, virtualService("reviews", spec))
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 10, Methods: []string{"GET", "HEAD"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWeight(ctx, hostTarget(), 20); err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	vs.Annotations[wellknown.MirrorAnnotation] = `{"percent":10,"added":["payments"]}`
	if _, err := cs.NetworkingV1().VirtualServices(ns).Update(ctx, vs, metav1UpdateOptions()); err != nil {
		t.Fatal(err)
	}
	if had, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil || !had {
		t.Fatalf("remove = %v, %v", had, err)
	}
	want := withWeights(spec, [4]any{KindHTTP, 2, 0, 80}, [4]any{KindHTTP, 2, 1, 20},
		[4]any{KindTLS, 0, 0, 80}, [4]any{KindTLS, 0, 1, 20}, [4]any{KindTCP, 0, 0, 80}, [4]any{KindTCP, 0, 1, 20})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

// A foreign route with the name danki's warm-up copy takes is refused, not
// replaced or doubled.
func TestSetWarmupMirrorRefusesAForeignRouteWithItsName(t *testing.T) {
	spec := specWithPayments(mirrorRouteName)
	s, cs := newFake(t, virtualService("reviews", spec))
	assertErr(t, s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 10, Methods: []string{"GET"}}), mirrorRouteName, "rename")
	noWrites(t, cs)
}

// Managed route names come from the Rollout (managedRoutes and its steps):
// naming another team's route there must not delete or replace it.
func TestRemoveManagedRoutesDeletesOnlyDankisRoutes(t *testing.T) {
	spec := specWithPayments("payments")
	s, _ := newFake(t, virtualService("reviews", spec))
	tg := managedTarget("header-canary", "mirror-canary", "payments")
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Match: []RequestMatch{{Path: &StringMatch{Prefix: "/api"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWeight(ctx, tg, 30); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveManagedRoutes(ctx, tg, "health", "ratings"); err != nil {
		t.Fatal(err)
	}
	want := withWeights(spec, [4]any{KindHTTP, 2, 0, 70}, [4]any{KindHTTP, 2, 1, 30})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

// Danki's header and mirror routes from before it copied the primary's
// headers (no headers block) are still danki's to remove.
func TestRemoveManagedRoutesRemovesRoutesFromBeforeTheHeaderCopy(t *testing.T) {
	spec := hostSpec()
	spec.Http = slices.Insert(spec.Http, 1,
		&networking.HTTPRoute{
			Name:  "header-canary",
			Match: []*networking.HTTPMatchRequest{{Headers: map[string]*networking.StringMatch{"x-canary": prefix("y")}}},
			Route: []*networking.HTTPRouteDestination{dest("reviews-canary", 8080, 100)},
		},
		&networking.HTTPRoute{
			Name:             "mirror-canary",
			Match:            []*networking.HTTPMatchRequest{{Uri: prefix("/api")}},
			Route:            []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 100), dest("reviews-canary", 8080, 0)},
			Mirror:           &networking.Destination{Host: "reviews-canary", Port: &networking.PortSelector{Number: 8080}},
			MirrorPercentage: &networking.Percent{Value: 100},
		})
	s, _ := newFake(t, virtualService("reviews", spec))
	if err := s.RemoveManagedRoutes(ctx, managedTarget("header-canary", "mirror-canary")); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, hostSpec(), &readVS(t, s, "reviews").Spec)
}

func TestSetManagedRouteRefusesToReplaceAForeignRoute(t *testing.T) {
	spec := specWithPayments("payments")
	tg := managedTarget("payments")
	for _, set := range []func(s *Shifter) error{
		func(s *Shifter) error {
			return s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "payments", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}})
		},
		func(s *Shifter) error {
			return s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "payments", Match: []RequestMatch{{Path: &StringMatch{Prefix: "/"}}}})
		},
	} {
		s, cs := newFake(t, virtualService("reviews", spec))
		assertErr(t, set(s), `"payments"`, "not a route danki built", "rename")
		noWrites(t, cs)
	}
	// Removing it (no match) leaves the foreign route alone.
	s, _ := newFake(t, virtualService("reviews", spec))
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "payments"}); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, spec, &readVS(t, s, "reviews").Spec)
}

// A foreign route named in managedRoutes is not moved above the primary
// route with danki's routes: it keeps its place.
func TestManagedRoutesLeaveAForeignRouteOfAListedNameInPlace(t *testing.T) {
	spec := hostSpec()
	spec.Http = append(spec.Http, paymentsRoute("payments"))
	s, _ := newFake(t, virtualService("reviews", spec))
	tg := managedTarget("payments", "header-canary")
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"health", "header-canary", "primary", "ratings", "payments"}) {
		t.Fatalf("http routes %v: the foreign route moved", names)
	}
	assertSpec(t, spec, withoutRoutes(&got.Spec, "header-canary"))
}

// Weights follow only danki's own mirror routes: another route named in
// managedRoutes that mirrors and holds both destinations keeps its weights.
func TestWeightsLeaveAForeignMirrorRouteOfAListedName(t *testing.T) {
	spec := hostSpec()
	spec.Http = append(spec.Http, &networking.HTTPRoute{
		Name:   "shadow",
		Match:  []*networking.HTTPMatchRequest{{Uri: prefix("/shadow")}},
		Route:  []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 50), dest("reviews-canary", 8080, 50)},
		Mirror: &networking.Destination{Host: "audit.security.svc.cluster.local"},
	})
	s, _ := newFake(t, virtualService("reviews", spec))
	if err := s.SetWeight(ctx, managedTarget("shadow"), 10); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, withWeights(spec, [4]any{KindHTTP, 1, 0, 90}, [4]any{KindHTTP, 1, 1, 10}), &readVS(t, s, "reviews").Spec)
}

// The extras annotation is the tenant's to write too: it must not make
// danki drop another namespace's destination from a managed route (danki
// adds experiment destinations in the VirtualService's namespace only).
func TestExtrasAnnotationCannotDropAForeignDestination(t *testing.T) {
	spec := hostSpec()
	spec.Http[1].Route = append(spec.Http[1].Route, dest("payments.billing.svc.cluster.local", 8080, 0))
	vs := virtualService("reviews", spec)
	vs.Annotations[wellknown.ExtrasAnnotation] = `[{"host":"payments.billing.svc.cluster.local"}]`
	s, cs := newFake(t, vs)
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	assertErr(t, s.SetWeight(ctx, tg, 20), `host "payments.billing.svc.cluster.local" is in neither role`)
	noWrites(t, cs)

	// An experiment destination danki added in the namespace is still
	// dropped once the experiment has ended.
	spec = hostSpec()
	spec.Http[1].Route = []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 80), dest("reviews-canary", 8080, 10), dest("reviews-exp", 8080, 10)}
	vs = virtualService("reviews", spec)
	vs.Annotations[wellknown.ExtrasAnnotation] = `[{"host":"reviews-exp"}]`
	s, _ = newFake(t, vs)
	if err := s.SetWeight(ctx, tg, 20); err != nil {
		t.Fatal(err)
	}
	if r := readVS(t, s, "reviews").Spec.Http[1].Route; len(r) != 2 || r[0].Weight != 80 || r[1].Weight != 20 {
		t.Fatalf("primary route %v: want the ended experiment's destination dropped, 80/20", r)
	}
}

// Without the DestinationRule danki cannot prove which routes are its own:
// RemoveManagedRoutes says so instead of removing by name, or reporting the
// VirtualService gone.
func TestRemoveManagedRoutesWithoutTheDestinationRule(t *testing.T) {
	spec := subsetSpec()
	spec.Http = append(spec.Http, paymentsRoute("payments"))
	s, cs := newFake(t, virtualService("reviews", spec))
	tg := subsetTarget()
	tg.ManagedRoutes = []string{"payments"}
	assertErr(t, s.RemoveManagedRoutes(ctx, tg), "DestinationRule shop/reviews not found", "tell its own routes")
	noWrites(t, cs)
}

// Without methods the warm-up mirror adds no copy: a foreign route of the
// copy's name is left alone and does not stop it.
func TestWarmupMirrorWithoutMethodsIgnoresARouteOfTheCopyName(t *testing.T) {
	spec := specWithPayments(mirrorRouteName)
	s, _ := newFake(t, virtualService("reviews", spec))
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, spec, &readVS(t, s, "reviews").Spec)
}
