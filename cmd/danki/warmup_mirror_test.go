package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// runWarmupMirror runs `danki warmup mirror ARGS` against a fake Istio
// clientset.
func runWarmupMirror(t *testing.T, client istioclient.Interface, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithIstio(t, client, append([]string{"warmup", "mirror"}, args...)...)
}

// mirrorPrometheus serves the canary's Envoy histogram: 100 requests per
// query, the first cold ones partly slow (~200 ms), later all ~3 ms. It
// records the mirror share on the VirtualService at every histogram query.
func mirrorPrometheus(t *testing.T, client istioclient.Interface) (*testutil.Prometheus, func() []float64) {
	prom := testutil.NewPrometheus(t)
	var (
		mu      sync.Mutex
		fetches int
		seen    []float64
	)
	bounds := []float64{1, 5, 10, 25, 50, 100, 250, 500, math.Inf(1)}
	prom.Respond(func(q string) (int, string) {
		switch {
		case strings.Contains(q, "_bucket"):
			mu.Lock()
			slow := max(0, 40-8*fetches)
			fetches++
			mu.Unlock()
			if st, err := shift.New(client, nil).WarmupMirrorState(context.Background(), shift.Target{Namespace: "shop", VirtualService: "reviews"}); err == nil && st != nil {
				mu.Lock()
				seen = append(seen, st.Percent)
				mu.Unlock()
			}
			return 200, testutil.FastSlowBucketsJSON(bounds, slow)
		case strings.Contains(q, `response_code!=""`):
			return 200, testutil.VectorJSON(testutil.SampleJSON(nil, 100))
		default:
			return 200, testutil.VectorJSON()
		}
	})
	return prom, func() []float64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]float64(nil), seen...)
	}
}

func TestWarmupMirrorConvergesAndRemovesTheMirror(t *testing.T) {
	vs := shiftVS()
	client := fake.NewSimpleClientset(vs.DeepCopy())
	prom, shares := mirrorPrometheus(t, client)
	out, _, err := runWarmupMirror(t, client, append(hostFlags,
		"--method", "GET", "--source", "envoy", "--prometheus", prom.URL,
		"--canary-cluster", "outbound|8080||reviews-canary.shop.svc.cluster.local",
		"--start-percent", "5", "--max-percent", "20", "--interval", "10ms", "--poll", "10ms")...)
	if err != nil {
		t.Fatalf("danki warmup mirror: %v\n%s", err, out)
	}
	for _, want := range []string{
		"mirror warm-up on VirtualService shop/reviews",
		"| window | requests |",
		"converged on mirrored traffic after",
		"mirrored, 0 from users (weight 0 at every look)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("output:\n%s", out)
	// The share rose from 5 % and never above 20 %.
	got := shares()
	if len(got) == 0 || got[0] != 5 || slices.Max(got) != 20 {
		t.Errorf("mirror shares seen by Prometheus queries %v: want from 5 up to 20", got)
	}
	// The mirror is gone: the VirtualService is as it was.
	after, err := client.NetworkingV1().VirtualServices("shop").Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&vs.Spec, &after.Spec) || after.Annotations[wellknown.MirrorAnnotation] != "" {
		t.Fatalf("VirtualService not restored: %v %v", after.Annotations, &after.Spec)
	}
}

func TestWarmupMirrorRefusesBadInputNamingTheFlag(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "mirror.yaml")
	if err := os.WriteFile(cfg, []byte("source: envoy\nprometheus: {address: http://127.0.0.1:1}\nenvoy: {canaryCluster: c}\nmaxPercent: 30\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Writes are mirrored only with an explicit opt-in.
		{[]string{"--prometheus", "http://127.0.0.1:1", "--canary-cluster", "c"}, "--allow-side-effects (mirror.allowSideEffects)"},
		{[]string{"--method", "POST", "--prometheus", "http://127.0.0.1:1", "--canary-cluster", "c"}, "--allow-side-effects"},
		{[]string{"--method", "GET", "--source", "load"}, "--source (mirror.source)"},
		{[]string{"--method", "GET", "--prometheus", "http://127.0.0.1:1", "--canary-cluster", "c", "--max-percent", "0.5", "--start-percent", "1"}, "--max-percent (mirror.maxPercent)"},
		// --config's maxPercent 30 below a flag's start 40.
		{[]string{"--config", cfg, "--allow-side-effects", "--start-percent", "40"}, "--max-percent (mirror.maxPercent): 30"},
		{[]string{"--method", "GET", "--prometheus", "http://127.0.0.1:1", "--canary-cluster", "c", "--min-requests", "-1"}, "minRequests"},
	} {
		client := fake.NewSimpleClientset(shiftVS())
		_, _, err := runWarmupMirror(t, client, append(hostFlags, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.args, err, tc.want)
		}
		// Nothing applied.
		if w := canaryWeightOf(t, client); w != 0 {
			t.Errorf("%v: canary weight %d", tc.args, w)
		}
		vs, _ := client.NetworkingV1().VirtualServices("shop").Get(context.Background(), "reviews", metav1.GetOptions{})
		if !proto.Equal(&shiftVS().Spec, &vs.Spec) {
			t.Errorf("%v: VirtualService changed: %v", tc.args, &vs.Spec)
		}
	}
}
