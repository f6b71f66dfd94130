package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestShapes starts the real sample app JVM on 127.0.0.1 once per cold-start
// shape (COLD_SHAPE, and the noise knob), sends it a few hundred sequential
// requests and checks the shape's signature in the measured latencies. The
// bounds are loose on purpose (the machine may be busy): each checks the
// mechanism (a cache miss waits, a lazy endpoint's first call waits, a warm
// pod has no cold first request, …), not a speed. ~1 minute on 2 busy cores.
func TestShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM per shape (~1 min): not in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("stops the JVM by process group: Linux only")
	}
	for _, tool := range []string{"java", "javac", "jar", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (%v): the sample app needs a JDK 17+ (Debian: openjdk-17-jdk-headless)", tool, err)
		}
	}
	jar := sampleAppJar(t)
	seq := func(i int) string { return "/?seed=" + strconv.Itoa(i) }

	// jit, the default: the natural cold start, the reference for the others.
	var jit []result
	var jitClasses float64
	t.Run("jit", func(t *testing.T) {
		a := start(t, jar)
		jit = send(t, a, seq, 300)
		jitClasses = metric(t, a, "jvm_classes_loaded")
		first, steady := jit[0].ms, p50(latencies(jit[200:]))
		t.Logf("first request %.1f ms, requests 201–300 p50 %.1f ms, %.0f classes loaded", first, steady, jitClasses)
		if first < 10*steady {
			t.Errorf("jit: first request %.1f ms is not >= 10 × the p50 of requests 201–300 (%.1f ms): no cold start?", first, steady)
		}
	})

	t.Run("jit-slow", func(t *testing.T) {
		if jit == nil {
			t.Skip("needs the jit run")
		}
		const copies = 16
		a := start(t, jar, "COLD_SHAPE=jit-slow", "JIT_SLOW_COPIES="+strconv.Itoa(copies))
		rs := send(t, a, seq, 300)
		classes := metric(t, a, "jvm_classes_loaded")
		t.Logf("requests 2–300: %.0f ms in all (jit: %.0f ms); requests 101–300 p50 %.1f ms (jit %.1f ms); %.0f classes loaded (jit %.0f)",
			sum(rs[1:]), sum(jit[1:]), p50(latencies(rs[100:])), p50(latencies(jit[100:300])), classes, jitClasses)
		// Each copy has its own 300 filter classes plus Workload, Json, Ctx…
		if want := jitClasses + (copies-1)*300; classes < want {
			t.Errorf("jit-slow: %.0f classes loaded, want >= %.0f (jit's %.0f + %d more copies of the 300 filter classes)", classes, want, jitClasses, copies-1)
		}
		if sum(rs[1:]) <= sum(jit[1:]) {
			t.Errorf("jit-slow: requests 2–300 took %.0f ms in all, not more than jit's %.0f ms", sum(rs[1:]), sum(jit[1:]))
		}
	})

	t.Run("cache", func(t *testing.T) {
		const keys, missMs = 20, 40
		a := start(t, jar, "COLD_SHAPE=cache", "CACHE_KEYS="+strconv.Itoa(keys), "CACHE_MISS_MS="+strconv.Itoa(missMs))
		// Random keys from a seeded source: which requests miss is known.
		rng := rand.New(rand.NewPCG(14, 1))
		picked := make([]int, 200)
		for i := range picked {
			picked[i] = rng.IntN(keys)
		}
		rs := send(t, a, func(i int) string { return fmt.Sprintf("/?seed=%d&key=%d", i, picked[i]) }, len(picked))
		seen := map[int]bool{}
		var misses, after []float64
		var wrongHeader, fastMiss []string
		full := 0 // requests before the cache held every key
		for i, r := range rs {
			miss := !seen[picked[i]]
			seen[picked[i]] = true
			if want := map[bool]string{true: "miss", false: "hit"}[miss]; r.cache != want {
				wrongHeader = append(wrongHeader, fmt.Sprintf("request %d (key %d): X-Cache %q, want %q", i+1, picked[i], r.cache, want))
			}
			switch {
			case miss:
				misses = append(misses, r.ms)
				if r.ms < missMs {
					fastMiss = append(fastMiss, fmt.Sprintf("request %d (key %d): %.1f ms", i+1, picked[i], r.ms))
				}
				full = i + 1
			case full > 0 && len(seen) == keys:
				after = append(after, r.ms)
			}
		}
		t.Logf("%d misses (p50 %.1f ms), cache full after request %d, then %d requests p50 %.1f ms p90 %.1f ms",
			len(misses), p50(misses), full, len(rs)-full, p50(after), pct(after, 90))
		if len(wrongHeader) > 0 {
			t.Errorf("cache: %d of %d requests are not a miss exactly on each key's first read, e.g. %s", len(wrongHeader), len(rs), wrongHeader[0])
		}
		if len(fastMiss) > 0 {
			t.Errorf("cache: %d misses took less than CACHE_MISS_MS %d, e.g. %s", len(fastMiss), missMs, fastMiss[0])
		}
		if len(misses) != keys || len(rs)-full < 50 {
			t.Fatalf("cache: the test's seeded keys should fill the cache (%d keys) early, got %d misses, full after %d of %d", keys, len(misses), full, len(rs))
		}
		// The step: once full, most requests are below a miss's cost (every
		// miss costs at least CACHE_MISS_MS, so without the step the median
		// could not be). The median, not p90: on two shared cores a busy
		// machine puts a tenth of a still-cold JVM's requests near 40 ms.
		if p := p50(latencies(rs[full:])); p >= missMs {
			t.Errorf("cache: no step down once the cache is full: p50 of requests %d–%d is %.1f ms, not below CACHE_MISS_MS %d", full+1, len(rs), p, missMs)
		}
	})

	t.Run("lazy-endpoints", func(t *testing.T) {
		init := map[string]float64{"/a": 50, "/b": 150, "/c": 300}
		a := start(t, jar, "COLD_SHAPE=lazy-endpoints", "LAZY_ENDPOINTS=/a=50,/b=150,/c=300")
		paths := []weighted{{"/a", 6}, {"/b", 3}, {"/c", 1}}
		rs := send(t, a, mixRequests(paths, rand.New(rand.NewPCG(14, 2))), 300)
		for _, p := range paths {
			var lat []float64
			for _, r := range rs {
				if r.path == p.path {
					lat = append(lat, r.ms)
				}
			}
			if len(lat) < 15 {
				t.Fatalf("lazy-endpoints: only %d calls of %s in the mix; want >= 15", len(lat), p.path)
			}
			later := p50(lat[10:])
			t.Logf("%s (weight %d): %d calls, first %.1f ms, calls 2–10 p50 %.1f ms, later p50 %.1f ms", p.path, p.weight, len(lat), lat[0], p50(lat[1:10]), later)
			if lat[0] < init[p.path] {
				t.Errorf("lazy-endpoints: first call of %s took %.1f ms, less than its first-call cost %.0f ms", p.path, lat[0], init[p.path])
			}
			if lat[0] < 3*later {
				t.Errorf("lazy-endpoints: first call of %s (%.1f ms) is not 3× slower than its calls after the 10th (p50 %.1f ms)", p.path, lat[0], later)
			}
		}
	})

	t.Run("warm", func(t *testing.T) {
		if jit == nil {
			t.Skip("needs the jit run")
		}
		started := time.Now()
		a := start(t, jar, "COLD_SHAPE=warm", "WARM_REQUESTS=2000")
		readyAfter := time.Since(started)
		rs := send(t, a, seq, 200)
		steady := p50(latencies(rs[100:]))
		t.Logf("ready after %v; first request %.1f ms (jit's: %.1f ms), requests 2–10 p50 %.1f ms, 101–200 p50 %.1f ms", readyAfter.Round(time.Millisecond), rs[0].ms, jit[0].ms, p50(latencies(rs[1:10])), steady)
		if rs[0].ms > jit[0].ms/5 {
			t.Errorf("warm: first request %.1f ms is not 5× faster than a cold (jit) first request's %.1f ms", rs[0].ms, jit[0].ms)
		}
		if p := p50(latencies(rs[1:10])); p > 3*steady+2 {
			t.Errorf("warm: requests 2–10 p50 %.1f ms, not near the steady p50 %.1f ms of requests 101–200", p, steady)
		}
		if !strings.Contains(readFile(t, a.log), "warm after 2000 requests to itself") {
			t.Errorf("warm: the app's log does not say it warmed itself before readiness:\n%s", readFile(t, a.log))
		}
	})

	t.Run("never", func(t *testing.T) {
		// A drift well above a cold JVM's own speed-up between the blocks
		// compared: at 200 µs the expected 16 ms was once measured 7.8 ms
		// (the base latency fell ~8 ms between them on a loaded machine).
		const period, busyMs, driftUs = 40, 20, 500
		a := start(t, jar, "COLD_SHAPE=never", "NEVER_PERIOD="+strconv.Itoa(period), "NEVER_MS="+strconv.Itoa(busyMs), "NEVER_DRIFT_US="+strconv.Itoa(driftUs))
		rs := send(t, a, seq, 6*period)
		block := func(k int) float64 { return p50(latencies(rs[k*period : (k+1)*period])) } // k-th block of NEVER_PERIOD requests
		t.Logf("p50 per block of %d requests (quiet, busy, …): %.1f %.1f %.1f %.1f %.1f %.1f ms", period, block(0), block(1), block(2), block(3), block(4), block(5))
		// Regime changes: each busy block is slower than the quiet ones around it.
		for _, k := range []int{3, 5} {
			if block(k) < block(k-1)+busyMs/2 {
				t.Errorf("never: busy block %d (p50 %.1f ms) is not >= %d ms slower than the quiet block before it (%.1f ms)", k+1, block(k), busyMs/2, block(k-1))
			}
		}
		// The trend: two quiet blocks 2 × NEVER_PERIOD requests apart differ
		// by about that many × NEVER_DRIFT_US.
		if d, want := block(4)-block(2), 2*period*driftUs/1000.0; d < want/2 {
			t.Errorf("never: quiet block 5 is only %.1f ms slower than quiet block 3, want >= %.1f (half of %d requests × %d µs)", d, want/2, 2*period, driftUs)
		}
	})

	t.Run("noise", func(t *testing.T) {
		const percent, noiseMs, n = 5, 400, 500
		a := start(t, jar, "NOISE_PERCENT="+strconv.Itoa(percent), "NOISE_MS="+strconv.Itoa(noiseMs))
		rs := send(t, a, seq, n)
		// After the first 100 (cold) requests a spike is a request of at
		// least 0.5 × NOISE_MS, the smallest spike the app adds: 200 ms, far
		// above a busy machine's own hiccups (without noise: 0–2 per 400
		// requests at load 10; ≥ 50 ms ones were ~3 %).
		spikes := 0
		for _, r := range rs[100:] {
			if r.ms >= noiseMs/2 {
				spikes++
			}
		}
		want := float64(n-100) * percent / 100
		t.Logf("%d spikes >= %d ms in requests 101–%d (expected %.0f); p50 %.1f ms", spikes, noiseMs/2, n, want, p50(latencies(rs[100:])))
		// Binomial(400, 0.05): mean 20, sd 4.4; the upper bound leaves room for a busy machine's own hiccups.
		if float64(spikes) < want*0.4 || float64(spikes) > want*1.8 {
			t.Errorf("noise: %d spikes in %d requests, want %.0f–%.0f (NOISE_PERCENT %d)", spikes, n-100, want*0.4, want*1.8, percent)
		}
		if p := p50(latencies(rs[100:])); p >= noiseMs/8 {
			t.Errorf("noise: p50 %.1f ms: more than a share of the requests is slowed", p)
		}
	})
}

// runningApp is an app started by start, with its log path.
type runningApp struct {
	*app
	log string
}

// start starts the sample app with env and stops it when the test ends.
func start(t *testing.T, jar string, env ...string) runningApp {
	t.Helper()
	return startWithin(t, jar, 2*time.Minute, env...)
}

// startWithin starts the jar (startApp) with env, waiting up to ready for
// it to answer; at the test's end the JVM is stopped, a JVM that exited
// before that fails the test, and a failed test logs the JVM's output.
func startWithin(t *testing.T, jar string, ready time.Duration, env ...string) runningApp {
	t.Helper()
	log := filepath.Join(t.TempDir(), "app.log")
	a, err := startApp(context.Background(), jar, log, env, ready, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case err := <-a.done:
			a.done <- err
			t.Errorf("the JVM with %v exited before the test ended: %v", env, err)
		default:
		}
		a.stop()
		if t.Failed() {
			t.Logf("log of the JVM with %v (%s):\n%s", env, log, readFile(t, log))
		}
	})
	return runningApp{a, log}
}

func send(t *testing.T, a runningApp, next func(int) string, n int) []result {
	t.Helper()
	rs, err := measure(a.URL, next, n, 0, nil)
	if err != nil {
		t.Fatalf("%v (app log:\n%s)", err, readFile(t, a.log))
	}
	return rs
}

// metric reads one unlabelled gauge from the app's /metrics.
func metric(t *testing.T, a runningApp, name string) float64 {
	t.Helper()
	return promValue(t, a.URL+"metrics", name)
}

// promValue reads the value of metric name (summed over its series, or the
// one its labels name) from the Prometheus text at url.
func promValue(t *testing.T, url, name string) float64 {
	t.Helper()
	v, err := promSum(url, name)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	return v
}

// sampleAppJar returns $SAMPLE_APP_JAR when set, else the lab's jar when
// lab/scripts/build.sh built it from the current sources (its stamp matches),
// else builds one into a temporary directory with
// examples/sample-app/build.sh (~10 s).
func sampleAppJar(t *testing.T) string {
	t.Helper()
	if jar := os.Getenv("SAMPLE_APP_JAR"); jar != "" {
		t.Logf("using $SAMPLE_APP_JAR %s", jar)
		return jar
	}
	repo := repoRoot(t)
	dir := filepath.Join(repo, "examples", "sample-app")
	pin := labFingerprint(t, "sample-app", append([]string{filepath.Join(dir, "build.sh")}, sourceFiles(t, dir, ".java")...)...)
	if lab, ok := labJar(t, "sample-app", pin); ok {
		t.Logf("using a copy of the lab's jar (built from these sources): %s", lab)
		return lab
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(dir, "build.sh"), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the sample app: %v\n%s", err, b)
	}
	t.Logf("built %s (the lab's jar is missing or older than the sources)", filepath.Join(out, "sample-app.jar"))
	return filepath.Join(out, "sample-app.jar")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// labJar is a copy, in the test's temporary directory, of the lab's jar of
// component name ($DANKI_CACHE/lab/bin/NAME.jar, default .cache) when its
// stamp is pin: built from the current sources. Else it returns the lab's
// path and false. A copy, because lab down (lib.sh's lab_leftovers) takes
// every process with a $bin/*.jar argument for one of the lab's pods: a
// test's JVM run from there is killed by a teardown on the same machine,
// and fails that teardown ("left processes behind").
func labJar(t *testing.T, name, pin string) (string, bool) {
	t.Helper()
	cache := os.Getenv("DANKI_CACHE")
	if cache == "" {
		cache = filepath.Join(repoRoot(t), ".cache")
	}
	jar := filepath.Join(cache, "lab", "bin", name+".jar")
	stamp, _ := os.ReadFile(filepath.Join(cache, "lab", "stamps", name))
	if strings.TrimSpace(string(stamp)) != pin {
		return jar, false
	}
	b, err := os.ReadFile(jar)
	if err != nil {
		return jar, false
	}
	cp := filepath.Join(t.TempDir(), name+".jar")
	if err := os.WriteFile(cp, b, 0o644); err != nil {
		t.Fatalf("copying the lab's %s: %v", jar, err)
	}
	return cp, true
}

// labFingerprint is lab/scripts/build.sh's pin of a component: sha256 of
// its name, a newline and the files in order.
func labFingerprint(t *testing.T, name string, files ...string) string {
	t.Helper()
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// sourceFiles are the files under dir/src whose names end in suffix ("":
// all), in byte order. (build.sh sorts the sample app's with the shell's
// sort: should its locale order them otherwise, the pins differ and the
// test builds its own jar.)
func sourceFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(dir, "src"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, suffix) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

func p50(ms []float64) float64 { return pct(ms, 50) }

func sum(rs []result) float64 {
	s := 0.0
	for _, r := range rs {
		s += r.ms
	}
	return s
}
