package e2e

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// trafficPoint is one look at the lab's routing: the canary weight on the
// VirtualService and Envoy's request counters for the two clusters.
type trafficPoint struct {
	at             time.Time
	canaryWeight   int32
	stable, canary int64 // Envoy upstream_rq_total per cluster
}

// trafficWatch samples the VirtualService's canary weight and Envoy's
// per-cluster request counters every 250 ms, so a test can say which weights
// the ramp set, when, and what share of user requests Envoy really sent to
// the canary at each.
type trafficWatch struct {
	mu     sync.Mutex
	points []trafficPoint
	// writes is every canary weight the VirtualService was written with,
	// from a watch on it: the poll misses a rung that lasts less than one
	// of its looks (each also reads Envoy's stats, slow on a busy machine,
	// and a failed read drops the point).
	writes []weightWrite
	stop   context.CancelFunc
	done   chan struct{}
}

type weightWrite struct {
	at     time.Time
	weight int32
}

var upstreamTotal = regexp.MustCompile(`(?m)^cluster\.outbound\|8080\|\|app-(stable|canary)\.default\.svc\.cluster\.local;?\.upstream_rq_total: (\d+)$`)

func watchTraffic(t *testing.T, ctx context.Context, istio istioclient.Interface) *trafficWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &trafficWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if p, err := lookAtTraffic(ctx, istio); err == nil {
				w.mu.Lock()
				w.points = append(w.points, p)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	w.watchWrites(t, ctx, istio)
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// watchWrites records the canary weight of every version of the
// VirtualService default/app the API server sends; it returns once the
// informer has listed it.
func (w *trafficWatch) watchWrites(t *testing.T, ctx context.Context, istio istioclient.Interface) {
	factory := istioinformers.NewSharedInformerFactoryWithOptions(istio, 0,
		istioinformers.WithNamespace("default"),
		istioinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=app" }))
	record := func(obj any) {
		vs, ok := obj.(*networkingv1.VirtualService)
		if !ok {
			return
		}
		w.mu.Lock()
		w.writes = append(w.writes, weightWrite{at: time.Now(), weight: canaryWeightOf(vs)})
		w.mu.Unlock()
	}
	informer := factory.Networking().V1().VirtualServices().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		t.Fatalf("watch the VirtualService: %v", err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("watch the VirtualService: the informer never listed it")
	}
}

// weightsSince lists the distinct consecutive canary weights the
// VirtualService had from t on: the one it had at t, then every change.
func (w *trafficWatch) weightsSince(t time.Time) []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.writes, t, func(ww weightWrite, t time.Time) int { return ww.at.Compare(t) })
	if i > 0 {
		i-- // the weight in effect at t
	}
	var out []int32
	for _, ww := range w.writes[i:] {
		if len(out) == 0 || out[len(out)-1] != ww.weight {
			out = append(out, ww.weight)
		}
	}
	return out
}

// canaryWeightOf is the weight of the route to app-canary in the first HTTP
// route of the lab's VirtualService app (0 without one).
func canaryWeightOf(vs *networkingv1.VirtualService) int32 {
	var weight int32
	if len(vs.Spec.Http) > 0 {
		for _, d := range vs.Spec.Http[0].Route {
			if strings.HasPrefix(d.Destination.Host, "app-canary") {
				weight = d.Weight
			}
		}
	}
	return weight
}

func lookAtTraffic(ctx context.Context, istio istioclient.Interface) (trafficPoint, error) {
	p := trafficPoint{at: time.Now()}
	vs, err := istio.NetworkingV1().VirtualServices("default").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		return p, err
	}
	p.canaryWeight = canaryWeightOf(vs)
	stats, err := adminGet("/stats?filter=upstream_rq_total")
	if err != nil {
		return p, err
	}
	for _, m := range upstreamTotal.FindAllStringSubmatch(stats, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		if m[1] == "canary" {
			p.canary = n
		} else {
			p.stable = n
		}
	}
	return p, nil
}

// since returns the points from t on.
func (w *trafficWatch) since(t time.Time) []trafficPoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.points, t, func(p trafficPoint, t time.Time) int { return p.at.Compare(t) })
	return slices.Clone(w.points[i:])
}

// weightStep is a stretch of time at one canary weight.
type weightStep struct {
	weight   int32
	from, to time.Time
	// requests and canaryShare are Envoy's counts over the stretch, minus
	// its first settleTime (istiod's push to Envoy).
	requests    int64
	canaryShare float64
}

const settleTime = 1500 * time.Millisecond

// steps splits points into stretches of constant canary weight.
func steps(points []trafficPoint) []weightStep {
	var out []weightStep
	for i := 0; i < len(points); {
		j := i
		for j+1 < len(points) && points[j+1].canaryWeight == points[i].canaryWeight {
			j++
		}
		s := weightStep{weight: points[i].canaryWeight, from: points[i].at, to: points[j].at}
		// Count from the first point after the settle time to the last.
		k := i
		for k < j && points[k].at.Before(s.from.Add(settleTime)) {
			k++
		}
		dc, ds := points[j].canary-points[k].canary, points[j].stable-points[k].stable
		if s.requests = dc + ds; s.requests > 0 {
			s.canaryShare = float64(dc) / float64(s.requests)
		}
		out = append(out, s)
		i = j + 1
	}
	return out
}

// logSplit logs the table "weight, held, requests, canary share" and checks
// that Envoy's measured split followed every weight held long enough to
// judge: within 4 binomial standard deviations, at least 5 points.
func logSplit(t *testing.T, st []weightStep) {
	t.Helper()
	t.Log("canary weight | held   | user requests | Envoy's canary share")
	for _, s := range st {
		held := s.to.Sub(s.from)
		t.Logf("%12d%% | %5.1fs | %13d | %6.1f%%", s.weight, held.Seconds(), s.requests, 100*s.canaryShare)
		if s.requests < 150 || held < 5*time.Second {
			continue
		}
		p := float64(s.weight) / 100
		tol := math.Max(0.05, 4*math.Sqrt(p*(1-p)/float64(s.requests)))
		if math.Abs(s.canaryShare-p) > tol {
			t.Errorf("at canary weight %d%% Envoy sent %.1f%% of %d user requests to the canary (tolerance ±%.1f points)", s.weight, 100*s.canaryShare, s.requests, 100*tol)
		}
	}
}

// fmtWeights renders weights like "0 → 10 → 20".
func fmtWeights(w []int32) string {
	s := make([]string, len(w))
	for i, v := range w {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, " → ")
}
