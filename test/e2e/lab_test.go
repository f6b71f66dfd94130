package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	argoclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/test/testenv"
	"github.com/prometheus/common/model"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Where the lab listens (lab/scripts/mesh.sh defaults).
const (
	gatewayURL    = "http://127.0.0.1:18080/"
	envoyAdminURL = "http://127.0.0.1:15000"
	prometheusURL = "http://127.0.0.1:19090"
	labNetns      = "danki-lab"
	requests      = 1000
)

// TestLabCanarySplit is the lab's acceptance test: lab up, the sample app as
// a Rollout behind the Istio gateway (pods are real JVMs), image → v2, the
// rollout pauses at setWeight 50 and 1,000 requests through Envoy split
// about evenly between v1 and v2; Prometheus has a p99 per version from
// Envoy's histograms; lab down leaves no process behind.
func TestLabCanarySplit(t *testing.T) {
	l := startLab(t)
	ctx, kube, argo, root := l.ctx, l.kube, l.argo, l.root
	l.apply(t, filepath.Join(root, "lab", "manifests"))
	rollouts := argo.ArgoprojV1alpha1().Rollouts("default")
	l.waitHealthy(t, "app", 2)
	assertJVMPods(t, ctx, kube, 2)

	t.Log("image → danki.dev/sample-app:v2")
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"danki.dev/sample-app:v2"}]`
	if _, err := rollouts.Patch(ctx, "app", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("set image v2: %v", err)
	}
	l.waitRollout(t, "default", "app", 5*time.Minute, "Rollout app paused at setWeight 50 with a ready canary", func(ro *v1alpha1.Rollout) (bool, string) {
		w := ro.Status.Canary.Weights
		if w == nil {
			return false, fmt.Sprintf("phase %s, no weights yet", ro.Status.Phase)
		}
		return ro.Status.Phase == v1alpha1.RolloutPhasePaused && w.Canary.Weight == 50 && ro.Status.UpdatedReplicas >= 1 && ro.Status.AvailableReplicas >= 3,
			fmt.Sprintf("phase %s, step %v, weights %d/%d, updated %d, available %d", ro.Status.Phase,
				ptrVal(ro.Status.CurrentStepIndex), w.Stable.Weight, w.Canary.Weight, ro.Status.UpdatedReplicas, ro.Status.AvailableReplicas)
	})
	assertJVMPods(t, ctx, kube, 3)
	// The rollout's weights are in the VirtualService; wait until Envoy has
	// the 50/50 route and healthy endpoints on both sides.
	waitFor(t, ctx, 2*time.Minute, "Envoy routes 50/50 to healthy stable and canary endpoints", envoyReady)

	t.Logf("sending %d requests through the gateway %s", requests, gatewayURL)
	counts, errs := sendRequests(ctx, requests, 4)
	t.Logf("answers by version: %v; failed requests: %d", counts, len(errs))
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed, first: %v", len(errs), requests, errs[0])
	}
	if len(counts) != 2 || counts["v1"]+counts["v2"] != requests-len(errs) {
		t.Fatalf("answers by version %v: want only v1 and v2", counts)
	}
	// Binomial(1000, 0.5) has σ ≈ 16: ±100 is 6σ, and still catches a 60/40 split.
	for _, v := range []string{"v1", "v2"} {
		if n := counts[v]; n < 400 || n > 600 {
			t.Errorf("%s answered %d of %d requests; want 400–600 at setWeight 50", v, n, requests)
		}
	}

	// Warm-up writes through the gateway run the real code path but keep
	// nothing: every pod still counts zero orders.
	l.assertWarmupWritesRollBack(t)
	if l.meshed() {
		l.assertCertRenewal(t, &runningPods(t, l, "app=sample-app")[0])
	}

	// Prometheus: p99 per version from Envoy's upstream histograms. Envoy
	// flushes histograms every 5 s and rate() needs two scrapes.
	api := labPrometheus(t)
	for _, side := range []string{"stable", "canary"} {
		q := fmt.Sprintf(`histogram_quantile(0.99, sum by (le) (rate(envoy_cluster_upstream_rq_time_bucket{cluster_name=~"outbound\\|8080\\|\\|app-%s.*"}[1m])))`, side)
		var p99 float64
		waitFor(t, ctx, 2*time.Minute, "Prometheus p99 for app-"+side, func() (bool, string) {
			v, _, _, err := api.Query(ctx, q, time.Now())
			if err != nil {
				return false, err.Error()
			}
			vec, ok := v.(model.Vector)
			if !ok || len(vec) != 1 {
				return false, fmt.Sprintf("result %v", v)
			}
			p99 = float64(vec[0].Value)
			return !math.IsNaN(p99) && p99 > 0, fmt.Sprintf("p99 %v", p99)
		})
		t.Logf("p99 via Envoy for app-%s: %.1f ms  (%s)", side, p99, q)
	}
}

// lab is a running lab for one test, torn down (and checked to leave no
// process behind) when the test ends.
type lab struct {
	ctx        context.Context
	root       string
	kubeconfig string
	kube       kubernetes.Interface
	argo       argoclient.Interface
	istio      istioclient.Interface
	// mesh is the lab's LAB_MESH; podMesh is danki's identity for the
	// test's own requests to pods (nil without sidecars: plaintext).
	mesh    string
	podMesh *mtls.Mesh
}

func startLab(t *testing.T) *lab {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end lab test: builds and starts the whole lab (skipped with -short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the lab's pod network (ip netns, veth) needs root")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := testenv.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(cache, "lab", "run")
	if pids := alivePIDs(t, filepath.Join(run, "pids")); len(pids) > 0 {
		// A failure, not a skip: `make test` passing with its end-to-end
		// tests skipped would claim what nothing checked.
		t.Fatalf("a lab is already running (pids %v): run `make lab-down` first (with the same DANKI_CACHE as lab-up); this test brings its own up and down", pids)
	}
	// One lab's whole life, every phase of its test: TestLabDankiRollout's
	// thirteen rollouts take ~34 min (its warm-ups slow down, as they should,
	// while the users on stable pay for them: the neighbour guard).
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	t.Cleanup(cancel)

	// Lab up (first run builds istiod, the Argo controller, …: minutes).
	var started []int
	t.Cleanup(func() {
		// down.sh fails when anything the lab started (the controller's
		// plugin processes included) outlives it.
		if err := script(t, context.Background(), root, "lab/scripts/down.sh"); err != nil {
			t.Errorf("lab/scripts/down.sh: %v", err)
		}
		assertAllGone(t, started, filepath.Join(cache, "lab", "bin", "sample-app.jar"))
	})
	t.Log("lab up …")
	if err := script(t, ctx, root, "lab/scripts/up.sh"); err != nil {
		t.Fatalf("lab/scripts/up.sh: %v", err)
	}
	started = alivePIDs(t, filepath.Join(run, "pids"))
	if len(started) < 8 {
		t.Fatalf("lab up started %d processes (%v), want etcd, API server, controller-manager, scheduler, kwok, runner, istiod, Envoy, Prometheus, Argo", len(started), started)
	}
	kubeconfig := filepath.Join(cache, "lab", "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{ctx: ctx, root: root, kubeconfig: kubeconfig,
		kube: kubernetes.NewForConfigOrDie(cfg), argo: argoclient.NewForConfigOrDie(cfg), istio: istioclient.NewForConfigOrDie(cfg)}
	l.startMesh(t, cache)
	return l
}

// apply runs kubectl apply -f on each path.
func (l *lab) apply(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		t.Logf("kubectl apply -f %s", p)
		out, err := exec.CommandContext(l.ctx, "kubectl", "--kubeconfig", l.kubeconfig, "apply", "-f", p).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", p, err, out)
		}
	}
}

// script runs a lab script, streaming its progress into the test log.
func script(t *testing.T, ctx context.Context, root, path string) error {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(root, path))
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	err := cmd.Run()
	pw.Close()
	wg.Wait()
	return err
}

// assertJVMPods checks that n pods of the sample app run, each as a real
// java process whose PID the runner reported as the container ID.
func assertJVMPods(t *testing.T, ctx context.Context, kube kubernetes.Interface, n int) {
	t.Helper()
	pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=sample-app"})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		// The app container (with the mesh on, beside istio-proxy).
		i := slices.IndexFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == "app" })
		if i < 0 {
			continue
		}
		cid := p.Status.ContainerStatuses[i].ContainerID
		pid, err := strconv.Atoi(strings.TrimPrefix(cid, "danki-lab://"))
		if err != nil {
			t.Errorf("pod %s: container ID %q is not a lab process", p.Name, cid)
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "java" {
			t.Errorf("pod %s: process %d is %q (%v), want java", p.Name, pid, strings.TrimSpace(string(comm)), err)
			continue
		}
		if !strings.HasPrefix(p.Status.PodIP, "10.244.0.") {
			t.Errorf("pod %s: IP %q not from the lab node's pod CIDR 10.244.0.0/24", p.Name, p.Status.PodIP)
		}
		running++
	}
	if running != n {
		t.Fatalf("%d sample-app pods run as JVMs, want %d", running, n)
	}
	t.Logf("%d sample-app pods are java processes in the lab's network namespace", n)
}

var (
	routeWeight = regexp.MustCompile(`"name":\s*"outbound\|8080\|\|app-(stable|canary)\.default\.svc\.cluster\.local",\s*"weight":\s*50\b`)
	healthyEP   = regexp.MustCompile(`(?m)^outbound\|8080\|\|app-(stable|canary)\.default\.svc\.cluster\.local::10\.244\.0\.\d+:8080::health_flags::healthy$`)
)

func envoyReady() (bool, string) {
	routes, err := adminGet("/config_dump?resource=dynamic_route_configs")
	if err != nil {
		return false, err.Error()
	}
	clusters, err := adminGet("/clusters")
	if err != nil {
		return false, err.Error()
	}
	weights := map[string]bool{}
	for _, m := range routeWeight.FindAllStringSubmatch(routes, -1) {
		weights[m[1]] = true
	}
	healthy := map[string]int{}
	for _, m := range healthyEP.FindAllStringSubmatch(clusters, -1) {
		healthy[m[1]]++
	}
	return len(weights) == 2 && healthy["stable"] >= 1 && healthy["canary"] >= 1,
		fmt.Sprintf("weight-50 routes %v, healthy endpoints %v", weights, healthy)
}

// sendRequests sends n GETs through the gateway on `workers` keep-alive
// connections and counts which version answered (X-Version header, checked
// against the JSON body).
func sendRequests(ctx context.Context, n, workers int) (map[string]int, []error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}}
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		errs   []error
		wg     sync.WaitGroup
		next   = make(chan int)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				v, err := oneRequest(ctx, client, i)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					counts[v]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return counts, errs
}

// assertWarmupWritesRollBack sends marked writes the way danki's warm-up
// does, straight to each pod (over mTLS as danki when the lab has sidecars;
// the gateway's route strips the marker from user requests,
// lab/manifests/20-gateway.yaml), and checks through the gateway that
// nothing was kept.
func (l *lab) assertWarmupWritesRollBack(t *testing.T) {
	t.Helper()
	pods := runningPods(t, l, "app=sample-app")
	if len(pods) == 0 {
		t.Fatal("no running sample-app pod with an IP to send warm-up writes to")
	}
	decode := func(what string, status int, b []byte, err error) map[string]any {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil || status != http.StatusOK {
			t.Fatalf("%s: status %d %.200s, %v", what, status, b, err)
		}
		return doc
	}
	order := `{"email":"warmup@example.com","lines":[{"sku":"ABC-0001-abcdef","qty":2,"price":"9.99"}]}`
	marked := http.Header{"X-Danki-Warmup": {"1"}}
	for i := 0; i < 10; i++ {
		p := &pods[i%len(pods)]
		status, b, err := l.podDo(l.ctx, p, http.MethodPost, 8080, "/orders", marked, strings.NewReader(order))
		if doc := decode("warm-up POST /orders to "+p.Name, status, b, err); doc["committed"] != false {
			t.Fatalf("warm-up POST /orders to %s answered %v: want committed false", p.Name, doc)
		}
	}
	for i := 0; i < 10; i++ {
		resp, b, err := send(l.ctx, http.DefaultClient, http.MethodGet, gatewayURL+"orders/count", "", nil)
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if doc := decode("GET /orders/count through the gateway", status, b, err); doc["count"] != float64(0) {
			t.Fatalf("GET /orders/count after warm-up writes answered %v: want count 0", doc)
		}
	}
	t.Logf("10 warm-up POST /orders straight to %d pods (LAB_MESH=%s): all rolled back, every pod counts 0 orders", len(pods), l.mesh)
}

// runningPods lists namespace default's running pods with an IP that match
// selector.
func runningPods(t *testing.T, l *lab, selector string) []corev1.Pod {
	t.Helper()
	pods, err := l.kube.CoreV1().Pods("default").List(l.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out
}

// alivePIDs lists the live processes recorded in the lab's pid files.
func alivePIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && syscall.Kill(pid, 0) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertAllGone checks that lab down stopped every process lab up started,
// the pods' JVMs (they lived in the network namespace) and the namespace.
func assertAllGone(t *testing.T, pids []int, jar string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d (%s) still running after lab down", pid, cmdline(pid))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if regexp.MustCompile(`(?m)^` + labNetns + `\b`).Match(out) {
		t.Errorf("network namespace %s still exists after lab down", labNetns)
	}
	if java, _ := exec.Command("pgrep", "-f", regexp.QuoteMeta(jar)).Output(); len(bytes.TrimSpace(java)) > 0 {
		t.Errorf("sample app JVMs still running after lab down: pids %s", bytes.Fields(java))
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " ")
}

func ptrVal(p *int32) any {
	if p == nil {
		return "-"
	}
	return *p
}
