package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// TestLabMirrorWarmup is the mirror source end to end (issue #18): users
// send GETs and order writes (POST /orders) through the lab's gateway; a
// cold canary (v2) is warmed by mirrored user traffic only (danki/warmup
// with mirror.mode only). It checks that the lab's Envoy really mirrors
// (request_mirror_policies in its route config, to the canary's cluster),
// that the warm-up converges on the canary's Envoy histograms with its
// window table, that no user got an answer from the canary before its
// weight rose, that the mirror is gone afterwards (VirtualService and
// Envoy), and that the canary kept none of the mirrored writes (its
// /orders/count stays 0: the sample app skips writes for a -shadow Host).
func TestLabMirrorWarmup(t *testing.T) {
	l := startLab(t)
	dir := filepath.Join(l.root, "lab", "manifests")
	l.apply(t, filepath.Join(dir, "10-services.yaml"), filepath.Join(dir, "20-gateway.yaml"), filepath.Join(dir, "danki"))
	l.waitHealthy(t, "app", 2)
	waitFor(t, l.ctx, 2*time.Minute, "the gateway answers", func() (bool, string) {
		_, err := oneRequest(l.ctx, http.DefaultClient, 0)
		return err == nil, fmt.Sprint(err)
	})
	users := startUsers(t, l.ctx, 60, 8)
	d := &dankiLab{lab: l}
	d.warmup, d.env = exampleConfig(t, l)
	watch := watchTraffic(t, l.ctx, l.istio)

	mirror := map[string]any{
		"mode": "only", "allowSideEffects": true, "startPercent": 10, "maxPercent": 50, "factor": 2,
		"interval": "10s", "poll": "3s", "source": "envoy",
		"prometheus": map[string]any{"address": prometheusURL},
		"envoy":      map[string]any{"canaryCluster": "outbound|8080||app-canary.default.svc.cluster.local"},
	}
	version, start := d.deploy(t, nil, map[string]any{"mirror": mirror, "deadline": "6m"})

	// The lab's istiod + Envoy mirror: the gateway's route config gets a
	// request_mirror_policies entry to the canary's cluster.
	waitFor(t, l.ctx, 2*time.Minute, "Envoy's route config mirrors to the canary", func() (bool, string) {
		routes, err := adminGet("/config_dump?resource=dynamic_route_configs")
		if err != nil {
			return false, err.Error()
		}
		i := strings.Index(routes, "request_mirror_policies")
		if i < 0 {
			return false, "no request_mirror_policies in the route config"
		}
		snippet := routes[i:min(len(routes), i+400)]
		t.Logf("Envoy route config: %s", strings.Join(strings.Fields(snippet), " "))
		return strings.Contains(snippet, "app-canary.default.svc.cluster.local"), "mirror policy not to app-canary"
	})

	st := d.awaitWarmup(t, 7*time.Minute)
	// The canary's weight stayed 0 until the last look that saw it 0 before
	// the first rise (sampled every 250 ms): the step may have ended, and
	// Argo set the next weight, a moment before this test saw it end. A
	// user answered by the canary before then met it at weight 0.
	warmed := time.Now()
	for _, p := range watch.since(start) {
		if p.canaryWeight > 0 {
			break
		}
		warmed = p.at
	}
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful || !strings.Contains(st.Message, "converged on mirrored traffic") {
		t.Fatalf("mirror warm-up of %s: %s: %s", version, st.Phase, st.Message)
	}
	// The report counts mirrored requests apart from users' (none).
	if !strings.Contains(st.Message, "mirrored, 0 from users (weight 0 at every look)") {
		t.Fatalf("mirror warm-up of %s: the report does not count its mirrored requests apart from 0 users': %s", version, st.Message)
	}
	t.Logf("mirror warm-up of %s took %.0f s: %s", version, warmed.Sub(start).Seconds(), st.Message)

	// The mirror is gone: from the VirtualService and from Envoy.
	vs, err := l.istio.NetworkingV1().VirtualServices("default").Get(l.ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vs.Annotations[wellknown.MirrorAnnotation]; ok || len(vs.Spec.Http[0].Mirrors) > 0 || len(vs.Spec.Http) != 1 {
		t.Fatalf("mirror left on the VirtualService: annotations %v, http %v", vs.Annotations, vs.Spec.Http)
	}
	waitFor(t, l.ctx, time.Minute, "Envoy's route config has no mirror", func() (bool, string) {
		routes, err := adminGet("/config_dump?resource=dynamic_route_configs")
		if err != nil {
			return false, err.Error()
		}
		return !strings.Contains(routes, "request_mirror_policies"), "request_mirror_policies still there"
	})

	// The canary kept none of the mirrored writes. Users' own writes reach
	// it once Argo raised its weight (the step may have ended a moment
	// before this test saw it): stop the users, then every order on the
	// canary must be one a user got its answer from (up to 2 more: writes
	// cut in flight by the stop).
	r := users.stop()
	ro, err := l.argo.ArgoprojV1alpha1().Rollouts("default").Get(l.ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := l.kube.CoreV1().Pods("default").List(l.ctx, metav1.ListOptions{LabelSelector: shift.PodTemplateHashLabel + "=" + ro.Status.CurrentPodHash})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("canary pods: %v (%d)", err, len(pods.Items))
	}
	kept := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		body, err := l.podGet(l.ctx, p, 8080, "/orders/count")
		if err != nil {
			t.Fatalf("canary pod %s /orders/count: %v", p.Name, err)
		}
		var c struct{ Count int }
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatalf("canary pod %s /orders/count %q: %v", p.Name, body, err)
		}
		kept += c.Count
		t.Logf("canary pod %s: /orders/count %s", p.Name, strings.TrimSpace(body))
	}
	if own := r.postsBy(version); kept > own+2 {
		t.Fatalf("the canary pods keep %d orders, users' own writes answered by %s were %d: mirrored writes were kept", kept, version, own)
	}

	// No user was answered by the canary before its weight rose.
	abortRollout(t, l)
	t.Logf("users: %d GETs and %d order writes through the gateway, %d errors; by version before the warm-up ended: %v",
		r.gets, r.posts, r.errors, r.before(warmed))
	if n := r.before(warmed)[version]; n > 0 {
		t.Fatalf("%d user requests answered by the canary %s before the warm-up ended", n, version)
	}
	if r.posts == 0 || r.before(warmed)["v1"] == 0 {
		t.Fatal("no user traffic measured")
	}
}

// userTraffic sends GETs and order writes through the gateway and records
// which version answered each, and when.
type userTraffic struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                  sync.Mutex
	answers             []userAnswer
	gets, posts, errors int
}

type userAnswer struct {
	at      time.Time
	version string
	post    bool
}

// startUsers sends qps requests a second on workers connections; every
// fifth is a POST /orders.
func startUsers(t *testing.T, ctx context.Context, qps, workers int) *userTraffic {
	ctx, cancel := context.WithCancel(ctx)
	u := &userTraffic{cancel: cancel}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}}
	every := time.Duration(workers) * time.Second / time.Duration(qps)
	for w := range workers {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := w; ; i += workers {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				post := i%5 == 0
				v, err := userRequest(ctx, client, i, post)
				u.mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil:
					u.errors++
				case err == nil:
					u.answers = append(u.answers, userAnswer{time.Now(), v, post})
					if post {
						u.posts++
					} else {
						u.gets++
					}
				}
				u.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { u.stop() })
	return u
}

func (u *userTraffic) stop() *userTraffic {
	u.cancel()
	u.wg.Wait()
	return u
}

// postsBy counts the order writes answered by version.
func (u *userTraffic) postsBy(version string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, a := range u.answers {
		if a.post && a.version == version {
			n++
		}
	}
	return n
}

// before counts the answers received before t, by version.
func (u *userTraffic) before(t time.Time) map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]int{}
	for _, a := range u.answers {
		if a.at.Before(t) {
			out[a.version]++
		}
	}
	return out
}

func userRequest(ctx context.Context, client *http.Client, i int, post bool) (string, error) {
	method, url := http.MethodGet, gatewayURL+"?seed="+strconv.Itoa(i)
	var body io.Reader
	if post {
		method, url = http.MethodPost, gatewayURL+"orders"
		body = strings.NewReader(`{"email":"user@example.com","lines":[{"sku":"ABC-0001-abcdef","qty":2,"price":"4.50"}]}`)
	}
	resp, b, err := send(ctx, client, method, url, "", body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
	}
	v, err := versionOf(b)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", method, url, err)
	}
	return v, nil
}
