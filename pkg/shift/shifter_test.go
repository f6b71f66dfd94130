package shift

import (
	"context"
	"errors"
	"testing"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

var ctx = context.Background()

// withWeights returns a copy of spec with the weights of the listed
// destinations replaced: kind, route index, destination index, weight.
func withWeights(spec *networking.VirtualService, changes ...[4]any) *networking.VirtualService {
	out := proto.Clone(spec).(*networking.VirtualService)
	for _, c := range changes {
		kind, ri, di, w := c[0].(string), c[1].(int), c[2].(int), int32(c[3].(int))
		switch kind {
		case KindHTTP:
			out.Http[ri].Route[di].Weight = w
		case KindTLS:
			out.Tls[ri].Route[di].Weight = w
		case KindTCP:
			out.Tcp[ri].Route[di].Weight = w
		}
	}
	return out
}

func TestSetWeightHostLevelNamedRoutesOfEveryKind(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	tg.TLSRoutes = []TLSRouteSelector{{Port: 443, SNIHosts: []string{"reviews.example.com"}}}
	tg.TCPRoutes = []TCPRouteSelector{{Port: 9000}}
	if err := s.SetWeight(ctx, tg, 30); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	want := withWeights(hostSpec(),
		[4]any{KindHTTP, 1, 0, 70}, [4]any{KindHTTP, 1, 1, 30},
		[4]any{KindTLS, 0, 0, 70}, [4]any{KindTLS, 0, 1, 30},
		[4]any{KindTCP, 0, 0, 70}, [4]any{KindTCP, 0, 1, 30})
	assertSpec(t, want, &got.Spec)
	if got.Annotations["owner"] != "team-a" || len(got.Annotations) != 1 {
		t.Fatalf("annotations = %v, want only the foreign owner=team-a", got.Annotations)
	}
}

func TestSetWeightNamedHTTPRouteLeavesOtherKindsAlone(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	if err := s.SetWeight(ctx, tg, 5); err != nil {
		t.Fatal(err)
	}
	want := withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 95}, [4]any{KindHTTP, 1, 1, 5})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

func TestSetWeightUnnamedManagesEveryRouteHoldingBoth(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	for _, w := range []int{25, 100, 0} {
		if err := s.SetWeight(ctx, hostTarget(), w); err != nil {
			t.Fatal(err)
		}
		want := withWeights(hostSpec(),
			[4]any{KindHTTP, 1, 0, 100 - w}, [4]any{KindHTTP, 1, 1, w},
			[4]any{KindTLS, 0, 0, 100 - w}, [4]any{KindTLS, 0, 1, w},
			[4]any{KindTCP, 0, 0, 100 - w}, [4]any{KindTCP, 0, 1, w})
		assertSpec(t, want, &readVS(t, s, "reviews").Spec)
	}
}

func TestSetWeightSubsetLevel(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	if err := s.SetWeight(ctx, subsetTarget(), 40); err != nil {
		t.Fatal(err)
	}
	want := withWeights(subsetSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 40})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
	// The DestinationRule is only read.
	assertSpec(t, &destinationRule().Spec, &readDR(t, s).Spec)
}

func TestAdditionalDestinationsSumTo100AndAreRemovedWhenDone(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	tg := hostTarget()
	tg.HTTPRoutes = []string{"primary"}
	if err := s.SetWeight(ctx, tg, 20, Extra{Host: "reviews-exp-a", Weight: 10}, Extra{Host: "reviews-exp-b", Weight: 15}); err != nil {
		t.Fatal(err)
	}
	got := readVS(t, s, "reviews")
	want := withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 55}, [4]any{KindHTTP, 1, 1, 20})
	want.Http[1].Route = append(want.Http[1].Route, dest("reviews-exp-a", 8080, 10), dest("reviews-exp-b", 8080, 15))
	assertSpec(t, want, &got.Spec)
	if got.Annotations[wellknown.ExtrasAnnotation] == "" {
		t.Fatalf("no %s annotation recording the added destinations", wellknown.ExtrasAnnotation)
	}
	sum := int32(0)
	for _, d := range got.Spec.Http[1].Route {
		sum += d.Weight
	}
	if sum != 100 {
		t.Fatalf("managed route weights sum to %d, want 100", sum)
	}

	// The experiment changes weight, then ends: its destinations go, and
	// only those.
	if err := s.SetWeight(ctx, tg, 20, Extra{Host: "reviews-exp-a", Weight: 30}); err != nil {
		t.Fatal(err)
	}
	want = withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 50}, [4]any{KindHTTP, 1, 1, 20})
	want.Http[1].Route = append(want.Http[1].Route, dest("reviews-exp-a", 8080, 30))
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)

	if err := s.SetWeight(ctx, tg, 20); err != nil {
		t.Fatal(err)
	}
	got = readVS(t, s, "reviews")
	assertSpec(t, withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 80}, [4]any{KindHTTP, 1, 1, 20}), &got.Spec)
	if _, ok := got.Annotations[wellknown.ExtrasAnnotation]; ok {
		t.Fatalf("%s annotation left behind: %v", wellknown.ExtrasAnnotation, got.Annotations)
	}
}

func TestAdditionalSubsetDestination(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	if err := s.SetWeight(ctx, subsetTarget(), 10, Extra{Subset: "exp", Weight: 20}); err != nil {
		t.Fatal(err)
	}
	want := withWeights(subsetSpec(), [4]any{KindHTTP, 1, 0, 70}, [4]any{KindHTTP, 1, 1, 10})
	want.Http[1].Route = append(want.Http[1].Route, subsetDest("reviews.shop.svc.cluster.local", "exp", 20))
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

// noWrites fails if the fake clientset saw any update.
func noWrites(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" || a.GetVerb() == "create" {
			t.Fatalf("a failed call wrote %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestValidationErrorsNameTheFieldAndWriteNothing(t *testing.T) {
	noCanary := hostSpec()
	noCanary.Http[1].Route = noCanary.Http[1].Route[:1]
	foreign := hostSpec()
	foreign.Http[1].Route = append(foreign.Http[1].Route, dest("payments", 8080, 0))
	twice := hostSpec()
	twice.Http[1].Route = append(twice.Http[1].Route, dest("reviews-canary.shop", 8081, 0))
	redirect := hostSpec()
	redirect.Http[1].Route = nil
	redirect.Http[1].Redirect = &networking.HTTPRedirect{Uri: "/moved"}
	named := func(routes ...string) Target { tg := hostTarget(); tg.HTTPRoutes = routes; return tg }
	cases := []struct {
		name   string
		objs   []runtime.Object
		target Target
		weight int
		extras []Extra
		want   []string
	}{
		{"missing VirtualService", nil, hostTarget(), 10, nil, []string{"VirtualService shop/reviews not found", "virtual service name"}},
		{"missing route", []runtime.Object{virtualService("reviews", hostSpec())}, named("primary", "nope"), 10, nil,
			[]string{`http route "nope"`, "spec.http has no route of that name", `"primary"`}},
		{"missing canary destination", []runtime.Object{virtualService("reviews", noCanary)}, named("primary"), 10, nil,
			[]string{`spec.http[1] ("primary")`, `no destination for the canary host "reviews-canary"`}},
		{"host in neither role", []runtime.Object{virtualService("reviews", foreign)}, named("primary"), 10, nil,
			[]string{`spec.http[1] ("primary").route[2].destination`, `host "payments" is in neither role`, `stable host "reviews-stable"`}},
		{"role twice", []runtime.Object{virtualService("reviews", twice)}, named("primary"), 10, nil,
			[]string{`spec.http[1] ("primary").route[2].destination`, "a second destination for the canary host"}},
		{"route without destinations", []runtime.Object{virtualService("reviews", redirect)}, named("primary"), 10, nil,
			[]string{`spec.http[1] ("primary"): has no route destinations`}},
		{"weights cannot sum to 100", []runtime.Object{virtualService("reviews", hostSpec())}, hostTarget(), 80, []Extra{{Host: "exp", Weight: 30}},
			[]string{"weights cannot sum to 100", "canary 80 + exp 30 = 110%"}},
		{"canary weight out of range", []runtime.Object{virtualService("reviews", hostSpec())}, hostTarget(), 120, nil, []string{"canary weight 120", "between 0 and 100"}},
		{"extra weight negative", []runtime.Object{virtualService("reviews", hostSpec())}, hostTarget(), 10, []Extra{{Host: "exp", Weight: -1}}, []string{"additional destinations[0] (exp).weight -1"}},
		{"extra is the canary", []runtime.Object{virtualService("reviews", hostSpec())}, hostTarget(), 10, []Extra{{Host: "reviews-canary", Weight: 5}}, []string{"additional destination reviews-canary", "canary destination itself"}},
		{"no route holds both", []runtime.Object{virtualService("reviews", hostSpec())}, Target{Namespace: ns, VirtualService: "reviews", StableHost: "reviews-stable", CanaryHost: "nobody"}, 10, nil,
			[]string{"no http, tls or tcp route holds both", `canary host "nobody"`}},
		{"tls selector matches nothing", []runtime.Object{virtualService("reviews", hostSpec())}, Target{Namespace: ns, VirtualService: "reviews", StableHost: "reviews-stable", CanaryHost: "reviews-canary", TLSRoutes: []TLSRouteSelector{{Port: 443, SNIHosts: []string{"other.example.com"}}}}, 10, nil,
			[]string{"tls routes[0] {port: 443, sniHosts: [other.example.com]}", "no spec.tls route"}},
		{"tcp selector matches nothing", []runtime.Object{virtualService("reviews", hostSpec())}, Target{Namespace: ns, VirtualService: "reviews", StableHost: "reviews-stable", CanaryHost: "reviews-canary", TCPRoutes: []TCPRouteSelector{{Port: 7}}}, 10, nil,
			[]string{"tcp routes[0] {port: 7}"}},
		{"no virtual service name", nil, Target{Namespace: ns, StableHost: "a", CanaryHost: "b"}, 10, nil, []string{"virtual service: name required"}},
		{"no hosts", nil, Target{Namespace: ns, VirtualService: "reviews"}, 10, nil, []string{"stable host: required", "canary host: required"}},
		{"same host twice", nil, Target{Namespace: ns, VirtualService: "reviews", StableHost: "reviews", CanaryHost: "reviews.shop.svc.cluster.local"}, 10, nil, []string{"stable and canary host", "must be different"}},
		{"missing DestinationRule", []runtime.Object{virtualService("reviews", subsetSpec())}, subsetTarget(), 10, nil, []string{"DestinationRule shop/reviews not found", "destination rule name"}},
		{"missing canary subset in route", []runtime.Object{virtualService("reviews", subsetSpec()), destinationRule()},
			Target{Namespace: ns, VirtualService: "reviews", HTTPRoutes: []string{"primary"}, Subsets: &Subsets{DestinationRule: "reviews", StableSubset: "stable", CanarySubset: "v2"}}, 10, nil,
			[]string{`no destination for the canary subset "v2" of host "reviews.shop.svc.cluster.local"`}},
		{"same subset twice", nil, Target{Namespace: ns, VirtualService: "reviews", Subsets: &Subsets{DestinationRule: "reviews", StableSubset: "x", CanarySubset: "x"}}, 10, nil, []string{`stable and canary subset are both "x"`}},
		{"managed route also primary", nil, Target{Namespace: ns, VirtualService: "reviews", StableHost: "a", CanaryHost: "b", HTTPRoutes: []string{"primary"}, ManagedRoutes: []string{"primary"}}, 10, nil, []string{`managed routes[0]: "primary" is also a primary http route`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, cs := newFake(t, c.objs...)
			err := s.SetWeight(ctx, c.target, c.weight, c.extras...)
			assertErr(t, err, c.want...)
			noWrites(t, cs)
		})
	}
}

func TestDirectZeroClearsRampState(t *testing.T) {
	vs := virtualService("reviews", hostSpec())
	vs.Annotations[wellknown.RampAnnotation] = "{not json"
	s, _ := newFake(t, vs)
	if err := s.SetWeight(ctx, hostTarget(), 0); err != nil {
		t.Fatalf("abort with an unreadable ramp annotation: %v", err)
	}
	if _, ok := readVS(t, s, "reviews").Annotations[wellknown.RampAnnotation]; ok {
		t.Fatal("SetWeight(0) left the ramp annotation")
	}
}

func TestNotFoundIsDetectable(t *testing.T) {
	s, _ := newFake(t)
	if err := s.SetWeight(ctx, hostTarget(), 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetWeight on a missing VirtualService: %v, want ErrNotFound", err)
	}
}

var vsResource = networkingv1.SchemeGroupVersion.WithResource("virtualservices")

// TestConflictRetriesWithFreshRead: a concurrent writer changes a foreign
// route and the first write gets 409; the retry must start from the new
// object, keeping the concurrent change.
func TestConflictRetriesWithFreshRead(t *testing.T) {
	s, cs := newFake(t, virtualService("reviews", hostSpec()))
	updates := 0
	cs.PrependReactor("update", "virtualservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates > 1 {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(vsResource, ns, "reviews")
		if err != nil {
			t.Fatal(err)
		}
		vs := obj.(*networkingv1.VirtualService).DeepCopy()
		vs.Spec.Http[2].Route[0].Weight, vs.Spec.Http[2].Route[1].Weight = 50, 50 // someone else's route
		vs.ResourceVersion = "2"
		if err := cs.Tracker().Update(vsResource, vs, ns); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(vsResource.GroupResource(), "reviews", errors.New("the object has been modified"))
	})
	if err := s.SetWeight(ctx, hostTarget(), 10); err != nil {
		t.Fatal(err)
	}
	if updates != 2 {
		t.Fatalf("%d updates, want 2 (one 409, one retry)", updates)
	}
	want := withWeights(hostSpec(),
		[4]any{KindHTTP, 1, 0, 90}, [4]any{KindHTTP, 1, 1, 10},
		[4]any{KindHTTP, 2, 0, 50}, [4]any{KindHTTP, 2, 1, 50},
		[4]any{KindTLS, 0, 0, 90}, [4]any{KindTLS, 0, 1, 10},
		[4]any{KindTCP, 0, 0, 90}, [4]any{KindTCP, 0, 1, 10})
	assertSpec(t, want, &readVS(t, s, "reviews").Spec)
}

func TestConflictGivesUpCleanly(t *testing.T) {
	s, cs := newFake(t, virtualService("reviews", hostSpec()))
	updates := 0
	cs.PrependReactor("update", "virtualservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		return true, nil, apierrors.NewConflict(vsResource.GroupResource(), "reviews", errors.New("the object has been modified"))
	})
	err := s.SetWeight(ctx, hostTarget(), 10)
	assertErr(t, err, "set canary weight 10 on VirtualService shop/reviews", "gave up after 5 conflicting writes", "nothing was written")
	if !apierrors.IsConflict(err) {
		t.Fatalf("error does not wrap the 409: %v", err)
	}
	if updates != 5 {
		t.Fatalf("%d update attempts, want 5 (the backoff's steps)", updates)
	}
	assertSpec(t, hostSpec(), &readVS(t, s, "reviews").Spec)
}

func TestGetListsRoutesRolesAndWeights(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	if err := s.SetWeight(ctx, hostTarget(), 30); err != nil {
		t.Fatal(err)
	}
	st, err := s.Get(ctx, hostTarget())
	if err != nil {
		t.Fatal(err)
	}
	if st.CanaryWeight != 30 || st.Problem != "" {
		t.Fatalf("canary weight %d problem %q, want 30 and none", st.CanaryWeight, st.Problem)
	}
	if len(st.Routes) != 7 {
		t.Fatalf("%d routes, want 7 (3 http, 2 tls, 2 tcp)", len(st.Routes))
	}
	p := st.Routes[1]
	if p.Name != "primary" || p.Managed != "primary" || p.Destinations[0].Role != "stable" || p.Destinations[0].Weight != 70 ||
		p.Destinations[1].Role != "canary" || p.Destinations[1].Weight != 30 || p.Destinations[1].Port != 8080 {
		t.Fatalf("primary route status = %+v", p)
	}
	if r := st.Routes[2]; r.Managed != "" || r.Destinations[0].Role != "other" {
		t.Fatalf("foreign route status = %+v", r)
	}
	// Without roles: only the table.
	st, err = s.Get(ctx, Target{Namespace: ns, VirtualService: "reviews"})
	if err != nil {
		t.Fatal(err)
	}
	if st.CanaryWeight != -1 || st.Routes[1].Destinations[1].Role != "" {
		t.Fatalf("role-less Get = %+v", st)
	}
}

func TestHostMatch(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"reviews", "reviews", true},
		{"reviews", "reviews.shop", true},
		{"reviews", "reviews.shop.svc", true},
		{"reviews", "reviews.shop.svc.cluster.local", true},
		{"reviews.shop.svc", "reviews.shop.svc.cluster.local", true},
		{"reviews", "reviews.other.svc.cluster.local", false},
		{"reviews", "reviews-canary", false},
		{"api.example.com", "api", false},
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "api.example", false},
		{"reviews.shop.svc.cluster.local", "reviews.shop.svc.other.local", false},
	}
	for _, c := range cases {
		if got := hostMatch(c.a, c.b, ns); got != c.want {
			t.Errorf("hostMatch(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := hostMatch(c.b, c.a, ns); got != c.want {
			t.Errorf("hostMatch(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}
