package warmup

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
)

// jitPod is a pod stand-in with a metrics page: load at 1 ms flat (its
// latency converges at the rule's minimum), /healthz, and page at
// /actuator/prometheus answering with the JIT's compile time after the
// load requests served so far (nil page: 404). It records the scrapes'
// headers.
type jitPod struct {
	*httptest.Server
	load    atomic.Int64
	scrapes atomic.Int64
	page    func(load int64) (status int, body string)
	// actuator, if set, answers /actuator/metrics/jvm.compilation.time
	// (Micrometer's JSON; nil: 404).
	actuator func(load int64) (status int, body string)
	// actuatorScrapes counts its requests.
	actuatorScrapes atomic.Int64
	// redirect, if set, answers the page with a redirect there.
	redirect string
	mu       sync.Mutex
	headers  []http.Header
}

func newJITPod(t *testing.T, page func(load int64) (int, string), redirect ...string) *jitPod {
	t.Helper()
	p := &jitPod{page: page}
	if len(redirect) > 0 {
		p.redirect = redirect[0]
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/actuator/prometheus", func(w http.ResponseWriter, r *http.Request) {
		p.scrapes.Add(1)
		p.mu.Lock()
		p.headers = append(p.headers, r.Header.Clone())
		p.mu.Unlock()
		if p.redirect != "" {
			http.Redirect(w, r, p.redirect, http.StatusFound)
			return
		}
		p.answer(w, r, p.page, "text/plain; version=0.0.4; charset=utf-8")
	})
	mux.HandleFunc("/actuator/metrics/jvm.compilation.time", func(w http.ResponseWriter, r *http.Request) {
		p.actuatorScrapes.Add(1)
		p.answer(w, r, p.actuator, "application/vnd.spring-boot.actuator.v3+json")
	})
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {
		p.load.Add(1)
		time.Sleep(time.Millisecond)
	})
	p.Server = httptest.NewUnstartedServer(mux)
	p.Listener.Close()
	p.Listener = testutil.ListenLoopback(t)
	p.Start()
	t.Cleanup(p.Close)
	return p
}

// answer serves page (nil: 404) after the load requests so far.
func (p *jitPod) answer(w http.ResponseWriter, r *http.Request, page func(load int64) (int, string), contentType string) {
	if page == nil {
		http.NotFound(w, r)
		return
	}
	status, body := page(p.load.Load())
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// micrometerPage is Spring Boot's actuator page as Micrometer writes it,
// with the JIT's compile time ms.
func micrometerPage(ms float64) string {
	return `# HELP jvm_threads_live_threads The current number of live threads
# TYPE jvm_threads_live_threads gauge
jvm_threads_live_threads 23.0
# HELP jvm_compilation_time_ms_total The approximate accumulated elapsed time spent in compilation
# TYPE jvm_compilation_time_ms_total counter
jvm_compilation_time_ms_total{compiler="HotSpot 64-Bit Tiered Compilers"} ` + fmt.Sprint(ms) + "\n"
}

// actuatorJSON is Spring Boot's /actuator/metrics/jvm.compilation.time as
// the actuator writes it, with the JIT's compile time ms.
func actuatorJSON(ms float64) string {
	return `{"name":"jvm.compilation.time","description":"The approximate accumulated elapsed time spent in compilation","baseUnit":"milliseconds","measurements":[{"statistic":"COUNT","value":` + fmt.Sprint(ms) + `}],"availableTags":[{"tag":"compiler","values":["HotSpot 64-Bit Tiered Compilers"]}]}`
}

// jitConfig is fastConfig with room for a held stop.
func jitConfig() Config {
	cfg := fastConfig()
	cfg.MaxRequests = 6000
	return cfg
}

// runHeldByJIT warms pod, flat from the start but compiling until its
// request compilingUntil, and checks it was held until then.
func runHeldByJIT(t *testing.T, pod *jitPod, compilingUntil int64) (*Result, TargetResult) {
	t.Helper()
	res, err := Run(context.Background(), jitConfig(), []Target{{Name: "pod", URL: pod.URL}}, Options{})
	if err != nil {
		t.Fatalf("warm-up failed: %v\n%s", err, table(res))
	}
	tr := res.Targets[0]
	if tr.ConvergedAfter <= compilingUntil {
		t.Errorf("converged after %d requests while the JIT compiled until request %d\n%s", tr.ConvergedAfter, compilingUntil, table(res))
	}
	return res, tr
}

// A pod whose latency is flat from the start but whose JIT compiles until
// its 1,500th request is held until the JIT is quiet, and the result says
// the signal was used; the scrapes carry neither the marker header nor
// credentials.
func TestJITSignalHoldsTheStopWhileCompiling(t *testing.T) {
	skipLongLoad(t, "a warm-up held while its JIT compiles")
	const compilingUntil = 1500
	pod := newJITPod(t, func(load int64) (int, string) {
		return 200, micrometerPage(3000 + 2*float64(min(load, compilingUntil)))
	})
	res, tr := runHeldByJIT(t, pod, compilingUntil)
	if !strings.HasPrefix(tr.JIT, "used (compile time flat since request ") || !strings.Contains(tr.JIT, "held the stop back") {
		t.Errorf("JIT %q, want used, flat since a request, having held the stop back", tr.JIT)
	}
	t.Logf("JIT: %s", tr.JIT)
	if s := res.Summary(); !strings.Contains(s, "; JIT: used (") {
		t.Errorf("summary %q does not say the JIT signal was used", s)
	}
	if pod.scrapes.Load() < 10 {
		t.Errorf("%d scrapes, want one per window or so", pod.scrapes.Load())
	}
	pod.mu.Lock()
	defer pod.mu.Unlock()
	for _, h := range pod.headers {
		if h.Get("X-Danki-Warmup") != "" || h.Get("Authorization") != "" || h.Get("Cookie") != "" {
			t.Fatalf("a scrape carried the marker header or credentials: %v", h)
		}
	}
}

// A Spring Boot pod without a Prometheus registry (404 at
// /actuator/prometheus) still has the actuator's JSON of the meter: with
// the default path the warm-up reads that instead, holds the stop while
// the JIT compiles, and says where it read it.
func TestJITSignalFromTheActuatorsJSON(t *testing.T) {
	skipLongLoad(t, "a warm-up held while its JIT compiles")
	const compilingUntil = 1500
	pod := newJITPod(t, nil)
	pod.actuator = func(load int64) (int, string) { return 200, actuatorJSON(3000 + 2*float64(min(load, compilingUntil))) }
	_, tr := runHeldByJIT(t, pod, compilingUntil)
	port := pod.URL[strings.LastIndex(pod.URL, ":"):]
	if !strings.HasPrefix(tr.JIT, "used (") || !strings.HasSuffix(tr.JIT, "read at "+port+"/actuator/metrics/jvm.compilation.time)") {
		t.Errorf("JIT %q, want used, read at the actuator's JSON", tr.JIT)
	}
	if n := pod.scrapes.Load(); n != 1 {
		t.Errorf("the Prometheus page was asked %d times after a 404, want once", n)
	}
}

// Without a metrics page (404) the warm-up converges on latency as
// before, and says the signal was not exposed; each page is asked once.
func TestJITSignalNotExposed(t *testing.T) {
	skipLongLoad(t, "a warm-up to its plateau with no JIT page")
	pod := newJITPod(t, nil)
	res, err := Run(context.Background(), jitConfig(), []Target{{Name: "pod", URL: pod.URL}}, Options{})
	if err != nil {
		t.Fatalf("warm-up failed: %v\n%s", err, table(res))
	}
	tr := res.Targets[0]
	if !tr.Converged || tr.ConvergedAfter > 1500 {
		t.Errorf("converged %v after %d requests, want at the rule's minimum (flat latency)\n%s", tr.Converged, tr.ConvergedAfter, table(res))
	}
	port := pod.URL[strings.LastIndex(pod.URL, ":"):]
	if want := "not exposed (404 at " + port + "/actuator/prometheus, 404 at " + port + "/actuator/metrics/jvm.compilation.time)"; tr.JIT != want {
		t.Errorf("JIT %q, want %q", tr.JIT, want)
	}
	if n, json := pod.scrapes.Load(), pod.actuatorScrapes.Load(); n != 1 || json != 1 {
		t.Errorf("the pages were asked %d and %d times after a 404, want once each", n, json)
	}
}

// A page that does not parse, or has no compile time, or is not allowed
// (401: danki sends no credentials) never fails the warm-up.
func TestJITSignalUnreadable(t *testing.T) {
	skipLongLoad(t, "a warm-up to its plateau with an unreadable JIT page")
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"garbage", 200, "this is not { a metrics page\n", "unreadable ("},
		{"no such metric", 200, "# TYPE up gauge\nup 1\n", "not exposed (no jvm_compilation_time_ms_total or jvm_compilation_time_seconds_total at "},
		{"unauthorized", 401, "", "unreadable (HTTP 401 Unauthorized at "},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := newJITPod(t, func(int64) (int, string) { return c.status, c.body })
			res, err := Run(context.Background(), jitConfig(), []Target{{Name: "pod", URL: pod.URL}}, Options{})
			if err != nil || !res.Targets[0].Converged {
				t.Fatalf("warm-up failed: %v\n%s", err, table(res))
			}
			if got := res.Targets[0].JIT; !strings.HasPrefix(got, c.want) {
				t.Errorf("JIT %q, want %q…", got, c.want)
			}
		})
	}
}

// The page is read from the pod's own address only: the config gives a
// port and a path, never a host; a redirect (to another address) is not
// followed; every connection goes through the warm-up's checked dialer
// (the guard sees the pod's address and no other).
func TestJITSignalOnlyFromThePod(t *testing.T) {
	cfg := Config{JITMetrics: JITMetrics{Port: 9404, Path: "/metrics?x=1"}}.WithDefaults()
	if got, want := cfg.jitURL(Target{URL: "http://10.1.2.3:8080"}), "http://10.1.2.3:9404/metrics?x=1"; got != want {
		t.Errorf("jitURL %q, want %q", got, want)
	}
	for _, path := range []string{"http://169.254.169.254/latest", "//169.254.169.254/latest", "metrics", "/metrics#x", "/a b\x7f"} {
		c := Config{JITMetrics: JITMetrics{Path: path}}.WithDefaults()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "jitMetrics.path") {
			t.Errorf("path %q: %v, want a jitMetrics.path error", path, err)
		}
	}
	for _, bad := range []string{`{"jitMetrics": {"host": "169.254.169.254"}}`, `{"jitMetrics": {"url": "http://169.254.169.254/"}}`} {
		var c Config
		if err := config.Decode([]byte(bad), &c); err == nil {
			t.Errorf("%s decoded: a host must not be configurable", bad)
		}
	}
	if err := (Config{JITMetrics: JITMetrics{Port: 70000, Metric: "no-such name"}}.WithDefaults()).Validate(); err == nil ||
		!strings.Contains(err.Error(), "jitMetrics.port") || !strings.Contains(err.Error(), "jitMetrics.metric") {
		t.Errorf("port 70000, metric %q: %v, want errors naming both", "no-such name", err)
	}

	elsewhere := newJITPod(t, func(int64) (int, string) { return 200, micrometerPage(1) })
	pod := newJITPod(t, nil, elsewhere.URL+"/actuator/prometheus")
	var mu sync.Mutex
	dialled := map[netip.Addr]bool{}
	cfg = jitConfig()
	cfg.Guard = func(a netip.Addr) error {
		mu.Lock()
		dialled[a] = true
		mu.Unlock()
		return nil
	}
	res, err := Run(context.Background(), cfg, []Target{{Name: "pod", URL: pod.URL}}, Options{})
	if err != nil {
		t.Fatalf("warm-up failed: %v\n%s", err, table(res))
	}
	if n := elsewhere.scrapes.Load(); n != 0 {
		t.Errorf("the redirect was followed: %d requests to the other address", n)
	}
	if got := res.Targets[0].JIT; !strings.HasPrefix(got, "unreadable (HTTP 302 Found at ") {
		t.Errorf("JIT %q, want unreadable (HTTP 302 …)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialled) != 1 || !dialled[netip.MustParseAddr("127.0.0.1")] {
		t.Errorf("the guard saw %v, want the pod's 127.0.0.1 only", dialled)
	}
}

// Turned off, the page is never asked for.
func TestJITSignalOff(t *testing.T) {
	pod := newJITPod(t, func(int64) (int, string) { return 200, micrometerPage(1) })
	cfg := jitConfig()
	off := false
	cfg.JITMetrics.Enabled = &off
	res, err := Run(context.Background(), cfg, []Target{{Name: "pod", URL: pod.URL}}, Options{})
	if err != nil {
		t.Fatalf("warm-up failed: %v", err)
	}
	if n := pod.scrapes.Load(); n != 0 || res.Targets[0].JIT != "" || strings.Contains(res.Summary(), "JIT") {
		t.Errorf("off: %d scrapes, JIT %q, summary %q; want none", n, res.Targets[0].JIT, res.Summary())
	}
}

func TestJITActuatorMS(t *testing.T) {
	for _, c := range []struct {
		name, page string
		ms         float64
		found, err bool
	}{
		{"spring boot", actuatorJSON(1234.5), 1234.5, true, false},
		{"seconds", `{"name":"jvm.compilation.time","baseUnit":"seconds","measurements":[{"statistic":"COUNT","value":2.5}]}`, 2500, true, false},
		{"another meter", `{"name":"jvm.threads.live","measurements":[{"statistic":"VALUE","value":23}]}`, 0, false, false},
		{"no measurement", `{"name":"jvm.compilation.time","measurements":[]}`, 0, false, false},
		{"negative", `{"name":"jvm.compilation.time","measurements":[{"statistic":"COUNT","value":-1}]}`, 0, false, true},
		{"unknown unit", `{"name":"jvm.compilation.time","baseUnit":"fortnights","measurements":[{"statistic":"COUNT","value":1}]}`, 0, false, true},
		{"garbage", `{"name":`, 0, false, true},
	} {
		ms, found, err := jitActuatorMS([]byte(c.page))
		if ms != c.ms || found != c.found || (err != nil) != c.err {
			t.Errorf("%s: %g, %v, %v; want %g, %v, error %v", c.name, ms, found, err, c.ms, c.found, c.err)
		}
	}
	for _, c := range []struct {
		contentType, page string
		json              bool
	}{
		{"application/vnd.spring-boot.actuator.v3+json", "{}", true},
		{"application/json; charset=utf-8", "{}", true},
		{"text/plain; version=0.0.4", "{ not json", false},
		{"", ` {"name":"x"}`, true},
		{"", "# TYPE up gauge\n", false},
	} {
		if got := isJSON(http.Header{"Content-Type": {c.contentType}}, []byte(c.page)); got != c.json {
			t.Errorf("isJSON(%q, %q) = %v, want %v", c.contentType, c.page, got, c.json)
		}
	}
}

func TestJITCompileMS(t *testing.T) {
	h := http.Header{"Content-Type": {"text/plain; version=0.0.4"}}
	for _, c := range []struct {
		name, page string
		names      []string
		ms         float64
		found      bool
		err        bool
	}{
		{"micrometer, summed over series", micrometerPage(1200) + `jvm_compilation_time_ms_total{compiler="other"} 34` + "\n", JITMetrics{}.metrics(), 1234, true, false},
		{"prometheus java client, seconds", "# TYPE jvm_compilation_time_seconds_total counter\njvm_compilation_time_seconds_total 9.756\n", JITMetrics{}.metrics(), 9756, true, false},
		{"family without _total", "# TYPE jvm_compilation_time_seconds counter\njvm_compilation_time_seconds 2.5\n", JITMetrics{}.metrics(), 2500, true, false},
		{"untyped", "jvm_compilation_time_ms_total 77\n", JITMetrics{}.metrics(), 77, true, false},
		{"configured metric", "my_jit_ms 5\njvm_compilation_time_ms_total 9\n", JITMetrics{Metric: "my_jit_ms"}.metrics(), 5, true, false},
		{"absent", "# TYPE up gauge\nup 1\n", JITMetrics{}.metrics(), 0, false, false},
		{"garbage", "{{{ not metrics\n", JITMetrics{}.metrics(), 0, false, true},
	} {
		ms, found, err := jitCompileMS([]byte(c.page), h, c.names)
		if ms != c.ms || found != c.found || (err != nil) != c.err {
			t.Errorf("%s: %g, %v, %v; want %g, %v, error %v", c.name, ms, found, err, c.ms, c.found, c.err)
		}
	}
}
