package shift

import (
	"context"
	"testing"

	"github.com/danki-dev/danki/pkg/wellknown"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mirrorsTo lists the mirror policies of route name (nil if no such route).
func mirrorsTo(spec *networking.VirtualService, name string) []*networking.HTTPMirrorPolicy {
	for _, r := range spec.Http {
		if r.GetName() == name {
			return r.GetMirrors()
		}
	}
	return nil
}

func TestWarmupMirrorAddChangeRemoveHostLevel(t *testing.T) {
	ctx := context.Background()
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	orig := hostSpec()

	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 5}); err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	ms := mirrorsTo(&vs.Spec, "primary")
	if len(ms) != 1 || ms[0].GetDestination().GetHost() != "reviews-canary" || ms[0].GetPercentage().GetValue() != 5 {
		t.Fatalf("primary mirrors = %v, want one to reviews-canary at 5%%", ms)
	}
	if ms[0].GetDestination().GetPort().GetNumber() != 8080 {
		t.Fatalf("mirror port = %v, want the canary destination's 8080", ms[0].GetDestination().GetPort())
	}
	// Weights and foreign routes untouched: the spec without the mirror is the original.
	stripped := proto.Clone(&vs.Spec).(*networking.VirtualService)
	stripped.Http[1].Mirrors = nil
	assertSpec(t, orig, stripped)
	st, err := ParseMirrorState(vs.Annotations[wellknown.MirrorAnnotation])
	if err != nil || st == nil || st.Percent != 5 || st.Destination.Host != "reviews-canary" {
		t.Fatalf("state = %+v, %v", st, err)
	}
	if vs.Annotations["owner"] != "team-a" {
		t.Fatalf("foreign annotation lost: %v", vs.Annotations)
	}

	// Raising the percentage replaces the mirror, never adds a second.
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 20}); err != nil {
		t.Fatal(err)
	}
	vs = readVS(t, s, "reviews")
	if ms := mirrorsTo(&vs.Spec, "primary"); len(ms) != 1 || ms[0].GetPercentage().GetValue() != 20 {
		t.Fatalf("primary mirrors after raise = %v, want one at 20%%", ms)
	}

	had, err := s.RemoveWarmupMirror(ctx, hostTarget())
	if err != nil || !had {
		t.Fatalf("remove = %v, %v; want true, nil", had, err)
	}
	vs = readVS(t, s, "reviews")
	assertSpec(t, orig, &vs.Spec)
	if _, ok := vs.Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatal("mirror annotation left behind")
	}
	// Idempotent: nothing left to remove writes nothing.
	rv := vs.ResourceVersion
	if had, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil || had {
		t.Fatalf("second remove = %v, %v; want false, nil", had, err)
	}
	if readVS(t, s, "reviews").ResourceVersion != rv {
		t.Fatal("a remove with nothing to remove wrote the VirtualService")
	}
}

func TestWarmupMirrorMethodsAddsRestrictedCopy(t *testing.T) {
	ctx := context.Background()
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 10, Methods: []string{"GET", "HEAD"}}); err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	var names []string
	for _, r := range vs.Spec.Http {
		names = append(names, r.GetName())
	}
	want := []string{"health", mirrorRouteName, "primary", "ratings"}
	if len(names) != len(want) {
		t.Fatalf("routes %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("routes %v, want %v", names, want)
		}
	}
	mr := vs.Spec.Http[1]
	if len(mr.Match) != 2 {
		t.Fatalf("mirror route matches = %v, want the primary's two alternatives", mr.Match)
	}
	for _, m := range mr.Match {
		if m.GetMethod().GetRegex() != "GET|HEAD" {
			t.Fatalf("match %v: want method regex GET|HEAD", m)
		}
	}
	if mr.GetTimeout().AsDuration() != hostSpec().Http[1].GetTimeout().AsDuration() || mr.GetRetries().GetAttempts() != 3 {
		t.Fatalf("mirror route lost the primary's timeout/retries: %v", mr)
	}
	if len(mr.Mirrors) != 1 || mr.Mirrors[0].GetPercentage().GetValue() != 10 {
		t.Fatalf("mirror route mirrors = %v", mr.Mirrors)
	}
	if len(mirrorsTo(&vs.Spec, "primary")) != 0 {
		t.Fatal("primary route got a mirror: with methods only the restricted copy mirrors")
	}
	if _, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, hostSpec(), &readVS(t, s, "reviews").Spec)
}

func TestWarmupMirrorSubsetLevel(t *testing.T) {
	ctx := context.Background()
	s, _ := newFake(t, virtualService("reviews", subsetSpec()), destinationRule())
	if err := s.SetWarmupMirror(ctx, subsetTarget(), WarmupMirror{Percent: 1.5}); err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	ms := mirrorsTo(&vs.Spec, "primary")
	if len(ms) != 1 || ms[0].GetDestination().GetSubset() != "canary" || ms[0].GetPercentage().GetValue() != 1.5 {
		t.Fatalf("mirrors = %v, want subset canary at 1.5%%", ms)
	}
	if len(mirrorsTo(&vs.Spec, "ratings")) != 0 {
		t.Fatal("foreign route got a mirror")
	}
	if _, err := s.RemoveWarmupMirror(ctx, subsetTarget()); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, subsetSpec(), &readVS(t, s, "reviews").Spec)
}

// A lost or broken annotation (a hand edit, a crash between two writes of
// someone else) must not strand the mirror on the canary.
func TestRemoveWarmupMirrorWithoutState(t *testing.T) {
	ctx := context.Background()
	s, cs := newFake(t, virtualService("reviews", hostSpec()))
	if err := s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 50, Methods: []string{"GET"}}); err != nil {
		t.Fatal(err)
	}
	vs := readVS(t, s, "reviews")
	vs.Annotations[wellknown.MirrorAnnotation] = "{not json"
	if _, err := cs.NetworkingV1().VirtualServices(ns).Update(ctx, vs, metav1UpdateOptions()); err != nil {
		t.Fatal(err)
	}
	if had, err := s.RemoveWarmupMirror(ctx, hostTarget()); err != nil || !had {
		t.Fatalf("remove = %v, %v", had, err)
	}
	vs = readVS(t, s, "reviews")
	assertSpec(t, hostSpec(), &vs.Spec)
	if _, ok := vs.Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatal("broken annotation left behind")
	}
}

func TestWarmupMirrorRefusals(t *testing.T) {
	ctx := context.Background()
	own := hostSpec()
	own.Http[1].Mirror = &networking.Destination{Host: "shadow"}
	s, _ := newFake(t, virtualService("reviews", own))
	assertErr(t, s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 5}), "has its own mirror", "shadow")
	assertErr(t, s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 0}), "percent 0")
	assertErr(t, s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 101}), "at most 100")
	assertErr(t, s.SetWarmupMirror(ctx, hostTarget(), WarmupMirror{Percent: 5, Methods: []string{"get"}}), "methods[0]")
	if _, ok := readVS(t, s, "reviews").Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatal("a refused mirror wrote its state")
	}
	// A missing VirtualService has no mirror to remove.
	gone := hostTarget()
	gone.VirtualService = "nope"
	if had, err := s.RemoveWarmupMirror(ctx, gone); err != nil || had {
		t.Fatalf("remove on a missing VirtualService = %v, %v", had, err)
	}
}

func metav1UpdateOptions() metav1.UpdateOptions { return metav1.UpdateOptions{} }
