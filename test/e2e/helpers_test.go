package e2e

// Helpers every lab test shares: waiting, one HTTP request, the sample
// app's and the gateway Envoy's request counts.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/pkg/podcpu"
	"github.com/danki-dev/danki/pkg/warmup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitFor polls cond every second until it holds, logging each new state,
// and fails the test after limit (or once ctx has ended).
func waitFor(t *testing.T, ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(limit)
	last := ""
	for {
		ok, state := cond()
		if ok {
			t.Logf("%s (after %.1f s)", what, time.Since(start).Seconds())
			return
		}
		if state != last {
			t.Logf("waiting for %s: %s", what, state)
			last = state
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not reached after %s; last state: %s", what, limit, state)
		}
		time.Sleep(time.Second)
	}
}

// waitRollout waits (waitFor) until cond holds for the Rollout ns/name and
// returns the last one read.
func (l *lab) waitRollout(t *testing.T, ns, name string, limit time.Duration, what string, cond func(*v1alpha1.Rollout) (bool, string)) *v1alpha1.Rollout {
	t.Helper()
	var last *v1alpha1.Rollout
	waitFor(t, l.ctx, limit, what, func() (bool, string) {
		ro, err := l.argo.ArgoprojV1alpha1().Rollouts(ns).Get(l.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = ro
		return cond(ro)
	})
	return last
}

// waitHealthy waits until Rollout default/name is Healthy with n available
// pods.
func (l *lab) waitHealthy(t *testing.T, name string, n int32) {
	t.Helper()
	l.waitRollout(t, "default", name, 5*time.Minute, fmt.Sprintf("Rollout %s Healthy with %d available pods", name, n), func(ro *v1alpha1.Rollout) (bool, string) {
		return ro.Status.Phase == v1alpha1.RolloutPhaseHealthy && ro.Status.AvailableReplicas == n,
			fmt.Sprintf("phase %s, %d available: %s", ro.Status.Phase, ro.Status.AvailableReplicas, ro.Status.Message)
	})
}

// send sends one request (with Host host, unless "") and reads the answer:
// the response (nil if none came), what was read of its body, and the
// first error.
func send(ctx context.Context, client *http.Client, method, url, host string, body io.Reader) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, nil, err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// get returns the body of a GET.
func get(ctx context.Context, url string) (string, error) {
	_, b, err := send(ctx, http.DefaultClient, http.MethodGet, url, "", nil)
	return string(b), err
}

// adminGet GETs a path of the gateway Envoy's admin interface.
func adminGet(path string) (string, error) {
	return get(context.Background(), envoyAdminURL+path)
}

// versionOf reads the version from the sample app's JSON answer.
func versionOf(body []byte) (string, error) {
	var doc struct{ Version string }
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("body %q: %w", body, err)
	}
	return doc.Version, nil
}

// oneRequest sends one GET through the gateway and returns the version that
// answered (X-Version header, checked against the JSON body).
func oneRequest(ctx context.Context, client *http.Client, i int) (string, error) {
	resp, body, err := send(ctx, client, http.MethodGet, gatewayURL+"?seed="+strconv.Itoa(i), "", nil)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("request %d: status %d: %s", i, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	v, err := versionOf(body)
	if err != nil {
		return "", fmt.Errorf("request %d: %w", i, err)
	}
	if h := resp.Header.Get("X-Version"); h != v {
		return "", fmt.Errorf("request %d: X-Version %q but body says %q", i, h, v)
	}
	return v, nil
}

// getHost sends one GET through the gateway with the given Host and returns
// its status.
func getHost(ctx context.Context, host string) (int, error) {
	resp, _, err := send(ctx, http.DefaultClient, http.MethodGet, gatewayURL, host, nil)
	if resp == nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

var requestsSeries = regexp.MustCompile(`(?m)^sample_app_requests_total\{path="/",[^}]*\} (\d+)`)

// servedRequests sums the "/" requests the pods of namespace ns with the
// given pod-template hash have served (their /metrics; readiness probes go
// to /healthz) and adds their IPs to ips (unless nil).
func (l *lab) servedRequests(ns, hash string, ips map[string]bool) (int64, error) {
	pods, err := l.kube.CoreV1().Pods(ns).List(l.ctx, metav1.ListOptions{LabelSelector: "rollouts-pod-template-hash=" + hash})
	if err != nil {
		return 0, err
	}
	var total int64
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" {
			continue
		}
		if ips != nil {
			ips[p.Status.PodIP] = true
		}
		body, err := l.podGet(l.ctx, p, 8080, "/metrics")
		if err != nil {
			return 0, err
		}
		for _, m := range requestsSeries.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			total += n
		}
	}
	return total, nil
}

// hostRequests matches Envoy's per-host request counter in admin /clusters:
// "<cluster>::<ip>:<port>::rq_total::<n>".
var hostRequests = regexp.MustCompile(`(?m)^([^:\n]+)::(\d+\.\d+\.\d+\.\d+):(\d+)::rq_total::(\d+)$`)

// hostCount is one of the gateway Envoy's per-host request counters: the
// requests it sent to ip:port in cluster.
type hostCount struct {
	cluster, ip, port string
	n                 int64
}

// envoyHostCounts reads the gateway Envoy's per-host request counters.
func envoyHostCounts() ([]hostCount, error) {
	out, err := adminGet("/clusters")
	if err != nil {
		return nil, err
	}
	var counts []hostCount
	for _, m := range hostRequests.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[4], 10, 64)
		counts = append(counts, hostCount{cluster: m[1], ip: m[2], port: m[3], n: n})
	}
	return counts, nil
}

// awaitOneCanaryWarm waits for the danki/warmup step of a Rollout with one
// canary pod (VirtualService vs = the Rollout's name, route to canaryHost)
// to end, checking every second that the canary has no weight until then;
// it fails unless the step succeeded with the pod converged after at least
// the stopping rule's minimum and its first window's p99 ≥ 3 × its last (the
// pod was cold, and the warm-up measured it). what names the app in
// messages.
func (l *lab) awaitOneCanaryWarm(t *testing.T, rollout, canaryHost string, limit time.Duration, what string) (*warmupState, *v1alpha1.Rollout) {
	t.Helper()
	rollouts := l.argo.ArgoprojV1alpha1().Rollouts("default")
	var st *warmupState
	var ro *v1alpha1.Rollout
	// The canary pod's CPU request as the step's load runs: lowered to the
	// least weight while it warms (yieldCPU, on by default).
	yielded, seen := false, map[string]bool{}
	waitFor(t, l.ctx, limit, "danki/warmup of the "+what+" canary finished", func() (bool, string) {
		var err error
		if ro, err = rollouts.Get(l.ctx, rollout, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		st = nil
		if ro.Status.CurrentPodHash != ro.Status.StableRS {
			st = warmupStatus(ro)
		}
		if st != nil && (st.Phase == v1alpha1.StepPluginPhaseSuccessful || st.Phase == v1alpha1.StepPluginPhaseFailed) {
			return true, ""
		}
		if st != nil {
			for _, cpu := range l.canaryCPU(t, ro) {
				seen[cpu] = true
				yielded = yielded || cpu == podcpu.YieldRequest
			}
		}
		w, err := l.canaryWeight(rollout, canaryHost)
		if err != nil {
			return false, err.Error()
		}
		if w != 0 {
			// The step may have ended between the two reads.
			if now, err := rollouts.Get(l.ctx, rollout, metav1.GetOptions{}); err == nil {
				if s := warmupStatus(now); s != nil && s.Phase == v1alpha1.StepPluginPhaseSuccessful {
					st, ro = s, now
					return true, ""
				}
			}
			t.Fatalf("canary weight %d on VirtualService %s before the %s warm-up finished: %s", w, rollout, what, describe(ro))
		}
		if st == nil {
			return false, describe(ro)
		}
		return false, fmt.Sprintf("warm-up %s, %d requests: %s", st.Phase, st.Requests, st.Summary)
	})
	t.Logf("warm-up %s: %s", st.Phase, st.Message)
	t.Logf("p99 by window (last six): %s; first %s, last %s; %d requests", strings.Join(st.P99Trend, " → "), st.FirstP99, st.LastP99, st.Requests)
	if st.Phase != v1alpha1.StepPluginPhaseSuccessful {
		t.Fatalf("the %s canary's warm-up ended %s: %s", what, st.Phase, st.Message)
	}
	// The pod yielded its CPU while it warmed and has its template's
	// request back (in its spec and, as the lab's runner reports it, in
	// its status) before users reach it.
	template := ro.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().String()
	t.Logf("canary CPU requests seen while it warmed: %v; template %s", slices.Sorted(maps.Keys(seen)), template)
	if !yielded {
		t.Errorf("the %s canary pod never had CPU request %s while it warmed (seen %v)", what, podcpu.YieldRequest, slices.Sorted(maps.Keys(seen)))
	}
	if !strings.Contains(st.Message, "restored on 1 pod(s)") {
		t.Errorf("the step's message does not say the CPU request was restored: %s", st.Message)
	}
	for _, cpu := range l.canaryCPU(t, ro) {
		if cpu != template+"/"+template {
			t.Errorf("after the warm-up the %s canary pod's CPU request (spec/status) is %s; want its template's %s", what, cpu, template)
		}
	}
	defaults := warmup.Config{}.WithDefaults()
	minStop := int(defaults.MinStop())
	if st.Converged != 1 || st.Requests < minStop {
		t.Fatalf("warm-up status %+v: want the 1 canary pod converged after ≥ %d requests (the stopping rule's minimum)", st, minStop)
	}
	first, err1 := time.ParseDuration(st.FirstP99)
	last, err2 := time.ParseDuration(st.LastP99)
	if err1 != nil || err2 != nil {
		t.Fatalf("warm-up status firstP99 %q, lastP99 %q: %v %v", st.FirstP99, st.LastP99, err1, err2)
	}
	if first < 3*last {
		t.Errorf("first window p99 %s is not ≥ 3× the last window's %s: the %s canary was not cold, or the warm-up did not measure it", first, last, what)
	}
	return st, ro
}

// canaryCPU lists the CPU request of each canary pod's first container:
// during a warm-up its spec's, after it "spec/status" (the status as the
// kubelet, the lab's runner, applied it; "-" when it reports none).
func (l *lab) canaryCPU(t *testing.T, ro *v1alpha1.Rollout) []string {
	t.Helper()
	pods, err := l.kube.CoreV1().Pods("default").List(l.ctx, metav1.ListOptions{LabelSelector: "rollouts-pod-template-hash=" + ro.Status.CurrentPodHash})
	if err != nil {
		t.Logf("list canary pods: %v", err)
		return nil
	}
	warm := false
	if st := warmupStatus(ro); st != nil && st.Phase == v1alpha1.StepPluginPhaseSuccessful {
		warm = true
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		cpu := p.Spec.Containers[0].Resources.Requests.Cpu().String()
		if warm {
			applied := "-"
			if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Resources != nil {
				applied = p.Status.ContainerStatuses[0].Resources.Requests.Cpu().String()
			}
			cpu += "/" + applied
		}
		out = append(out, cpu)
	}
	return out
}
