package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

const ns = "shop"

func spec() *networking.VirtualService {
	d := func(host string, w int32) *networking.HTTPRouteDestination {
		return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: 8080}}, Weight: w}
	}
	return &networking.VirtualService{
		Hosts: []string{"app"},
		Http: []*networking.HTTPRoute{
			{Name: "admin", Match: []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/admin"}}}},
				Route: []*networking.HTTPRouteDestination{d("admin", 100)}},
			{Name: "primary", Route: []*networking.HTTPRouteDestination{d("app-stable", 100), d("app-canary", 0)}},
		},
	}
}

func target() shift.Target {
	return shift.Target{Namespace: ns, VirtualService: "app", StableHost: "app-stable", CanaryHost: "app-canary"}
}

// fixture is a fake Istio API with the VirtualService, a fake Prometheus
// whose canary histogram comes from hist, a fake clock, and a record of
// every mirror percentage written.
type fixture struct {
	shifter *shift.Shifter
	cs      *fake.Clientset
	prom    *testutil.Prometheus

	mu       sync.Mutex
	errors   float64 // failed requests per window
	percents []float64
	fetches  int
}

// bounds are Envoy's default bucket bounds (ms) around the test's latencies.
var bounds = []float64{1, 5, 10, 25, 50, 100, 250, 500, math.Inf(1)}

// newFixture serves, per histogram fetch i (from 0), 100 requests of
// which slow(i) took ~200 ms and the rest ~3 ms.
func newFixture(t *testing.T, slow func(i int) int) *fixture {
	t.Helper()
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, ResourceVersion: "1"}}
	proto.Merge(&vs.Spec, spec())
	f := &fixture{cs: fake.NewSimpleClientset([]runtime.Object{vs}...), prom: testutil.NewPrometheus(t)}
	f.shifter = shift.New(f.cs, nil)
	f.cs.PrependReactor("update", "virtualservices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*networkingv1.VirtualService)
		st, err := shift.ParseMirrorState(obj.Annotations[wellknown.MirrorAnnotation])
		if err != nil {
			t.Errorf("bad mirror state written: %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if st != nil {
			f.percents = append(f.percents, st.Percent)
		} else {
			f.percents = append(f.percents, 0)
		}
		return false, nil, nil
	})
	f.prom.Respond(func(q string) (int, string) {
		switch {
		case strings.Contains(q, "_bucket"):
			f.mu.Lock()
			i := f.fetches
			f.fetches++
			f.mu.Unlock()
			return 200, testutil.FastSlowBucketsJSON(bounds, slow(i))
		case strings.Contains(q, `response_code!=""`):
			return 200, testutil.VectorJSON(testutil.SampleJSON(nil, 100))
		default:
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.errors > 0 {
				return 200, testutil.VectorJSON(testutil.SampleJSON(nil, f.errors))
			}
			return 200, testutil.VectorJSON()
		}
	})
	return f
}

func (f *fixture) run(t *testing.T, mutate func(*Config)) *Run {
	t.Helper()
	c := Config{AllowSideEffects: true, Source: analysis.SourceEnvoy,
		Prometheus: &analysis.PrometheusConfig{Address: f.prom.URL},
		Envoy:      &analysis.EnvoyConfig{CanaryCluster: "outbound|8080||app-canary.shop.svc.cluster.local"}}
	if mutate != nil {
		mutate(&c)
	}
	c = c.WithDefaults()
	// The step decodes the analysis blocks, which fills their defaults.
	raw, _ := json.Marshal(c)
	c, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.NewSource(nil, analysis.WithPolicy(policy.Local()))
	if err != nil {
		t.Fatal(err)
	}
	return &Run{Config: c, Warmup: warmup.Config{}.WithDefaults(), Shifter: f.shifter, Target: target(), Source: src,
		Clock: testutil.NewStepClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

// assertClean fails unless the VirtualService is back to its original spec
// with no mirror state.
func (f *fixture) assertClean(t *testing.T) {
	t.Helper()
	vs, err := f.cs.NetworkingV1().VirtualServices(ns).Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(spec(), &vs.Spec) {
		t.Fatalf("VirtualService not restored: %v", &vs.Spec)
	}
	if _, ok := vs.Annotations[wellknown.MirrorAnnotation]; ok {
		t.Fatalf("mirror annotation left: %v", vs.Annotations)
	}
}

func TestMirrorWarmupConvergesRaisesAndRemoves(t *testing.T) {
	f := newFixture(t, func(i int) int { return 40 - 8*i })                                                                // cold for 5 windows, then warm
	r := f.run(t, func(c *Config) { c.Interval, c.Poll = config.Duration(5*time.Second), config.Duration(5*time.Second) }) // raise at every poll
	var reports []string
	res, err := r.Execute(context.Background(), func(s string) { reports = append(reports, s) })
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if !res.Converged || len(res.Windows) < 10 {
		t.Fatalf("result %+v: want converged after at least two blocks of windows", res)
	}
	if res.Windows[0].P99 < 100*time.Millisecond || res.Windows[len(res.Windows)-1].P99 > 10*time.Millisecond {
		t.Fatalf("windows p99 %v … %v: the histogram's cold and warm tails were not read", res.Windows[0].P99, res.Windows[len(res.Windows)-1].P99)
	}
	// Percentages: 1, then ×2 every interval, capped at 20; the last write removes.
	f.mu.Lock()
	got := append([]float64(nil), f.percents...)
	f.mu.Unlock()
	want := []float64{1, 2, 4, 8, 16, 20}
	if len(got) < len(want)+1 || got[len(got)-1] != 0 {
		t.Fatalf("mirror writes %v: want %v then removal", got, want)
	}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("mirror writes %v: want %v then removal", got, want)
		}
	}
	for _, p := range got[len(want) : len(got)-1] {
		if p != 20 {
			t.Fatalf("mirror writes %v: rose above maxPercent 20", got)
		}
	}
	if sum := res.Summary(); !strings.Contains(sum, "converged on mirrored traffic") || !strings.Contains(sum, "in window 1") || strings.Contains(sum, "still falling") || len(reports) == 0 {
		t.Fatalf("summary %q, %d reports", res.Summary(), len(reports))
	}
	// At weight 0 every canary request is a mirrored copy.
	if res.Mirrored != res.Requests || res.FromUsers != 0 || res.Unattributed != 0 || !strings.Contains(res.Summary(), "canary requests: "+strconv.FormatInt(res.Requests, 10)+" mirrored, 0 from users (weight 0 at every look)") {
		t.Fatalf("mirrored %d, from users %d, unattributed %d of %d; summary %q", res.Mirrored, res.FromUsers, res.Unattributed, res.Requests, res.Summary())
	}
	f.assertClean(t)
}

// A canary weight raised mid-warm-up (someone else's setWeight): the
// windows from then on count as users' requests, and the report says so.
func TestMirrorWarmupCountsRequestsAtWeightAsUsers(t *testing.T) {
	f := newFixture(t, func(i int) int { return 40 - 8*i })
	r := f.run(t, nil)
	r.Clock.(*testutil.StepClock).OnTimer = func(n int) bool {
		if n == 4 {
			if err := f.shifter.SetWeight(context.Background(), target(), 10); err != nil {
				t.Errorf("set weight: %v", err)
			}
		}
		return true
	}
	res, err := r.Execute(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Windows 1–3 closed at weight 0; the 4th poll saw 10 %.
	if res.Mirrored != 300 || res.FromUsers != res.Requests-300 || res.MaxWeight != 10 {
		t.Fatalf("mirrored %d, from users %d of %d, max weight %d: want 300 mirrored (3 windows at weight 0), the rest users'", res.Mirrored, res.FromUsers, res.Requests, res.MaxWeight)
	}
	if want := "(routed to it at weight up to 10%)"; !strings.Contains(res.Summary(), want) {
		t.Fatalf("summary %q lacks %q", res.Summary(), want)
	}
}

func TestMirrorWarmupFailureRemovesMirror(t *testing.T) {
	// Warm, but 5 % of the mirrored requests fail (maxErrorRatio 1 %).
	f := newFixture(t, func(i int) int { return 0 })
	f.errors = 5
	r := f.run(t, nil)
	r.Warmup.MaxRequests = 3000
	res, err := r.Execute(context.Background(), nil)
	if err == nil || res.Converged {
		t.Fatalf("Execute = %+v, %v; want a failure", res, err)
	}
	if !strings.Contains(err.Error(), "maxRequests 3000") || !strings.Contains(err.Error(), "5 errors in 100 requests") {
		t.Fatalf("error %q does not name maxRequests", err)
	}
	f.assertClean(t)
}

func TestMirrorWarmupAbortRemovesMirror(t *testing.T) {
	f := newFixture(t, func(i int) int { return 50 })
	r := f.run(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	r.Clock.(*testutil.StepClock).OnTimer = func(n int) bool {
		if n == 8 {
			// The mirror is there mid-run, at a raised share.
			st, err := f.shifter.WarmupMirrorState(context.Background(), target())
			if err != nil || st == nil || st.Percent != 2 {
				t.Errorf("mid-run mirror state %+v, %v; want 2%%", st, err)
			}
			cancel() // Argo's abort: the supervisor cancels the run
			return false
		}
		return true
	}
	_, err := r.Execute(ctx, nil)
	if !errors.Is(ctx.Err(), context.Canceled) || err == nil {
		t.Fatalf("Execute after abort = %v", err)
	}
	f.assertClean(t)
}

// A plugin restart mid-warm-up: the old process left the mirror (at 16 %);
// the new one finds it, starts again from startPercent and removes it at
// the end. A bare Remove (Abort/Terminate after a restart, with no run in
// memory) removes it as well.
func TestMirrorWarmupAfterRestart(t *testing.T) {
	f := newFixture(t, func(i int) int { return 40 - 8*i })
	if err := f.shifter.SetWarmupMirror(context.Background(), target(), shift.WarmupMirror{Percent: 16}); err != nil {
		t.Fatal(err)
	}
	if err := Remove(context.Background(), f.shifter, target()); err != nil {
		t.Fatal(err)
	}
	f.assertClean(t)

	if err := f.shifter.SetWarmupMirror(context.Background(), target(), shift.WarmupMirror{Percent: 16}); err != nil {
		t.Fatal(err)
	}
	r := f.run(t, nil)
	f.mu.Lock()
	f.percents = nil
	f.mu.Unlock()
	if _, err := r.Execute(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	first := f.percents[0]
	f.mu.Unlock()
	if first != 1 {
		t.Fatalf("first write after restart at %g%%, want startPercent 1", first)
	}
	f.assertClean(t)
}

func TestConfigRefusesMirrorWithoutSideEffectsOptIn(t *testing.T) {
	base := `{"source":"envoy","prometheus":{"address":"http://p:9090"},"envoy":{"canaryCluster":"c"}`
	for _, tc := range []struct {
		raw, wantErr string
	}{
		{base + `}`, "mirror.allowSideEffects"},
		{base + `,"methods":["GET","POST"]}`, "mirror.allowSideEffects"},
		{base + `,"methods":["GET","HEAD"]}`, ""},
		{base + `,"allowSideEffects":true}`, ""},
		{base + `,"allowSideEffects":true,"maxPercent":0.5}`, "mirror.maxPercent"},
		{base + `,"allowSideEffects":true,"factor":1}`, "mirror.factor"},
		{`{"source":"load","allowSideEffects":true}`, "mirror.source"},
	} {
		_, err := Parse([]byte(tc.raw))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.raw, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one naming %s", tc.raw, err, tc.wantErr)
		}
	}
	_, err := Parse([]byte(base + `}`))
	if err == nil || !strings.Contains(err.Error(), "-shadow") {
		t.Fatalf("the refusal must say how to fix it (the -shadow host): %v", err)
	}
}
