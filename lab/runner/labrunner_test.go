package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// The test binary doubles as a pod's process: with LABRUNNER_TEST_SERVE=1 it
// serves what the sample app would (/healthz, / → version) on the address
// the runner hands it.
func TestMain(m *testing.M) {
	if os.Getenv("LABRUNNER_TEST_SERVE") == "1" {
		serveForTest()
		return
	}
	os.Exit(m.Run())
}

func serveForTest() {
	if os.Getenv("LABRUNNER_TEST_BURN") == "1" {
		burnCPUForTest()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "version=%s pod=%s slow=%s", os.Getenv("VERSION"), os.Getenv("POD_NAME"), os.Getenv("SLOW_MS"))
	})
	// What an in-cluster client reads (TestRunnerGivesHostNetworkPodsTheirServiceAccount).
	mux.HandleFunc("/in-cluster", func(w http.ResponseWriter, _ *http.Request) {
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(ServiceAccountMountPath, name))
			if err != nil {
				return "none"
			}
			return string(b)
		}
		wd, _ := os.Getwd()
		fmt.Fprintf(w, "host=%s port=%s home=%s wd=%s token=%s namespace=%s ca=%s",
			os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), os.Getenv("HOME"), wd,
			read("token"), read("namespace"), read("ca.crt"))
	})
	addr := net.JoinHostPort(os.Getenv("BIND_ADDRESS"), os.Getenv("PORT"))
	if err := http.ListenAndServe(addr, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func TestParseImage(t *testing.T) {
	for _, tc := range []struct{ in, repo, tag string }{
		{"danki.dev/sample-app:v2", "danki.dev/sample-app", "v2"},
		{"danki.dev/sample-app", "danki.dev/sample-app", "latest"},
		{"localhost:5000/app:1.0", "localhost:5000/app", "1.0"},
		{"localhost:5000/app", "localhost:5000/app", "latest"},
		{"app@sha256:abc", "app", "sha256:abc"},
	} {
		got, err := parseImage(tc.in)
		if err != nil || got.Repo != tc.repo || got.Tag != tc.tag {
			t.Errorf("parseImage(%q) = %+v, %v; want %s %s", tc.in, got, err, tc.repo, tc.tag)
		}
	}
	for _, bad := range []string{"", "app:", "a b", "@sha256:x"} {
		if _, err := parseImage(bad); err == nil {
			t.Errorf("parseImage(%q): want an error", bad)
		}
	}
}

func TestImageCommandsSet(t *testing.T) {
	m := ImageCommands{}
	if err := m.Set("danki.dev/sample-app=java -Xmx256m -jar app.jar"); err != nil {
		t.Fatal(err)
	}
	argv, tag, ok, err := m.lookup("danki.dev/sample-app:v3")
	if err != nil || !ok || tag != "v3" || strings.Join(argv, " ") != "java -Xmx256m -jar app.jar" {
		t.Fatalf("lookup = %v %q %v %v", argv, tag, ok, err)
	}
	if _, _, ok, _ := m.lookup("nginx:1.27"); ok {
		t.Error("nginx maps to nothing, lookup said it does")
	}
	for _, bad := range []string{"", "repo", "repo=", "=java", "repo:v1=java"} {
		if err := m.Set(bad); err == nil {
			t.Errorf("Set(%q): want an error", bad)
		} else if !strings.Contains(err.Error(), "REPO=COMMAND") && !strings.Contains(err.Error(), "without tag") {
			t.Errorf("Set(%q): error %q does not say how to fix it", bad, err)
		}
	}
}

func TestIPAM(t *testing.T) {
	a, err := newIPAM("10.244.0.0/29") // .3 … .6 usable
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 4; i++ {
		ip, err := a.allocate(fmt.Sprint("pod", i), netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	if strings.Join(got, " ") != "10.244.0.3 10.244.0.4 10.244.0.5 10.244.0.6" {
		t.Fatalf("allocated %v", got)
	}
	if _, err := a.allocate("pod9", netip.Addr{}); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("want a full-CIDR error, got %v", err)
	}
	if ip, _ := a.allocate("pod2", netip.Addr{}); ip.String() != "10.244.0.5" {
		t.Errorf("re-allocating for the same pod gave %s, want its address 10.244.0.5", ip)
	}
	a.release(netip.MustParseAddr("10.244.0.4"))
	if ip, _ := a.allocate("pod7", netip.MustParseAddr("10.244.0.4")); ip.String() != "10.244.0.4" {
		t.Errorf("preferred free address not used: got %s", ip)
	}
	if _, err := newIPAM("10.244.0.0/30"); err == nil {
		t.Error("a /30 leaves no pod addresses: want an error")
	}
}

// A freed address rests before a new pod gets it (a pod handed the address
// of one deleted a moment ago met "no route to host"), unless nothing else
// is free.
func TestIPAMRestsFreedAddresses(t *testing.T) {
	a, err := newIPAM("10.244.0.0/29") // .3 … .6 usable
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a.clock = clk
	for i := 0; i < 2; i++ {
		if _, err := a.allocate(fmt.Sprint("pod", i), netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	a.release(netip.MustParseAddr("10.244.0.3"))
	if ip, _ := a.allocate("new", netip.Addr{}); ip.String() != "10.244.0.5" {
		t.Fatalf("a new pod got %s; want 10.244.0.5, not the address freed a moment ago", ip)
	}
	clk.Step(reuseAfter + time.Second)
	a.release(netip.MustParseAddr("10.244.0.5")) // freed just now: resting
	if ip, _ := a.allocate("later", netip.Addr{}); ip.String() != "10.244.0.3" {
		t.Fatalf("after the rest: got %s, want the lowest rested address 10.244.0.3", ip)
	}
	if ip, _ := a.allocate("x", netip.Addr{}); ip.String() != "10.244.0.6" {
		t.Fatalf("got %s, want the never-used 10.244.0.6", ip)
	}
	if ip, _ := a.allocate("y", netip.Addr{}); ip.String() != "10.244.0.5" {
		t.Fatalf("only a resting address left: got %s, want it (10.244.0.5) rather than an error", ip)
	}
}

// TestRunnerRunsPodsAsProcesses runs a real process per pod against a fake
// API server: the pod becomes Running/Ready with an IP once its readiness
// probe answers, the process sees the pod's env and the image tag as
// VERSION, an unmapped image is faked, and deleting the pod stops the
// process.
func TestRunnerRunsPodsAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes (skipped with -short)")
	}
	const node = "lab-node"
	client := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       corev1.NodeSpec{PodCIDR: "127.77.0.0/24"},
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(t.TempDir(), "pods.json")
	var logs syncBuffer
	r, err := New(Config{
		Client: client, Node: node, Network: Loopback{}, LogDir: t.TempDir(), HostIP: "127.77.0.1", FileSD: sd,
		Images: ImageCommands{"test.local/app": {self}}, StopGrace: 2 * time.Second, ProbeEvery: 50 * time.Millisecond,
		// A parent no cgroup can have: the runner must warn once and run
		// pods without limits, as on a machine without cgroup v1 (limits
		// applied: TestRunnerAppliesResourcesThroughCgroups).
		CgroupParent: "not/a/group",
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runInBackground(t, r)

	pods := client.CoreV1().Pods("default")
	mk := func(name, image string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
				Labels: map[string]string{"app": name}, Annotations: map[string]string{"prometheus.io/scrape": "true"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "app", Image: image,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 18087}},
				Env:   []corev1.EnvVar{{Name: "LABRUNNER_TEST_SERVE", Value: "1"}, {Name: "SLOW_MS", Value: "25"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("http")}}},
			}}},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("real", "test.local/app:v7")
	mk("faked", "nginx:1.27")

	real := waitReady(t, ctx, client, "real")
	if real.Status.PodIP == "" || !strings.HasPrefix(real.Status.PodIP, "127.77.0.") {
		t.Fatalf("pod IP %q not from the node's pod CIDR", real.Status.PodIP)
	}
	if real.Status.HostIP != "127.77.0.1" || real.Status.Phase != corev1.PodRunning {
		t.Errorf("status: phase %s hostIP %s", real.Status.Phase, real.Status.HostIP)
	}
	url := "http://" + real.Status.PodIP + ":18087/"
	body := get(t, url)
	if want := "version=v7 pod=real slow=25"; body != want {
		t.Fatalf("process answered %q, want %q (env from the pod and the image tag)", body, want)
	}
	faked := waitReady(t, ctx, client, "faked")
	if faked.Status.PodIP == real.Status.PodIP {
		t.Errorf("both pods got %s", faked.Status.PodIP)
	}
	if id := faked.Status.ContainerStatuses[0].ContainerID; id != "danki-lab://fake" {
		t.Errorf("unmapped image: container ID %q, want a faked container", id)
	}

	target := real.Status.PodIP + ":18087"
	waitFile(t, sd, func(s string) bool { return strings.Contains(s, target) && strings.Contains(s, `"pod": "real"`) })

	if err := pods.Delete(ctx, "real", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := http.Get(url); err != nil {
			break // the process is gone
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's process still answers after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFile(t, sd, func(s string) bool { return !strings.Contains(s, target) && strings.Contains(s, `"pod": "faked"`) })
	if n := strings.Count(logs.String(), "pods run WITHOUT CPU and memory limits"); n != 1 {
		t.Errorf("without usable cgroups the runner warned %d times, want once; log:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFile(t *testing.T, path string, ok func(string) bool) {
	t.Helper()
	var last []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		last, _ = os.ReadFile(path)
		if ok(string(last)) {
			return
		}
	}
	t.Fatalf("%s never had the expected content; last:\n%s", path, last)
}

func waitReady(t *testing.T, ctx context.Context, client *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	return waitReadyIn(t, ctx, client, "default", name)
}

// runInBackground runs r until the test ends, then stops it and checks
// Run's error. The context is r's.
func runInBackground(t *testing.T, r *Runner) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A pod's process may start children that ignore TERM or outlive it; stop
// must not return while they run (only the runner's direct child dies with
// it, by Pdeathsig).
func TestStopEndsTheWholeProcessGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc to tell exited (zombie) processes from running ones")
	}
	dir := t.TempDir()
	childPIDFile := filepath.Join(dir, "child.pid")
	// The shell exits on TERM; its child ignores TERM (an ignored signal
	// stays ignored across exec).
	p, err := startProcess([]string{"sh", "-c", `(trap '' TERM; exec sleep 300) & echo $! >"$1.tmp" && mv "$1.tmp" "$1"; wait`, "sh", childPIDFile},
		os.Environ(), filepath.Join(dir, "pod.log"), "")
	if err != nil {
		t.Fatal(err)
	}
	var child int
	waitUntil(t, 10*time.Second, "the pod's process started its child", func() bool {
		b, err := os.ReadFile(childPIDFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })

	const grace = 500 * time.Millisecond
	start := time.Now()
	p.stop(grace)
	if !p.exited() {
		t.Error("stop returned before the pod's process exited")
	}
	if took := time.Since(start); took > grace+2*time.Second {
		t.Errorf("stop took %v with a grace of %v", took, grace)
	}
	// The orphaned child's new parent reaps it in its own time: a zombie
	// counts as stopped.
	waitUntil(t, 5*time.Second, fmt.Sprintf("child %d (ignores TERM) killed", child), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			return true
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] == "Z"
	})
}

func waitUntil(t *testing.T, timeout time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunnerHonoursReadinessGates: as under kubelet, a pod whose containers
// are ready stays un-Ready until every readiness gate's condition is True,
// and the condition set by another writer survives the runner's updates.
func TestRunnerHonoursReadinessGates(t *testing.T) {
	const node, gate = "lab-node", corev1.PodConditionType("danki.dev/warm")
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{PodCIDR: "127.78.0.0/24"}})
	r, err := New(Config{Client: client, Node: node, Network: Loopback{}, LogDir: t.TempDir(), FileSD: filepath.Join(t.TempDir(), "pods.json"),
		StopGrace: time.Second, ProbeEvery: 50 * time.Millisecond, CgroupParent: "not/a/group", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	pods := client.CoreV1().Pods("default")
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: "default", UID: "uid-gated"},
		Spec: corev1.PodSpec{NodeName: node, ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
	}
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	condition := func(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
		for _, c := range p.Status.Conditions {
			if c.Type == typ {
				return c.Status
			}
		}
		return ""
	}
	wait := func(what string, ok func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		var cur *corev1.Pod
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cur, err = pods.Get(ctx, "gated", metav1.GetOptions{}); err == nil && ok(cur) {
				return cur
			}
		}
		t.Fatalf("%s: never; conditions %+v", what, cur.Status.Conditions)
		return nil
	}
	cur := wait("containers ready", func(p *corev1.Pod) bool { return condition(p, corev1.ContainersReady) == corev1.ConditionTrue })
	if got := condition(cur, corev1.PodReady); got != corev1.ConditionFalse {
		t.Fatalf("containers ready, gate unset: Ready is %q, want False", got)
	}
	cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: gate, Status: corev1.ConditionTrue})
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur = wait("Ready once the gate is True", func(p *corev1.Pod) bool { return condition(p, corev1.PodReady) == corev1.ConditionTrue })
	if condition(cur, gate) != corev1.ConditionTrue {
		t.Fatalf("the gate's condition was lost: %+v", cur.Status.Conditions)
	}
}
