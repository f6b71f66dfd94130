package shift

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
)

const ns = "shop"

func dest(host string, port uint32, weight int32) *networking.HTTPRouteDestination {
	d := &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host}, Weight: weight}
	if port != 0 {
		d.Destination.Port = &networking.PortSelector{Number: port}
	}
	return d
}

func subsetDest(host, subset string, weight int32) *networking.HTTPRouteDestination {
	return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Subset: subset, Port: &networking.PortSelector{Number: 8080}}, Weight: weight}
}

func l4dest(host string, port uint32, weight int32) *networking.RouteDestination {
	return &networking.RouteDestination{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: port}}, Weight: weight}
}

func prefix(p string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: p}}
}

// hostSpec is a VirtualService with host-level primary routes of every kind
// (http "primary", tls port 443, tcp port 9000) among foreign routes, with
// plenty of fields that must survive every change.
func hostSpec() *networking.VirtualService {
	return &networking.VirtualService{
		Hosts:    []string{"reviews.example.com", "reviews"},
		Gateways: []string{"istio-system/gw", "mesh"},
		ExportTo: []string{"."},
		Http: []*networking.HTTPRoute{
			{
				Name:  "health",
				Match: []*networking.HTTPMatchRequest{{Uri: prefix("/healthz")}},
				Route: []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 0)},
			},
			{
				Name:    "primary",
				Match:   []*networking.HTTPMatchRequest{{Uri: prefix("/")}, {Headers: map[string]*networking.StringMatch{"x-env": prefix("prod")}}},
				Route:   []*networking.HTTPRouteDestination{dest("reviews-stable", 8080, 100), dest("reviews-canary", 8080, 0)},
				Timeout: durationpb.New(5 * time.Second),
				Retries: &networking.HTTPRetry{Attempts: 3, PerTryTimeout: durationpb.New(time.Second), RetryOn: "5xx"},
				Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{Set: map[string]string{"x-via": "danki-test"}}},
			},
			{
				Name:  "ratings",
				Route: []*networking.HTTPRouteDestination{dest("ratings", 0, 70), dest("ratings-v2", 0, 30)},
			},
		},
		Tls: []*networking.TLSRoute{
			{
				Match: []*networking.TLSMatchAttributes{{Port: 443, SniHosts: []string{"reviews.example.com"}}},
				Route: []*networking.RouteDestination{l4dest("reviews-stable", 443, 100), l4dest("reviews-canary", 443, 0)},
			},
			{
				Match: []*networking.TLSMatchAttributes{{Port: 8443, SniHosts: []string{"admin.example.com"}}},
				Route: []*networking.RouteDestination{l4dest("admin", 8443, 100)},
			},
		},
		Tcp: []*networking.TCPRoute{
			{
				Match: []*networking.L4MatchAttributes{{Port: 9000}},
				Route: []*networking.RouteDestination{l4dest("reviews-stable.shop.svc.cluster.local", 9000, 100), l4dest("reviews-canary.shop.svc.cluster.local", 9000, 0)},
			},
			{
				Match: []*networking.L4MatchAttributes{{Port: 9001}},
				Route: []*networking.RouteDestination{l4dest("legacy", 9001, 100)},
			},
		},
	}
}

func hostTarget() Target {
	return Target{Namespace: ns, VirtualService: "reviews", StableHost: "reviews-stable", CanaryHost: "reviews-canary"}
}

// subsetSpec routes one host to the stable and canary subsets.
func subsetSpec() *networking.VirtualService {
	return &networking.VirtualService{
		Hosts: []string{"reviews"},
		Http: []*networking.HTTPRoute{
			{Name: "ratings", Match: []*networking.HTTPMatchRequest{{Uri: prefix("/ratings")}}, Route: []*networking.HTTPRouteDestination{dest("ratings", 0, 0)}},
			{
				Name:  "primary",
				Route: []*networking.HTTPRouteDestination{subsetDest("reviews", "stable", 100), subsetDest("reviews", "canary", 0)},
			},
		},
	}
}

func subsetTarget() Target {
	return Target{Namespace: ns, VirtualService: "reviews", Subsets: &Subsets{DestinationRule: "reviews", StableSubset: "stable", CanarySubset: "canary"}}
}

func destinationRule() *networkingv1.DestinationRule {
	return &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: ns},
		Spec: networking.DestinationRule{
			Host: "reviews.shop.svc.cluster.local",
			TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}},
			},
			Subsets: []*networking.Subset{
				{Name: "stable", Labels: map[string]string{"app": "reviews", PodTemplateHashLabel: "old1"}},
				{Name: "canary", Labels: map[string]string{"app": "reviews"}},
				{Name: "legacy", Labels: map[string]string{"version": "v0"}},
			},
		},
	}
}

func virtualService(name string, spec *networking.VirtualService) *networkingv1.VirtualService {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1", Annotations: map[string]string{"owner": "team-a"}}}
	proto.Merge(&vs.Spec, spec)
	return vs
}

func newFake(t *testing.T, objs ...runtime.Object) (*Shifter, *fake.Clientset) {
	t.Helper()
	cs := fake.NewSimpleClientset(objs...)
	s := New(cs, nil)
	s.Backoff = wait.Backoff{Steps: 5, Duration: time.Millisecond, Factor: 1}
	return s, cs
}

func readVS(t *testing.T, s *Shifter, name string) *networkingv1.VirtualService {
	t.Helper()
	vs, err := s.client.NetworkingV1().VirtualServices(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read VirtualService %s: %v", name, err)
	}
	return vs
}

func readDR(t *testing.T, s *Shifter) *networkingv1.DestinationRule {
	t.Helper()
	dr, err := s.client.NetworkingV1().DestinationRules(ns).Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read DestinationRule: %v", err)
	}
	return dr
}

// assertSpec fails with both specs as JSON unless they are equal.
func assertSpec(t *testing.T, want, got proto.Message) {
	t.Helper()
	if !proto.Equal(want, got) {
		t.Fatalf("spec differs\nwant: %s\n got: %s", protojson.Format(want), protojson.Format(got))
	}
}

// assertErr fails unless err is non-nil and mentions every part.
func assertErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

// scriptedGate answers Check from a script; past its end it repeats the
// last answer. It counts calls and records the window starts it was given.
type scriptedGate struct {
	answers []verdict
	calls   int
	sinces  []time.Time
}

type verdict struct {
	pass   bool
	reason string
	err    error
}

func (g *scriptedGate) Check(_ context.Context, since time.Time) (bool, string, error) {
	i := min(g.calls, len(g.answers)-1)
	g.calls++
	g.sinces = append(g.sinces, since)
	a := g.answers[i]
	return a.pass, a.reason, a.err
}

var (
	pass   = verdict{pass: true}
	breach = verdict{reason: "p99 412ms > 250ms"}
)
