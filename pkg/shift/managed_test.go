package shift

import (
	"errors"
	"slices"
	"testing"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func httpNames(spec *networking.VirtualService) []string {
	var out []string
	for _, r := range spec.Http {
		out = append(out, r.GetName())
	}
	return out
}

func managedTarget(order ...string) Target {
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	tg.ManagedRoutes = order
	return tg
}

func TestHeaderAndMirrorRoutesAddFollowWeightsAndRemoveCleanly(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	tg := managedTarget("header-canary", "mirror-canary")

	if err := s.SetWeight(ctx, tg, 10); err != nil {
		t.Fatal(err)
	}
	pct := 50
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Percentage: &pct, Match: []RequestMatch{{
		Method: &StringMatch{Exact: "GET"}, Path: &StringMatch{Prefix: "/api"}, Headers: map[string]StringMatch{"x-user": {Regex: "^qa-.*"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{
		{Header: "x-canary", Value: StringMatch{Exact: "yes"}}, {Header: "x-beta", Value: StringMatch{Prefix: "1"}},
	}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	// Managed routes sit just above the primary route, in managed order;
	// the foreign "health" route above it stays first.
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"health", "header-canary", "mirror-canary", "primary", "ratings"}) {
		t.Fatalf("http routes %v", names)
	}
	header := got.Spec.Http[1]
	wantHeader := &networking.HTTPRoute{
		Name: "header-canary",
		Match: []*networking.HTTPMatchRequest{
			{Headers: map[string]*networking.StringMatch{"x-canary": {MatchType: &networking.StringMatch_Exact{Exact: "yes"}}}},
			{Headers: map[string]*networking.StringMatch{"x-beta": prefix("1")}},
		},
		Route: []*networking.HTTPRouteDestination{dest("reviews-canary", 8080, 100)},
		// The primary route's headers, and the warm-up marker's removal.
		Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{Set: map[string]string{"x-via": "danki-test"}, Remove: []string{"X-Danki-Warmup"}}},
	}
	assertSpec(t, wantHeader, header)
	wantMirror := &networking.HTTPRoute{
		Name: "mirror-canary",
		Match: []*networking.HTTPMatchRequest{{
			Method:  &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "GET"}},
			Uri:     prefix("/api"),
			Headers: map[string]*networking.StringMatch{"x-user": {MatchType: &networking.StringMatch_Regex{Regex: "^qa-.*"}}},
		}},
		Route:            []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 90), dest("reviews-canary", 8080, 10)},
		Mirror:           &networking.Destination{Host: "reviews-canary", Port: &networking.PortSelector{Number: 8080}},
		MirrorPercentage: &networking.Percent{Value: 50},
		Headers:          wantHeader.Headers,
	}
	assertSpec(t, wantMirror, got.Spec.Http[2])

	// A weight change moves the mirror route's weights with the primary
	// route's; the header route stays all-canary.
	if err := s.SetWeight(ctx, tg, 40); err != nil {
		t.Fatal(err)
	}
	got = readVS(t, s, "reviews")
	if w := got.Spec.Http[2].Route; w[0].Weight != 60 || w[1].Weight != 40 {
		t.Fatalf("mirror route weights %d/%d, want 60/40", w[0].Weight, w[1].Weight)
	}
	assertSpec(t, wantHeader, got.Spec.Http[1])

	// Setting a route again replaces it (no duplicates).
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "always"}}}}); err != nil {
		t.Fatal(err)
	}
	if names := httpNames(&readVS(t, s, "reviews").Spec); !slices.Equal(names, []string{"health", "header-canary", "mirror-canary", "primary", "ratings"}) {
		t.Fatalf("after replacing the header route: %v", names)
	}

	// No match removes one route; RemoveManagedRoutes removes the rest.
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary"}); err != nil {
		t.Fatal(err)
	}
	if names := httpNames(&readVS(t, s, "reviews").Spec); !slices.Equal(names, []string{"health", "mirror-canary", "primary", "ratings"}) {
		t.Fatalf("after removing the header route: %v", names)
	}
	if err := s.RemoveManagedRoutes(ctx, tg); err != nil {
		t.Fatal(err)
	}
	want := withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 40})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

func TestManagedRoutesFollowManagedOrder(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	tg := managedTarget("mirror-canary", "header-canary")
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Match: []RequestMatch{{Path: &StringMatch{Prefix: "/"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"health", "mirror-canary", "header-canary", "primary", "ratings"}) {
		t.Fatalf("http routes %v, want mirror above header (managedRoutes order)", names)
	}
	if p := got.Spec.Http[1].MirrorPercentage.GetValue(); p != 100 {
		t.Fatalf("default mirror percentage %v, want 100", p)
	}
}

func TestHeaderRouteSubsetLevelAndUnnamedPrimary(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	tg := subsetTarget()
	tg.ManagedRoutes = []string{"canary-by-header"}
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "canary-by-header", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "1"}}}}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"ratings", "canary-by-header", "primary"}) {
		t.Fatalf("http routes %v", names)
	}
	assertSpec(t, &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: "reviews", Subset: "canary", Port: &networking.PortSelector{Number: 8080}}, Weight: 100}, got.Spec.Http[1].Route[0])
	// With the header route present, unnamed selection still finds only
	// the primary route, and weights leave the header route alone.
	if err := s.SetWeight(ctx, tg, 30); err != nil {
		t.Fatal(err)
	}
	got = readVS(t, s, "reviews")
	if r := got.Spec.Http[2].Route; r[0].Weight != 70 || r[1].Weight != 30 {
		t.Fatalf("primary weights %d/%d", r[0].Weight, r[1].Weight)
	}
	if got.Spec.Http[1].Route[0].Weight != 100 {
		t.Fatal("header route weight changed")
	}
}

func TestManagedRouteErrors(t *testing.T) {
	tlsOnly := hostSpec()
	tlsOnly.Http = nil
	cases := []struct {
		name string
		objs []runtime.Object
		run  func(s *Shifter) error
		want []string
	}{
		{"header route not in managedRoutes", []runtime.Object{virtualService("reviews", hostSpec())}, func(s *Shifter) error {
			return s.SetHeaderRoute(ctx, managedTarget("other"), HeaderRoute{Name: "hdr", Match: []HeaderMatch{{Header: "x", Value: StringMatch{Exact: "1"}}}})
		}, []string{`header route "hdr": not listed in the managed routes [other]`}},
		{"header match with two kinds", []runtime.Object{virtualService("reviews", hostSpec())}, func(s *Shifter) error {
			return s.SetHeaderRoute(ctx, managedTarget("hdr"), HeaderRoute{Name: "hdr", Match: []HeaderMatch{{Header: "x", Value: StringMatch{Exact: "1", Prefix: "2"}}}})
		}, []string{"match[0].headerValue: set exactly one of exact, prefix or regex"}},
		{"header match without a header name", []runtime.Object{virtualService("reviews", hostSpec())}, func(s *Shifter) error {
			return s.SetHeaderRoute(ctx, managedTarget("hdr"), HeaderRoute{Name: "hdr", Match: []HeaderMatch{{Value: StringMatch{Exact: "1"}}}})
		}, []string{"match[0].headerName: required"}},
		{"mirror percentage out of range", []runtime.Object{virtualService("reviews", hostSpec())}, func(s *Shifter) error {
			p := 101
			return s.SetMirrorRoute(ctx, managedTarget("m"), MirrorRoute{Name: "m", Percentage: &p, Match: []RequestMatch{{}}})
		}, []string{`mirror route "m": percentage 101`}},
		{"mirror path match empty", []runtime.Object{virtualService("reviews", hostSpec())}, func(s *Shifter) error {
			return s.SetMirrorRoute(ctx, managedTarget("m"), MirrorRoute{Name: "m", Match: []RequestMatch{{Path: &StringMatch{}}}})
		}, []string{"match[0].path: set exactly one of"}},
		{"no primary http route", []runtime.Object{virtualService("reviews", tlsOnly)}, func(s *Shifter) error {
			tg := hostTarget()
			tg.ManagedRoutes = []string{"hdr"}
			return s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "hdr", Match: []HeaderMatch{{Header: "x", Value: StringMatch{Exact: "1"}}}})
		}, []string{`managed route "hdr": needs a primary http route`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, cs := newFake(t, c.objs...)
			assertErr(t, c.run(s), c.want...)
			noWrites(t, cs)
		})
	}
}

func TestRemoveManagedRoutesToleratesMissingVirtualService(t *testing.T) {
	s, _ := newFake(t)
	if err := s.RemoveManagedRoutes(ctx, managedTarget("hdr")); err != nil {
		t.Fatalf("RemoveManagedRoutes on a missing VirtualService: %v", err)
	}
}

func TestUpdateHashesKeepsSubsetsInStepWithReplicaSets(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	tg := subsetTarget()
	if err := s.UpdateHashes(ctx, tg, "c4n4ry", "st4ble", ExtraSubset{Name: "exp", Hash: "e1"}); err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(&destinationRule().Spec).(*networking.DestinationRule)
	want.Subsets[0].Labels[PodTemplateHashLabel] = "st4ble"
	want.Subsets[1].Labels[PodTemplateHashLabel] = "c4n4ry"
	want.Subsets = append(want.Subsets, &networking.Subset{Name: "exp", Labels: map[string]string{PodTemplateHashLabel: "e1"}})
	dr := readDR(t, s)
	assertSpec(t, want, &dr.Spec)
	if dr.Annotations[wellknown.ExtraSubsetsAnnotation] != `["exp"]` {
		t.Fatalf("%s = %q", wellknown.ExtraSubsetsAnnotation, dr.Annotations[wellknown.ExtraSubsetsAnnotation])
	}

	// Experiment over, canary promoted: the added subset goes, the foreign
	// "legacy" subset and the traffic policy stay, an empty hash drops the
	// label.
	if err := s.UpdateHashes(ctx, tg, "", "c4n4ry"); err != nil {
		t.Fatal(err)
	}
	want = proto.Clone(&destinationRule().Spec).(*networking.DestinationRule)
	want.Subsets[0].Labels[PodTemplateHashLabel] = "c4n4ry"
	dr = readDR(t, s)
	assertSpec(t, want, &dr.Spec)
	if _, ok := dr.Annotations[wellknown.ExtraSubsetsAnnotation]; ok {
		t.Fatal("extra-subsets annotation left behind")
	}
	// Host-level routing has no subsets to update.
	if err := s.UpdateHashes(ctx, hostTarget(), "a", "b"); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateHashesErrors(t *testing.T) {
	tg := subsetTarget()
	tg.Subsets.CanarySubset = "v2"
	s, cs := newFake(t, destinationRule())
	assertErr(t, s.UpdateHashes(ctx, tg, "a", "b"), `DestinationRule shop/reviews: spec.subsets has no subset named "v2" (the canary subset)`)
	noWrites(t, cs)
	s, _ = newFake(t)
	assertErr(t, s.UpdateHashes(ctx, subsetTarget(), "a", "b"), "DestinationRule shop/reviews not found")
	s, _ = newFake(t, destinationRule())
	assertErr(t, s.UpdateHashes(ctx, subsetTarget(), "a", "b", ExtraSubset{Name: "canary"}), `additional subsets[0] "canary": is the stable or canary subset itself`)
}

func TestUpdateHashesRetriesConflicts(t *testing.T) {
	s, cs := newFake(t, destinationRule())
	updates := 0
	cs.PrependReactor("update", "destinationrules", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates == 1 {
			return true, nil, apierrors.NewConflict(networkingv1.SchemeGroupVersion.WithResource("destinationrules").GroupResource(), "reviews", errors.New("modified"))
		}
		return false, nil, nil
	})
	if err := s.UpdateHashes(ctx, subsetTarget(), "c", "s"); err != nil {
		t.Fatal(err)
	}
	if dr := readDR(t, s); updates != 2 || dr.Spec.Subsets[1].Labels[PodTemplateHashLabel] != "c" {
		t.Fatalf("%d updates, canary label %q", updates, dr.Spec.Subsets[1].Labels[PodTemplateHashLabel])
	}
}
