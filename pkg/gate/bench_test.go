package gate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// benchTargetEnv makes the test binary a warm-up target (TestMain): the
// pods the benchmark warms run in a process of their own, as pods do, so
// that only the gate's side of the load shares the gate's CPU.
const benchTargetEnv = "DANKI_GATE_BENCH_TARGET"

func TestMain(m *testing.M) {
	if os.Getenv(benchTargetEnv) != "" {
		serveBenchTarget()
		return
	}
	os.Exit(m.Run())
}

// serveBenchTarget serves a small answer on a loopback port, prints the
// port, and exits when its stdin closes (the benchmark ended).
func serveBenchTarget() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("PORT %d\n", l.Addr().(*net.TCPAddr).Port)
	body := bytes.Repeat([]byte("x"), 512)
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// BenchmarkAdmissionUnderWarmUp measures the webhook's round trip (an
// AdmissionReview of an opted-in pod over TLS, as the API server sends it)
// in a process limited to one CPU (GOMAXPROCS 1: deploy/gate's limit), 100
// a second, side by side: idle; while DefaultMaxConcurrent warm-ups each ask for
// 500 requests a second and get it (no budget, --max-total-qps -1); and the
// same warm-ups within the default budget (DefaultMaxTotalQPS) and within
// half of it. Each
// reports the admission latency's p50, p99 and p99.9, the warm-ups'
// achieved rate and the process's CPU (cores) while it measured. Run it:
//
//	go test ./pkg/gate/ -run '^$' -bench AdmissionUnderWarmUp -benchtime 2000x
func BenchmarkAdmissionUnderWarmUp(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctrllog.SetLogger(logr.Discard())
	addr, caPEM := startBenchWebhook(b)
	targets := startBenchTargets(b, DefaultMaxConcurrent)
	review := benchReview(b)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, MaxIdleConnsPerHost: 4}}
	url := "https://" + addr + WebhookPath

	for _, tc := range []struct {
		name     string
		warmups  int
		maxTotal float64 // the gate's --max-total-qps (-1: none)
	}{
		{"idle", 0, 0},
		{"warming-no-budget", DefaultMaxConcurrent, -1},
		{"warming-default-budget", DefaultMaxConcurrent, DefaultMaxTotalQPS},
		{"warming-budget-500", DefaultMaxConcurrent, 500},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := &Reconciler{MaxConcurrent: DefaultMaxConcurrent, MaxTotalQPS: tc.maxTotal}
			r.init()
			stop := startBenchWarmUps(b, r, targets[:tc.warmups])
			if tc.warmups > 0 {
				time.Sleep(2 * time.Second) // the load at full pace
			}
			var lat []time.Duration
			cpu0, t0 := cpuTime(b), time.Now()
			// The API server's pace, not as fast as the loop can go: the
			// process's CPU is then the warm-ups' plus a fixed admission load.
			tick := time.NewTicker(admissionEvery)
			defer tick.Stop()
			b.ResetTimer()
			for b.Loop() {
				<-tick.C
				start := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(review))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("webhook answered %s", resp.Status)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			cores := (cpuTime(b) - cpu0).Seconds() / time.Since(t0).Seconds()
			rate := stop()
			slices.Sort(lat)
			q := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(0.999), "p99.9-ms")
			b.ReportMetric(rate, "warmup-req/s")
			b.ReportMetric(cores, "process-cores")
			b.ReportMetric(0, "ns/op") // the percentiles say it; the mean hides the tail
		})
	}
}

// admissionEvery paces the benchmark's admission requests (100 a second).
const admissionEvery = 10 * time.Millisecond

// startBenchWebhook serves the Injector as `danki gate` does, with a
// self-managed certificate, and returns its address and CA.
func startBenchWebhook(b *testing.B) (string, []byte) {
	b.Helper()
	dir := b.TempDir()
	ca, err := SelfSignedCerts(dir, []string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	scheme := clientgoscheme.Scheme
	srv.Register(WebhookPath, &webhook.Admission{Handler: NewInjector(admission.NewDecoder(scheme))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Start(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("webhook server did not start")
		}
	}
	return addr, ca
}

// benchReview is an AdmissionReview of an opted-in pod, as the API server
// sends one.
func benchReview(b *testing.B) []byte {
	b.Helper()
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app-7d9c-x2x4z", Namespace: "shop", Labels: map[string]string{"app": "app"},
			Annotations: map[string]string{wellknown.WarmUpAnnotation: `{"qps": 50}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v2",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
	raw, err := json.Marshal(&pod)
	if err != nil {
		b.Fatal(err)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "bench", Operation: admissionv1.Create, Namespace: "shop", Name: pod.Name,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}),
			Object:   k8sruntime.RawExtension{Raw: raw}}})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// startBenchTargets starts n target processes (the test binary, serving)
// and returns their URLs.
func startBenchTargets(b *testing.B, n int) []string {
	b.Helper()
	var urls []string
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), benchTargetEnv+"=1")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		port, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT ")
		if err != nil || !ok {
			b.Fatalf("target process: %q, %v", line, err)
		}
		urls = append(urls, "http://127.0.0.1:"+port)
	}
	return urls
}

// cpuTime is the CPU time this process used so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startBenchWarmUps warms each target as the Reconciler does (its config
// within r's budget), asking for 500 requests a second from the first one
// and never converging; stop ends them and returns the rate they achieved
// together, in requests a second.
func startBenchWarmUps(b *testing.B, r *Reconciler, urls []string) (stop func() float64) {
	b.Helper()
	cfg, err := ParseConfig(`{"qps": 500, "startQPS": 500, "minRequests": 100000000, "maxRequests": 1000000000, "deadline": "1h", "healthPath": "/"}`,
		// The operator raised the request cap for this benchmark; its
		// servers run on this machine.
		policy.Policy{Limits: policy.Limits{Requests: 1_000_000_000}, Network: policy.Network{AllowLoopback: true}})
	if err != nil {
		b.Fatal(err)
	}
	run := r.withinBudget(cfg.Config)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent atomic.Int64
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	for _, u := range urls {
		wg.Go(func() {
			res, _ := warmup.Run(ctx, run, []warmup.Target{{Name: u, URL: u}}, warmup.Options{Logger: quiet})
			if res != nil && len(res.Targets) == 1 {
				sent.Add(res.Targets[0].Requests)
			}
		})
	}
	stopped := false
	b.Cleanup(func() {
		if !stopped {
			cancel()
			wg.Wait()
		}
	})
	return func() float64 {
		stopped = true
		cancel()
		wg.Wait()
		return float64(sent.Load()) / time.Since(start).Seconds()
	}
}
