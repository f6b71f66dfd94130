package analysis

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/pkg/policy"
)

// knownSamples are n latencies at the distribution's exact quantiles
// (i+½)/n: a sample whose empirical distribution is the known one, without
// sampling noise.
func knownSamples(d lognormal, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = d.quantile((float64(i) + 0.5) / float64(n))
	}
	return out
}

// prometheusBinary finds the Prometheus the lab installs (Debian's 2.42).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DANKI_PROMETHEUS"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the repository root (go.mod) above the test directory")
		}
		dir = parent
	}
	// The lab's cache: $DANKI_CACHE as the Makefile exports it, else .cache
	// at the root (test/testenv.CacheDir).
	cache := os.Getenv("DANKI_CACHE")
	if cache == "" {
		cache = filepath.Join(dir, ".cache")
	}
	bin := filepath.Join(cache, "lab", "bin", "prometheus")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Prometheus binary not found at %s (%v). The lab build links Debian's prometheus there "+
			"(apt-get install -y --no-install-recommends prometheus; ln -s /usr/bin/prometheus %s), "+
			"or set DANKI_PROMETHEUS to a prometheus 2.x binary. Run with -short to skip this test.", bin, err, bin)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs Prometheus on 127.0.0.1 scraping target every second
// and returns its URL once it is ready.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	return startPrometheusWith(t, fmt.Sprintf(`- job_name: exporter
  scrape_interval: 1s
  scrape_timeout: 900ms
  static_configs:
  - targets: [%q]
`, target))
}

// startPrometheusWith runs Prometheus with these scrape_configs (a YAML
// list) and returns its URL once it is ready.
func startPrometheusWith(t *testing.T, scrapeConfigs string) string {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	cfg := `global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
` + scrapeConfigs
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var logs bytes.Buffer
	cmd := exec.Command(bin,
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case err := <-done:
			t.Fatalf("prometheus exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s after 10s\n%s", url, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRealPrometheus feeds known latency distributions through a
// client_golang exporter with Istio's and Envoy's metric names and bucket
// bounds, lets a real Prometheus scrape it every second, and checks danki's
// percentiles and verdicts against what was fed in.
func TestRealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Prometheus (skipped with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	reg := prometheus.NewRegistry()
	istioHist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "istio_request_duration_milliseconds", Help: "Istio standard metric", Buckets: istioBuckets,
	}, []string{"reporter", "destination_service"})
	istioReqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "istio_requests_total", Help: "Istio standard metric",
	}, []string{"reporter", "destination_service", "response_code"})
	envoyHist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envoy_cluster_upstream_rq_time", Help: "Envoy cluster metric", Buckets: istioBuckets,
	}, []string{"cluster_name"})
	envoyReqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_cluster_upstream_rq", Help: "Envoy cluster metric",
	}, []string{"cluster_name", "response_code"})
	// With Istio's stats tags Envoy exports every request a second time under
	// the same name, per response_code_class: the lab's Prometheus holds both.
	envoyClassReqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envoy_cluster_upstream_rq", Help: "Envoy cluster metric",
	}, []string{"cluster_name", "response_code_class"})
	reg.MustRegister(istioHist, istioReqs, envoyHist)
	reg.MustRegister(sameNameCollector{envoyReqs, envoyClassReqs})

	slowDist := typical
	slowDist.scale = 2 // every percentile 2× stable's
	versions := []struct {
		name string
		dist lognormal
		n    int
	}{
		{"app-stable", typical, 9000},
		{"app-canary", typical, 1000},
		{"app-slow", slowDist, 1000},
	}
	service := func(v string) string { return v + ".default.svc.cluster.local" }
	cluster := func(v string) string { return "outbound|8080||" + service(v) }
	// Create every series at zero before the first scrape, so increase()
	// sees all requests (it never counts what came before a series' first
	// scrape).
	for _, v := range versions {
		istioHist.WithLabelValues("source", service(v.name))
		envoyHist.WithLabelValues(cluster(v.name))
		for _, code := range []string{"200", "503"} {
			istioReqs.WithLabelValues("source", service(v.name), code)
			envoyReqs.WithLabelValues(cluster(v.name), code)
			envoyClassReqs.WithLabelValues(cluster(v.name), code[:1]+"xx")
		}
	}
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer exporter.Close()

	promURL := startPrometheus(t, strings.TrimPrefix(exporter.URL, "http://"))
	api, err := newPrometheusAPI(PrometheusConfig{Address: promURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what, query string, want float64) { t.Helper(); waitForScalar(t, ctx, api, what, query, want) }
	waitFor("the first scrape", `count(istio_request_duration_milliseconds_bucket{le="+Inf"} == 0)`, 3)

	// Feed the known distributions; 0.2 % of each version's requests fail.
	exact := map[string]Histogram{}
	for _, v := range versions {
		lat := knownSamples(v.dist, v.n)
		for i, x := range lat {
			code := "200"
			if i%500 == 499 {
				code = "503"
			}
			istioHist.WithLabelValues("source", service(v.name)).Observe(x)
			istioReqs.WithLabelValues("source", service(v.name), code).Inc()
			envoyHist.WithLabelValues(cluster(v.name)).Observe(x)
			envoyReqs.WithLabelValues(cluster(v.name), code).Inc()
			envoyClassReqs.WithLabelValues(cluster(v.name), code[:1]+"xx").Inc()
		}
		exact[v.name] = histogramOf(istioBuckets, lat)
	}
	waitFor("the scrape after feeding", `sum(envoy_cluster_upstream_rq{cluster_name="`+cluster("app-stable")+`"})`, 18000)
	waitFor("the scrape after feeding", `sum(istio_requests_total{destination_service="`+service("app-slow")+`"})`, 1000)
	waitForSamples(t, ctx, api, "istio_requests_total")

	slo := SLO{P99: dur("250ms"), MaxErrorRate: number("1%"), Ratio: RatioSLO{P99: number("1.5")}}
	configs := map[string]func(canary string) Config{
		"istio": func(canary string) Config {
			return Config{Source: SourceIstio, Prometheus: &PrometheusConfig{Address: promURL},
				Istio:  &IstioConfig{Canary: IstioSelector{Service: service(canary)}, Stable: &IstioSelector{Service: service("app-stable")}},
				Window: window("1m"), SLO: slo, TailTest: &TailTestConfig{}}
		},
		"envoy": func(canary string) Config {
			return Config{Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: promURL},
				Envoy:  &EnvoyConfig{CanaryCluster: cluster(canary), StableCluster: cluster("app-stable")},
				Window: window("1m"), SLO: slo, TailTest: &TailTestConfig{}}
		},
	}
	for source, mk := range configs {
		for _, canary := range []struct {
			name  string
			dist  lognormal
			phase Phase
		}{{"app-canary", typical, Pass}, {"app-slow", slowDist, Fail}} {
			t.Run(source+"/"+canary.name, func(t *testing.T) {
				a, err := NewAnalyzer(mk(canary.name), WithLogger(quiet), WithPolicy(policy.Local()))
				if err != nil {
					t.Fatal(err)
				}
				v := a.Analyze(ctx, time.Time{})
				t.Logf("%s", v.Summary)
				if v.Phase != canary.phase {
					t.Fatalf("phase %s, want %s: %s", v.Phase, canary.phase, v.Summary)
				}
				if canary.phase == Fail && (!strings.Contains(v.Summary, "canary's tail is heavier") || !strings.Contains(v.Summary, "p99 canary/stable 2.")) {
					t.Errorf("the slow canary's summary does not name the tail test and the 2× p99 ratio: %s", v.Summary)
				}
				checkPercentiles(t, ctx, api, a, v, canary.name, canary.dist, exact[canary.name])
				if v.Canary.ErrorRate == nil || math.Abs(*v.Canary.ErrorRate-0.002) > 1e-9 {
					t.Errorf("canary error rate %v, want 0.002 (2 of every 1,000 answered 503; each request counted once although Envoy exports it twice)", v.Canary.ErrorRate)
				}
				// increase() extrapolates to the window's end: counts are
				// close to, not exactly, what was sent (see minSamples).
				if n := v.Canary.Count; n < 1000 || n > 1000*maxOver {
					t.Errorf("canary count %v, want 1000–%.0f", n, 1000*maxOver)
				}
			})
		}
	}
}

// checkPercentiles compares danki's percentiles with (1) the same
// interpolation on the exact bucket counts fed in, (2) Prometheus' own
// histogram_quantile over the same window, and (3) the known distribution,
// within bucket resolution.
func checkPercentiles(t *testing.T, ctx context.Context, api promv1.API, a *Analyzer, v Verdict, name string, dist lognormal, exact Histogram) {
	t.Helper()
	histQuery := a.Queries()[0]
	for _, qs := range quantiles[:4] { // p99.9 needs 5,000 requests
		got := v.Canary.Percentile(qs.key)
		if got == nil {
			t.Fatalf("%s: no %s", name, qs.label)
		}
		if want := exact.Quantile(qs.q); math.Abs(*got-want) > 1e-6*want {
			t.Errorf("%s %s: danki %.4f ms, exact buckets %.4f ms", name, qs.label, *got, want)
		}
		pv, _, _, err := api.Query(ctx, fmt.Sprintf("histogram_quantile(%g, %s)", qs.q, histQuery), time.Now())
		if vec, ok := pv.(model.Vector); err != nil || !ok || len(vec) != 1 {
			t.Errorf("histogram_quantile: %v %v", pv, err)
		} else if prom := float64(vec[0].Value); math.Abs(*got-prom) > 1e-6*prom {
			t.Errorf("%s %s: danki %.4f ms, Prometheus' histogram_quantile %.4f ms", name, qs.label, *got, prom)
		}
		truth := dist.quantile(qs.q)
		lo, hi, _ := exact.boundsAround(truth)
		if *got <= lo || *got > hi {
			t.Errorf("%s %s: danki %.2f ms outside the bucket (%g, %g] of the true %.2f ms", name, qs.label, *got, lo, hi, truth)
		}
	}
}

// sameNameCollector exports several metric vectors of one name with
// different label names, as Envoy does for envoy_cluster_upstream_rq
// (client_golang's registry refuses two registrations of one name). It is
// an unchecked collector: its Describe sends nothing.
type sameNameCollector []*prometheus.CounterVec

func (c sameNameCollector) Describe(chan<- *prometheus.Desc) {}

func (c sameNameCollector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c {
		v.Collect(ch)
	}
}

// istioStandardLabels are the labels istio-proxy puts on istio_requests_total
// and istio_request_duration_milliseconds (Istio's "Istio Standard Metrics"
// reference).
var istioStandardLabels = []string{
	"reporter",
	"source_workload", "source_workload_namespace", "source_principal", "source_app", "source_version",
	"source_canonical_service", "source_canonical_revision", "source_cluster",
	"destination_workload", "destination_workload_namespace", "destination_principal", "destination_app", "destination_version",
	"destination_service", "destination_service_name", "destination_service_namespace",
	"destination_canonical_service", "destination_canonical_revision", "destination_cluster",
	"request_protocol", "response_code", "grpc_response_status", "response_flags", "connection_security_policy",
}

// istioProxyLabels is one request's label set as istio-proxy writes it for
// an Argo Rollout "app" behind an ingress gateway: canary and stable pods
// share workload, app and version (only their pod-template hash differs,
// and no Istio label carries it). The gateway (reporter source) labels
// destination_service with the Service it routed to; the server sidecar
// (reporter destination) with one of the Services its pod belongs to —
// here the root Service app, for canary and stable pods alike.
func istioProxyLabels(reporter, routedTo, code string) prometheus.Labels {
	svc := func(name string) string { return name + ".default.svc.cluster.local" }
	l := prometheus.Labels{
		"reporter":        reporter,
		"source_workload": "istio-ingressgateway", "source_workload_namespace": "istio-system",
		"source_principal": "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account",
		"source_app":       "istio-ingressgateway", "source_version": "unknown",
		"source_canonical_service": "istio-ingressgateway", "source_canonical_revision": "latest", "source_cluster": "Kubernetes",
		"destination_workload": "app", "destination_workload_namespace": "default",
		"destination_principal": "spiffe://cluster.local/ns/default/sa/app",
		"destination_app":       "app", "destination_version": "v1",
		"destination_canonical_service": "app", "destination_canonical_revision": "v1", "destination_cluster": "Kubernetes",
		"destination_service": svc(routedTo), "destination_service_name": routedTo, "destination_service_namespace": "default",
		"request_protocol": "http", "response_code": code, "grpc_response_status": "", "response_flags": "-",
		"connection_security_policy": "unknown",
	}
	if reporter == "destination" {
		l["destination_service"], l["destination_service_name"] = svc("app"), "app"
		l["connection_security_policy"] = "mutual_tls"
	}
	return l
}

// TestRealPrometheusIstioStandardLabels proves the istio source's default
// (reporter source, canary and stable by Service) against a real Prometheus
// scraping Istio's standard metrics with istio-proxy's full label sets,
// both reporters, and pods that belong to several Services (see
// istioProxyLabels). The canary is 2× slower: the source view catches it;
// the destination view has no series for the canary's Service at all.
func TestRealPrometheusIstioStandardLabels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Prometheus (skipped with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	reg := prometheus.NewRegistry()
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "istio_request_duration_milliseconds", Help: "Istio standard metric", Buckets: istioBuckets,
	}, istioStandardLabels)
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "istio_requests_total", Help: "Istio standard metric"}, istioStandardLabels)
	reg.MustRegister(hist, reqs)

	slowDist := typical
	slowDist.scale = 2
	versions := []struct {
		service string
		dist    lognormal
		n       int
	}{
		{"app-stable", typical, 9000},
		{"app-canary", slowDist, 1000},
	}
	reporters := []string{"source", "destination"}
	for _, v := range versions {
		for _, reporter := range reporters {
			for _, code := range []string{"200", "503"} {
				reqs.With(istioProxyLabels(reporter, v.service, code))
				hist.With(istioProxyLabels(reporter, v.service, code))
			}
		}
	}
	exporter := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer exporter.Close()
	promURL := startPrometheus(t, strings.TrimPrefix(exporter.URL, "http://"))
	api, err := newPrometheusAPI(PrometheusConfig{Address: promURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(query string, want float64) { t.Helper(); waitForScalar(t, ctx, api, query, query, want) }
	// 2 versions × 2 reporters × 2 codes, but the destination view merges
	// both versions into one label set per code: 6 series.
	waitFor(`count(istio_request_duration_milliseconds_bucket{le="+Inf"} == 0)`, 6)
	for _, v := range versions {
		for i, x := range knownSamples(v.dist, v.n) {
			code := "200"
			if i%500 == 499 {
				code = "503"
			}
			for _, reporter := range reporters {
				hist.With(istioProxyLabels(reporter, v.service, code)).Observe(x)
				reqs.With(istioProxyLabels(reporter, v.service, code)).Inc()
			}
		}
	}
	waitFor(`sum(istio_requests_total)`, 20000)
	waitForSamples(t, ctx, api, "istio_requests_total")

	svc := func(name string) string { return name + ".default.svc.cluster.local" }
	cfg := Config{Source: SourceIstio, Prometheus: &PrometheusConfig{Address: promURL},
		Istio:  &IstioConfig{Canary: IstioSelector{Service: svc("app-canary")}, Stable: &IstioSelector{Service: svc("app-stable")}},
		Window: window("1m"), SLO: SLO{P99: dur("250ms"), Ratio: RatioSLO{P99: number("1.5")}}, TailTest: &TailTestConfig{}}
	_, v := analyzeSlowCanary(t, ctx, cfg)
	if n := v.Canary.Count; n < 1000 || n > 1000*maxOver {
		t.Errorf("canary count %v, want 1000–%.0f: the source view counts only the canary's requests", n, 1000*maxOver)
	}
	if n := v.Stable.Count; n < 9000 || n > 9000*maxOver {
		t.Errorf("stable count %v, want 9000–%.0f", n, 9000*maxOver)
	}
	if v.Canary.ErrorRate == nil || math.Abs(*v.Canary.ErrorRate-0.002) > 1e-9 {
		t.Errorf("canary error rate %v, want 0.002", v.Canary.ErrorRate)
	}
	// The destination view: both versions under the root Service, none
	// under the canary's — what reporter destination + service would have
	// seen, and why Validate refuses that combination.
	for query, want := range map[string]float64{
		`sum(istio_requests_total{reporter="destination",destination_service="` + svc("app-canary") + `"})`: -1, // no series
		`sum(istio_requests_total{reporter="destination",destination_service="` + svc("app") + `"})`:        10000,
	} {
		res, _, _, err := api.Query(ctx, query, time.Now())
		vec, _ := res.(model.Vector)
		switch {
		case err != nil:
			t.Errorf("%s: %v", query, err)
		case want < 0 && len(vec) != 0:
			t.Errorf("%s = %v, want no series", query, vec)
		case want >= 0 && (len(vec) != 1 || float64(vec[0].Value) != want):
			t.Errorf("%s = %v, want %g", query, vec, want)
		}
	}
}

// TestRealPrometheusSidecarInboundPerPod proves per-pod server-side latency
// from the sidecars against a real Prometheus: five "pods", each its own
// exporter (a sidecar's Envoy listener), scraped with the target labels
// kubernetes_sd relabelling gives (namespace, pod,
// rollouts_pod_template_hash). Every sidecar exports the same inbound
// cluster inbound|8080|| — Envoy's cluster stats (both response-code
// families) and, as istio-proxy does besides, Istio's
// istio_request_duration_milliseconds with reporter="destination", whose
// labels are identical for canary and stable pods. The two canary pods are
// 2× slower than the three stable pods. Both the envoy source
// (cluster + canaryLabels/stableLabels) and the istio source (reporter
// destination + labels) must tell the sides apart by the hash alone, with
// each side's own requests and percentiles.
func TestRealPrometheusSidecarInboundPerPod(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Prometheus (skipped with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	const inbound, canaryHash, stableHash = "inbound|8080||", "7d9f8c6b5", "5c4b3a291"
	slowDist := typical
	slowDist.scale = 2
	type pod struct {
		name, hash string
		hist       *prometheus.HistogramVec
		reqs       *prometheus.CounterVec
		classReqs  *prometheus.CounterVec
		istioHist  *prometheus.HistogramVec
		istioReqs  *prometheus.CounterVec
		addr       string
	}
	var pods []*pod
	var scrape strings.Builder
	scrape.WriteString("- job_name: envoy-stats\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  static_configs:\n")
	for _, p := range []struct{ name, hash string }{
		{"app-" + canaryHash + "-a", canaryHash}, {"app-" + canaryHash + "-b", canaryHash},
		{"app-" + stableHash + "-a", stableHash}, {"app-" + stableHash + "-b", stableHash}, {"app-" + stableHash + "-c", stableHash},
	} {
		pd := &pod{name: p.name, hash: p.hash,
			hist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "envoy_cluster_upstream_rq_time", Help: "Envoy cluster metric", Buckets: istioBuckets},
				[]string{"cluster_name"}),
			reqs:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq", Help: "Envoy cluster metric"}, []string{"cluster_name", "response_code"}),
			classReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq", Help: "Envoy cluster metric"}, []string{"cluster_name", "response_code_class"}),
			istioHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "istio_request_duration_milliseconds", Help: "Istio standard metric", Buckets: istioBuckets},
				istioStandardLabels),
			istioReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "istio_requests_total", Help: "Istio standard metric"}, istioStandardLabels),
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(pd.hist, pd.istioHist, pd.istioReqs, sameNameCollector{pd.reqs, pd.classReqs})
		pd.hist.WithLabelValues(inbound)
		for _, code := range []string{"200", "503"} {
			pd.reqs.WithLabelValues(inbound, code)
			pd.classReqs.WithLabelValues(inbound, code[:1]+"xx")
			pd.istioHist.With(istioProxyLabels("destination", "app", code))
			pd.istioReqs.With(istioProxyLabels("destination", "app", code))
		}
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		defer srv.Close()
		pd.addr = strings.TrimPrefix(srv.URL, "http://")
		fmt.Fprintf(&scrape, "  - targets: [%q]\n    labels: {namespace: default, pod: %s, rollouts_pod_template_hash: %q}\n", pd.addr, pd.name, pd.hash)
		pods = append(pods, pd)
	}
	promURL := startPrometheusWith(t, scrape.String())
	api, err := newPrometheusAPI(PrometheusConfig{Address: promURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(query string, want float64) { t.Helper(); waitForScalar(t, ctx, api, query, query, want) }
	waitFor(`count(envoy_cluster_upstream_rq_time_bucket{le="+Inf"} == 0)`, 5)

	// Each side's known distribution is dealt round-robin to its pods; 2 of
	// every 1,000 of a pod's requests fail.
	exact := map[string]Histogram{}
	for _, side := range []struct {
		hash string
		dist lognormal
		n    int
	}{{canaryHash, slowDist, 1200}, {stableHash, typical, 3000}} {
		var own []*pod
		for _, p := range pods {
			if p.hash == side.hash {
				own = append(own, p)
			}
		}
		lat := knownSamples(side.dist, side.n)
		for i, x := range lat {
			p := own[i%len(own)]
			code := "200"
			if (i/len(own))%500 == 499 {
				code = "503"
			}
			p.hist.WithLabelValues(inbound).Observe(x)
			p.reqs.WithLabelValues(inbound, code).Inc()
			p.classReqs.WithLabelValues(inbound, code[:1]+"xx").Inc()
			p.istioHist.With(istioProxyLabels("destination", "app", code)).Observe(x)
			p.istioReqs.With(istioProxyLabels("destination", "app", code)).Inc()
		}
		exact[side.hash] = histogramOf(istioBuckets, lat)
	}
	waitFor(`sum(envoy_cluster_upstream_rq_time_count)`, 4200)
	waitFor(`sum(istio_requests_total)`, 4200)
	waitForSamples(t, ctx, api, "envoy_cluster_upstream_rq_time_count")

	// What identifies a side: only the hash the scrape added. Istio's own
	// labels are one set for all five pods.
	res, _, _, err := api.Query(ctx, `count(count by (destination_workload, destination_version, destination_service, destination_canonical_revision) (istio_requests_total))`, time.Now())
	if vec, ok := res.(model.Vector); err != nil || !ok || len(vec) != 1 || vec[0].Value != 1 {
		t.Fatalf("istio_* label sets of the pods: %v %v, want one (canary and stable look alike to Istio)", res, err)
	}

	slo := SLO{P99: dur("250ms"), MaxErrorRate: number("1%"), Ratio: RatioSLO{P99: number("1.5")}}
	configs := map[string]Config{
		"envoy inbound by hash": {Source: SourceEnvoy, Prometheus: &PrometheusConfig{Address: promURL},
			Envoy: &EnvoyConfig{Cluster: inbound, Labels: map[string]string{"namespace": "default", "job": "envoy-stats"},
				CanaryLabels: map[string]string{"rollouts_pod_template_hash": canaryHash},
				StableLabels: map[string]string{"rollouts_pod_template_hash": stableHash}},
			Window: window("1m"), SLO: slo, TailTest: &TailTestConfig{}},
		"istio destination by hash": {Source: SourceIstio, Prometheus: &PrometheusConfig{Address: promURL},
			Istio: &IstioConfig{Reporter: "destination",
				Canary: IstioSelector{Namespace: "default", Labels: map[string]string{"rollouts_pod_template_hash": canaryHash}},
				Stable: &IstioSelector{Namespace: "default", Labels: map[string]string{"rollouts_pod_template_hash": stableHash}}},
			Window: window("1m"), SLO: slo, TailTest: &TailTestConfig{}},
	}
	// The shipped dashboard's rows on users' latency read the same series.
	t.Run("dashboard rows", func(t *testing.T) {
		checkDashboardUserRows(t, ctx, api, canaryHash, stableHash, 1.0/600, 0.002)
	})
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			a, v, at := analyzeSlowCanaryAt(t, ctx, cfg)
			// increase() extrapolates per pod: close to, not exactly, what was
			// sent; either side's pods mixed in would be far out of range.
			if n := v.Canary.Count; n < 1200 || n > 1200*maxOver {
				t.Errorf("canary count %v, want 1200–%.0f: the 2 canary pods only", n, 1200*maxOver)
			}
			if n := v.Stable.Count; n < 3000 || n > 3000*maxOver {
				t.Errorf("stable count %v, want 3000–%.0f: the 3 stable pods only", n, 3000*maxOver)
			}
			// 1 of each canary pod's 600 requests failed, 2 of each stable
			// pod's 1,000.
			for name, side := range map[string]struct {
				got  *SideStats
				want float64
			}{"canary": {v.Canary, 1.0 / 600}, "stable": {v.Stable, 0.002}} {
				if r := side.got.ErrorRate; r == nil || math.Abs(*r-side.want)/side.want > 0.05 {
					t.Errorf("%s error rate %v, want ~%.5f (each request counted once)", name, fmtPtr(r), side.want)
				}
			}
			histQueries := a.Queries()
			for i, side := range []struct {
				name string
				got  *SideStats
				dist lognormal
				hash string
			}{{"canary", v.Canary, slowDist, canaryHash}, {"stable", v.Stable, typical, stableHash}} {
				histQuery := histQueries[3*i] // histogram, requests, errors per side
				if !strings.Contains(histQuery, side.hash) {
					t.Fatalf("%s's histogram query %s does not select its hash", side.name, histQuery)
				}
				for _, qs := range quantiles[:4] {
					got := side.got.Percentile(qs.key)
					if got == nil {
						t.Fatalf("%s: no %s", side.name, qs.label)
					}
					// At danki's own instant: a moment later each pod's
					// extrapolation has moved (CI read 0.02 % apart).
					pv, _, _, err := api.Query(ctx, fmt.Sprintf("histogram_quantile(%g, %s)", qs.q, histQuery), at)
					if vec, ok := pv.(model.Vector); err != nil || !ok || len(vec) != 1 {
						t.Errorf("histogram_quantile: %v %v", pv, err)
					} else if prom := float64(vec[0].Value); math.Abs(*got-prom) > 1e-6*prom {
						t.Errorf("%s %s: danki %.4f ms, Prometheus' histogram_quantile %.4f ms", side.name, qs.label, *got, prom)
					}
					// The pods' own scrape timing weighs them slightly
					// differently; they all hold the same distribution.
					if want := exact[side.hash].Quantile(qs.q); math.Abs(*got-want) > 0.02*want {
						t.Errorf("%s %s: danki %.3f ms, the side's exact buckets %.3f ms", side.name, qs.label, *got, want)
					}
					truth := side.dist.quantile(qs.q)
					if lo, hi, _ := exact[side.hash].boundsAround(truth); *got <= lo || *got > hi {
						t.Errorf("%s %s: danki %.2f ms outside the bucket (%g, %g] of the true %.2f ms", side.name, qs.label, *got, lo, hi, truth)
					}
				}
			}
		})
	}
}

func fmtPtr(f *float64) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprint(*f)
}

// waitForScalar polls query until it returns one sample equal to want
// (Prometheus has scraped what the test exported), or fails at ctx's end.
func waitForScalar(t *testing.T, ctx context.Context, api promv1.API, what, query string, want float64) {
	t.Helper()
	for {
		v, _, _, err := api.Query(ctx, query, time.Now())
		if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 && float64(vec[0].Value) == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s (%s == %g): %v (last: %v)", what, query, want, ctx.Err(), v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// minSamples is how many samples (1 s apart) every series the tests read
// has in the window before they analyse it. increase() extrapolates a series
// to the window's end by up to 1.1 scrape intervals when its last sample is
// that recent (a counter that starts at 0 is not extrapolated backwards), so
// after minSamples-1 intervals a count reads at most maxOver × what was sent.
const (
	minSamples = 9
	maxOver    = 1 + 1.1/(minSamples-1)
)

// waitForSamples waits until every series of metric has minSamples samples
// in the last minute: the counts read from it are then within maxOver.
func waitForSamples(t *testing.T, ctx context.Context, api promv1.API, metric string) {
	t.Helper()
	waitForScalar(t, ctx, api, fmt.Sprintf("%d samples of every %s series", minSamples, metric),
		fmt.Sprintf(`min(count_over_time(%s[1m])) >= bool %d`, metric, minSamples), 1)
}

// analyzeSlowCanary analyses cfg, whose canary is about 2× slower than
// stable, and wants Fail naming the tail test and the 2× p99 ratio.
func analyzeSlowCanary(t *testing.T, ctx context.Context, cfg Config) (*Analyzer, Verdict) {
	t.Helper()
	a, v, _ := analyzeSlowCanaryAt(t, ctx, cfg)
	return a, v
}

// analyzeSlowCanaryAt is analyzeSlowCanary with danki's queries pinned to
// one instant, returned: a query of the test's at the same instant sees
// the same samples (increase() extrapolates each pod's series to the
// query's time, so two queries a moment apart weigh the pods differently).
func analyzeSlowCanaryAt(t *testing.T, ctx context.Context, cfg Config) (*Analyzer, Verdict, time.Time) {
	t.Helper()
	at := time.Now()
	a, err := NewAnalyzer(cfg, WithLogger(quiet), WithPolicy(policy.Local()), WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	v := a.Analyze(ctx, time.Time{})
	t.Logf("%s", v.Summary)
	if v.Phase != Fail || !strings.Contains(v.Summary, "canary's tail is heavier") || !strings.Contains(v.Summary, "p99 canary/stable 2.") {
		t.Fatalf("phase %s, want Fail naming the tail test and the 2× p99 ratio: %s", v.Phase, v.Summary)
	}
	return a, v, at
}
