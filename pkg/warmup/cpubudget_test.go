package warmup

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A pod's warm-up budget is cores, or a share of the CPU request of the
// container that serves the warmed port ("50%"), not of the pod's sum (a
// sidecar's request is not the app's); none by default, and "0" is none
// (the warm gate's default, "100%", is gate.ParseConfig's).
func TestCPUBudgetIsAShareOfTheServingContainersRequest(t *testing.T) {
	container := func(name string, port int32, cpu string) corev1.Container {
		c := corev1.Container{Name: name, Ports: []corev1.ContainerPort{{Name: name, ContainerPort: port}}}
		if cpu != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return c
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container("proxy", 15001, "100m"), container("http", 8080, "500m")}},
		Status:     corev1.PodStatus{PodIP: "10.0.0.7"},
	}
	target, err := PodTarget(pod, intstr.FromString("http"))
	if err != nil {
		t.Fatal(err)
	}
	if target.CPURequest != 0.5 {
		t.Errorf("CPURequest %g, want 0.5 (the http container's request)", target.CPURequest)
	}
	cfg := Config{}.WithDefaults()
	if got := cfg.cpuBudget(target); got != 0 {
		t.Errorf("default budget %g, want none (0)", got)
	}
	for value, want := range map[string]float64{`"250m"`: 0.25, `"2"`: 2, `0.5`: 0.5, `0`: 0, `"50%"`: 0.25, `"100%"`: 0.5, `"200%"`: 1} {
		var c Config
		if err := config.Decode([]byte(`{"cpuBudget": `+value+`}`), &c); err != nil {
			t.Fatalf("cpuBudget %s: %v", value, err)
		}
		c = c.WithDefaults()
		if got := c.cpuBudget(target); got != want {
			t.Errorf("cpuBudget %s: %g, want %g", value, got, want)
		}
	}
	pod.Spec.Containers[1] = container("http", 8080, "")
	if target, _ = PodTarget(pod, intstr.FromInt32(8080)); target.CPURequest != 0 {
		t.Errorf("no CPU request: CPURequest %g, want 0 (no budget)", target.CPURequest)
	}
}

// busyServer is a cold server that measures the requests it had in flight
// on average from its first request to its last answer: the cores a
// CPU-bound pod would have kept busy.
type busyServer struct {
	*testutil.ColdServer
	mu          sync.Mutex
	first, last time.Time
	busy        time.Duration
}

func newBusyServer(t *testing.T, delay func(int64, bool) time.Duration) *busyServer {
	b := &busyServer{}
	b.ColdServer = newTestServer(t, func(n int64, first bool) time.Duration {
		d := delay(n, first)
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.first.IsZero() {
			b.first = now
		}
		b.last = now.Add(d)
		b.busy += d
		return d
	})
	return b
}

func (b *busyServer) inFlight() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy.Seconds() / b.last.Sub(b.first).Seconds()
}

// Against a pod whose requests start at 40 ms and get fast, a warm-up with
// a CPU budget of 0.5 cores keeps about that many requests in flight; the
// same warm-up without one keeps several (its connections' worth).
func TestRunStaysWithinTheCPUBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("~15 s of load (skipped with -short)")
	}
	cold := testutil.Decaying(2*time.Millisecond, 38*time.Millisecond, 150)
	run := func(budget string) (*busyServer, *Result) {
		s := newBusyServer(t, cold)
		cfg := fastConfig()
		cfg.QPS, cfg.StartQPS, cfg.Connections = 400, 50, 4
		f := false
		cfg.UntilConverged, cfg.MaxRequests, cfg.MinRequests = &f, 300, 1
		if err := config.Decode([]byte(`{"cpuBudget": "`+budget+`"}`), &cfg); err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), cfg, []Target{target(s.ColdServer)}, Options{})
		if err != nil {
			t.Fatalf("cpuBudget %s: %v", budget, err)
		}
		return s, res
	}
	within, res := run("500m")
	if tr := res.Targets[0]; tr.CPUBudget != 0.5 || tr.BudgetCuts == 0 {
		t.Errorf("result: budget %g, %d budget cuts; want 0.5 and cuts while cold", tr.CPUBudget, tr.BudgetCuts)
	}
	if !strings.Contains(res.Summary(), "CPU budget 0.5 cores per pod (lowered the pace") {
		t.Errorf("summary does not name the budget: %s", res.Summary())
	}
	unbounded, _ := run("0")
	// The first step runs at startQPS before any latency is known (50 qps
	// × 40 ms = 2 in flight for 10 requests): hence the margin.
	if got := within.inFlight(); got > 0.75 {
		t.Errorf("with a budget of 0.5 cores: %.2f requests in flight on average, want ≤ 0.75", got)
	}
	if got, bounded := unbounded.inFlight(), within.inFlight(); got < 2*bounded {
		t.Errorf("without a budget: %.2f in flight on average, with one %.2f; want at least twice as many", got, bounded)
	}
	t.Logf("requests in flight on average: %.2f with a 0.5-core budget, %.2f without", within.inFlight(), unbounded.inFlight())
}
