package shift

// Tests against a real kube-apiserver with the real Istio CRDs (envtest):
// every VirtualService and DestinationRule danki writes here must pass the
// API server's schema validation and read back exactly as expected. They are
// skipped under -short.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/wellknown"
	"github.com/danki-dev/danki/test/testenv"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	testingclock "k8s.io/utils/clock/testing"
)

var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error
	nsSeq   atomic.Int32
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}
	os.Exit(code)
}

// apiServer starts (once per package) the shared API server, and gives the
// test a namespace of its own holding the objects, created through the API.
func apiServer(t *testing.T, objs ...any) (*Shifter, istioclient.Interface, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the API server built by lab/scripts/build.sh (skipped with -short)")
	}
	envOnce.Do(func() { env, envErr = testenv.New() })
	if envErr != nil {
		t.Fatalf("start envtest: %v", envErr)
	}
	name := fmt.Sprintf("shift-%d", nsSeq.Add(1))
	if _, err := env.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *networkingv1.VirtualService:
			o = o.DeepCopy()
			o.Namespace, o.ResourceVersion = name, ""
			_, err = env.Istio.NetworkingV1().VirtualServices(name).Create(context.Background(), o, metav1.CreateOptions{})
		case *networkingv1.DestinationRule:
			o = o.DeepCopy()
			o.Namespace, o.ResourceVersion = name, ""
			_, err = env.Istio.NetworkingV1().DestinationRules(name).Create(context.Background(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	s := New(env.Istio, nil)
	return s, env.Istio, name
}

func apiVS(t *testing.T, c istioclient.Interface, ns, name string) *networkingv1.VirtualService {
	t.Helper()
	vs, err := c.NetworkingV1().VirtualServices(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func inNS(tg Target, ns string) Target {
	tg.Namespace = ns
	if tg.Subsets != nil {
		s := *tg.Subsets
		tg.Subsets = &s
	}
	return tg
}

// hostSpecNS is hostSpec with the tcp route's fully qualified hosts in ns.
func hostSpecNS(ns string) *networking.VirtualService {
	spec := hostSpec()
	spec.Tcp[0].Route[0].Destination.Host = "reviews-stable." + ns + ".svc.cluster.local"
	spec.Tcp[0].Route[1].Destination.Host = "reviews-canary." + ns + ".svc.cluster.local"
	return spec
}

func TestAPIServerHostLevelWeightsOnEveryKind(t *testing.T) {
	probe := virtualService("reviews", hostSpec())
	s, c, ns := apiServer(t)
	probe.Spec.Tcp[0].Route[0].Destination.Host = "reviews-stable." + ns + ".svc.cluster.local"
	probe.Spec.Tcp[0].Route[1].Destination.Host = "reviews-canary." + ns + ".svc.cluster.local"
	probe.Namespace, probe.ResourceVersion = ns, ""
	if _, err := c.NetworkingV1().VirtualServices(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server stores the fixture as given (nothing pruned), so the
	// comparisons below see every field.
	assertSpec(t, hostSpecNS(ns), &apiVS(t, c, ns, "reviews").Spec)

	tg := inNS(hostTarget(), ns)
	for _, w := range []int{30, 100, 0} {
		if err := s.SetWeight(ctx, tg, w); err != nil {
			t.Fatalf("set %d: %v", w, err)
		}
		want := withWeights(hostSpecNS(ns),
			[4]any{KindHTTP, 1, 0, 100 - w}, [4]any{KindHTTP, 1, 1, w},
			[4]any{KindTLS, 0, 0, 100 - w}, [4]any{KindTLS, 0, 1, w},
			[4]any{KindTCP, 0, 0, 100 - w}, [4]any{KindTCP, 0, 1, w})
		assertSpec(t, want, &apiVS(t, c, ns, "reviews").Spec)
	}

	// Additional destinations, then their removal.
	tg.HTTPRoutes = []string{"primary"}
	if err := s.SetWeight(ctx, tg, 20, Extra{Host: "reviews-exp", Weight: 30}); err != nil {
		t.Fatal(err)
	}
	want := withWeights(hostSpecNS(ns), [4]any{KindHTTP, 1, 0, 50}, [4]any{KindHTTP, 1, 1, 20})
	want.Http[1].Route = append(want.Http[1].Route, dest("reviews-exp", 8080, 30))
	assertSpec(t, want, &apiVS(t, c, ns, "reviews").Spec)
	if err := s.SetWeight(ctx, tg, 20); err != nil {
		t.Fatal(err)
	}
	got := apiVS(t, c, ns, "reviews")
	assertSpec(t, withWeights(hostSpecNS(ns), [4]any{KindHTTP, 1, 0, 80}, [4]any{KindHTTP, 1, 1, 20}), &got.Spec)
	if got.Annotations["owner"] != "team-a" || got.Annotations[wellknown.ExtrasAnnotation] != "" {
		t.Fatalf("annotations %v", got.Annotations)
	}
}

func TestAPIServerSubsetLevelWeightsAndHashes(t *testing.T) {
	s, c, ns := apiServer(t, virtualService("reviews", subsetSpec()), destinationRule())
	tg := inNS(subsetTarget(), ns)
	// The DestinationRule's host names the test namespace.
	dr, err := c.NetworkingV1().DestinationRules(ns).Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dr.Spec.Host = "reviews"
	if _, err := c.NetworkingV1().DestinationRules(ns).Update(ctx, dr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWeight(ctx, tg, 35, Extra{Subset: "exp", Weight: 5}); err != nil {
		t.Fatal(err)
	}
	want := withWeights(subsetSpec(), [4]any{KindHTTP, 1, 0, 60}, [4]any{KindHTTP, 1, 1, 35})
	want.Http[1].Route = append(want.Http[1].Route, subsetDest("reviews", "exp", 5))
	assertSpec(t, want, &apiVS(t, c, ns, "reviews").Spec)

	if err := s.UpdateHashes(ctx, tg, "c4n4ry", "st4ble", ExtraSubset{Name: "exp", Hash: "e1"}); err != nil {
		t.Fatal(err)
	}
	wantDR := proto.Clone(&destinationRule().Spec).(*networking.DestinationRule)
	wantDR.Host = "reviews"
	wantDR.Subsets[0].Labels[PodTemplateHashLabel] = "st4ble"
	wantDR.Subsets[1].Labels[PodTemplateHashLabel] = "c4n4ry"
	wantDR.Subsets = append(wantDR.Subsets, &networking.Subset{Name: "exp", Labels: map[string]string{PodTemplateHashLabel: "e1"}})
	got, err := c.NetworkingV1().DestinationRules(ns).Get(ctx, "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	assertSpec(t, wantDR, &got.Spec)
	if err := s.UpdateHashes(ctx, tg, "", "c4n4ry"); err != nil {
		t.Fatal(err)
	}
	if got, err = c.NetworkingV1().DestinationRules(ns).Get(ctx, "reviews", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Subsets) != 3 || got.Spec.Subsets[0].Labels[PodTemplateHashLabel] != "c4n4ry" || got.Spec.Subsets[1].Labels[PodTemplateHashLabel] != "" {
		t.Fatalf("subsets after promotion: %v", got.Spec.Subsets)
	}
}

func TestAPIServerHeaderAndMirrorRoutes(t *testing.T) {
	s, c, ns := apiServer(t, virtualService("reviews", hostSpec()))
	tg := inNS(managedTarget("header-canary", "mirror-canary"), ns)
	if err := s.SetWeight(ctx, tg, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Regex: "^(yes|1)$"}}}}); err != nil {
		t.Fatal(err)
	}
	pct := 20
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Percentage: &pct, Match: []RequestMatch{{Method: &StringMatch{Exact: "GET"}, Path: &StringMatch{Prefix: "/api"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWeight(ctx, tg, 30); err != nil {
		t.Fatal(err)
	}
	got := apiVS(t, c, ns, "reviews")
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"health", "header-canary", "mirror-canary", "primary", "ratings"}) {
		t.Fatalf("routes %v", names)
	}
	if m := got.Spec.Http[2]; m.Route[0].Weight != 70 || m.Route[1].Weight != 30 || m.MirrorPercentage.GetValue() != 20 || m.Mirror.GetHost() != "reviews-canary" {
		t.Fatalf("mirror route as stored: %v", m)
	}
	if h := got.Spec.Http[1]; h.Match[0].Headers["x-canary"].GetRegex() != "^(yes|1)$" || h.Route[0].Weight != 100 {
		t.Fatalf("header route as stored: %v", h)
	}
	if err := s.RemoveManagedRoutes(ctx, tg); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 70}, [4]any{KindHTTP, 1, 1, 30}), &apiVS(t, c, ns, "reviews").Spec)
}

func TestAPIServerRampPersistsEveryStep(t *testing.T) {
	s, c, ns := apiServer(t, virtualService("reviews", hostSpec()))
	clk := testingclock.NewFakeClock(t0)
	g := &scriptedGate{answers: []verdict{pass, breach, pass}}
	mk := func() *Ramp {
		return &Ramp{Shifter: s, Target: inNS(managedTarget(), ns), Plan: Plan{Step: 20, Interval: 30 * time.Second, MaxBreaches: 3}, Gate: g, Clock: clk}
	}
	var trail []string
	for range 12 {
		d, err := mk().Tick(ctx, 50) // a fresh Ramp every time: state only on the object
		if err != nil {
			t.Fatal(err)
		}
		vs := apiVS(t, c, ns, "reviews")
		st := rampState(t, vs)
		if int(canaryWeight(vs)) != d.Weight || st.Weight != d.Weight || st.Target != 50 {
			t.Fatalf("after %s: stored weight %d, state %+v, decision weight %d", d.Action, canaryWeight(vs), st, d.Weight)
		}
		if d.Action != ActionHold {
			trail = append(trail, fmt.Sprintf("%s:%d", d.Action, d.Weight))
		}
		if d.Action == ActionDone {
			break
		}
		clk.Step(30 * time.Second)
	}
	// 0→20 (start), 20 passes →40, 40 breaches →20 (inc 10), →30, passes →40,
	// passes →50, passes → done.
	want := []string{"move:20", "move:40", "back-off:20", "move:30", "move:40", "move:50", "done:50"}
	if !slices.Equal(trail, want) {
		t.Fatalf("ramp trail %v, want %v", trail, want)
	}
	if v, err := mk().Verify(ctx, 50); err != nil || !v.Verified {
		t.Fatalf("verify: %+v %v", v, err)
	}
	if _, err := mk().Tick(ctx, 0); err != nil {
		t.Fatal(err)
	}
	vs := apiVS(t, c, ns, "reviews")
	if _, ok := vs.Annotations[wellknown.RampAnnotation]; ok || canaryWeight(vs) != 0 {
		t.Fatalf("after abort: %v, weight %d", vs.Annotations, canaryWeight(vs))
	}
}

// conflictCounter counts 409 responses seen by a client.
type conflictCounter struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *conflictCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusConflict {
		c.n.Add(1)
	}
	return resp, err
}

// TestAPIServerConflictRetryUnderConcurrentWriter: another writer keeps
// updating a foreign route of the same VirtualService; danki's writes meet
// real 409s from the API server, retry from fresh reads, and neither side's
// changes are lost.
func TestAPIServerConflictRetryUnderConcurrentWriter(t *testing.T) {
	_, c, ns := apiServer(t, virtualService("reviews", hostSpec()))
	cfg := rest.CopyConfig(env.Config)
	counter := &conflictCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	client, err := istioclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(client, nil)
	s.Backoff = wait.Backoff{Steps: 100, Duration: time.Millisecond, Factor: 1.2, Jitter: 0.5, Cap: 50 * time.Millisecond}
	tg := inNS(managedTarget(), ns)

	stop := make(chan struct{})
	var writes atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				vs, err := c.NetworkingV1().VirtualServices(ns).Get(ctx, "reviews", metav1.GetOptions{})
				if err != nil {
					return err
				}
				w := int32(i % 101)
				vs.Spec.Http[2].Route[0].Weight, vs.Spec.Http[2].Route[1].Weight = w, 100-w
				_, err = c.NetworkingV1().VirtualServices(ns).Update(ctx, vs, metav1.UpdateOptions{})
				return err
			})
			if err != nil && !apierrors.IsConflict(err) {
				t.Errorf("concurrent writer: %v", err)
				return
			}
			if err == nil {
				writes.Add(1)
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	weight := 0
	for counter.n.Load() == 0 || weight < 20 {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("no 409 seen in 30s (%d danki writes, %d concurrent writes): the test proves nothing", weight, writes.Load())
		}
		weight++
		if err := s.SetWeight(ctx, tg, weight%101); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("set weight %d under a concurrent writer: %v", weight%101, err)
		}
	}
	close(stop)
	wg.Wait()
	got := apiVS(t, c, ns, "reviews")
	if w := int(canaryWeight(got)); w != weight%101 {
		t.Fatalf("canary weight %d, want the last set %d", w, weight%101)
	}
	if r := got.Spec.Http[2].Route; r[0].Weight+r[1].Weight != 100 || writes.Load() == 0 {
		t.Fatalf("concurrent writer's route %v after %d writes", r, writes.Load())
	}
	// Everything else is as the fixture had it.
	want := withWeights(hostSpec(), [4]any{KindHTTP, 1, 0, 100 - weight%101}, [4]any{KindHTTP, 1, 1, weight % 101},
		[4]any{KindHTTP, 2, 0, int(got.Spec.Http[2].Route[0].Weight)}, [4]any{KindHTTP, 2, 1, int(got.Spec.Http[2].Route[1].Weight)})
	assertSpec(t, want, &got.Spec)
	t.Logf("%d danki writes, %d concurrent writes, %d conflicts retried", weight, writes.Load(), counter.n.Load())
}

func TestAPIServerGivesUpCleanlyOnEndlessConflicts(t *testing.T) {
	_, c, ns := apiServer(t, virtualService("reviews", hostSpec()))
	// A stale resourceVersion on every write: a client whose updates always
	// carry an old version stands in for a writer that always wins the race.
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return staleWriter{rt} })
	client, err := istioclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(client, nil)
	s.Backoff = wait.Backoff{Steps: 3, Duration: time.Millisecond, Factor: 1}
	err = s.SetWeight(ctx, inNS(hostTarget(), ns), 40)
	if !apierrors.IsConflict(err) {
		t.Fatalf("error %v, want a 409", err)
	}
	assertErr(t, err, "gave up after 3 conflicting writes")
	assertSpec(t, hostSpec(), &apiVS(t, c, ns, "reviews").Spec)
}

// staleWriter rewrites every PUT to carry resourceVersion "1", long gone.
type staleWriter struct{ next http.RoundTripper }

func (s staleWriter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || r.Body == nil {
		return s.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("staleWriter: PUT body is not JSON: %w", err)
	}
	obj["metadata"].(map[string]any)["resourceVersion"] = "1"
	if body, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return s.next.RoundTrip(r)
}

// The warm-up mirror as the real API server stores it: a methods-limited
// copy of the primary route above it that mirrors to the canary subset,
// its share raised, then everything removed, the weights untouched.
func TestAPIServerWarmupMirror(t *testing.T) {
	dr := destinationRule()
	dr.Spec.Host = "reviews" // as the VirtualService's destinations name it, in any namespace
	s, c, ns := apiServer(t, virtualService("reviews", subsetSpec()), dr)
	tg := inNS(subsetTarget(), ns)
	for _, pct := range []float64{0.5, 20} {
		if err := s.SetWarmupMirror(ctx, tg, WarmupMirror{Percent: pct, Methods: []string{"GET", "HEAD"}}); err != nil {
			t.Fatalf("set mirror %g%%: %v", pct, err)
		}
	}
	got := apiVS(t, c, ns, "reviews")
	if names := httpNames(&got.Spec); !slices.Equal(names, []string{"ratings", mirrorRouteName, "primary"}) {
		t.Fatalf("routes %v: want the mirror copy right above primary", names)
	}
	added := got.Spec.Http[1]
	if len(added.Mirrors) != 1 || added.Mirrors[0].GetPercentage().GetValue() != 20 ||
		added.Mirrors[0].GetDestination().GetSubset() != "canary" || added.Match[0].GetMethod().GetRegex() == "" {
		t.Fatalf("mirror route as stored: %v", added)
	}
	if st, err := s.WarmupMirrorState(ctx, tg); err != nil || st == nil || st.Percent != 20 {
		t.Fatalf("mirror state %+v, %v", st, err)
	}
	if had, err := s.RemoveWarmupMirror(ctx, tg); err != nil || !had {
		t.Fatalf("remove: %v, %v", had, err)
	}
	after := apiVS(t, c, ns, "reviews")
	assertSpec(t, subsetSpec(), &after.Spec)
	if _, ok := after.Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatalf("annotation left: %v", after.Annotations)
	}
}

// On the real API server: danki's header, mirror and warm-up mirror routes
// carry the primary route's headers and the marker strip (and pass Istio's
// schema), and their removal leaves another team's route alone, whatever
// the route names and the mirror annotation claim.
func TestAPIServerDankisRoutesStripTheMarkerAndRemovalKeepsForeignRoutes(t *testing.T) {
	spec := specWithPayments("payments")
	spec.Http[2].Headers = primaryHeaders()
	vs := virtualService("reviews", spec)
	vs.Annotations[wellknown.MirrorAnnotation] = `{"percent":5,"destination":{"host":"reviews-canary"},"added":["payments"]}`
	s, c, ns := apiServer(t, vs)
	orig := apiVS(t, c, ns, "reviews")
	tg := inNS(managedTarget("header-canary", "mirror-canary", "payments"), ns)
	if err := s.SetHeaderRoute(ctx, tg, HeaderRoute{Name: "header-canary", Match: []HeaderMatch{{Header: "x-canary", Value: StringMatch{Exact: "yes"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMirrorRoute(ctx, tg, MirrorRoute{Name: "mirror-canary", Match: []RequestMatch{{Path: &StringMatch{Prefix: "/api"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWarmupMirror(ctx, tg, WarmupMirror{Percent: 10, Methods: []string{"GET"}}); err != nil {
		t.Fatal(err)
	}
	got := apiVS(t, c, ns, "reviews")
	for _, name := range []string{"header-canary", "mirror-canary", mirrorRouteName} {
		r := routeNamed(&got.Spec, name)
		if r == nil {
			t.Fatalf("no route %q as stored: %v", name, httpNames(&got.Spec))
		}
		assertSpec(t, withMarkerStrip(primaryHeaders()), r.GetHeaders())
	}
	if had, err := s.RemoveWarmupMirror(ctx, tg); err != nil || !had {
		t.Fatalf("remove warm-up mirror: %v, %v", had, err)
	}
	if err := s.RemoveManagedRoutes(ctx, tg, "payments", "health"); err != nil {
		t.Fatal(err)
	}
	assertSpec(t, &orig.Spec, &apiVS(t, c, ns, "reviews").Spec)
}
