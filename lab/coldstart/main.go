// Command coldstart measures how a freshly started service's latency falls as
// it warms up: it sends sequential requests to a URL and prints a Markdown
// table of latency per request range (1, 2–10, 11–100, …), the shape of the
// field reports' tables. Used for examples/sample-app/README.md:
//
//	go run ./lab/coldstart -url http://127.0.0.1:18080/ -n 5000
//
// With -jar it starts the sample app itself on 127.0.0.1 (the lab's JVM
// flags), waits for /healthz as a readiness probe does, measures it and stops
// it: one cold-start shape of the sample app per run, e.g.
//
//	go run ./lab/coldstart -jar .cache/lab/bin/sample-app.jar -env COLD_SHAPE=cache -n 1000
//	go run ./lab/coldstart -jar .cache/lab/bin/sample-app.jar -env COLD_SHAPE=lazy-endpoints -mix /a=6,/b=3,/c=1
//
// With -jit it also reads the JVM's accumulated JIT compile time
// (Micrometer's jvm_compilation_time_ms_total on /actuator/prometheus, or
// -jit-path) at the end of every row; -qps paces the requests (as a load
// generator does) and -cpus pins a JVM started with -jar to some CPUs (one
// CPU: a pod's limit), e.g. the Spring sample's steps and its JIT
// (docs/stopping-rule.md, "The JIT hold"):
//
//	go run ./lab/coldstart -jar .cache/lab/bin/sample-app-spring.jar -cpus 1 -qps 50 -n 10000 -jit -rows $(seq -s, 500 500 10000)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18080/", "URL to measure (a fresh pod, directly or through the gateway); ignored with -jar")
	jar := flag.String("jar", "", "start this sample-app jar on 127.0.0.1 and measure it (needs java)")
	var env multiFlag
	flag.Var(&env, "env", "KEY=VALUE for the app started with -jar (repeatable), e.g. COLD_SHAPE=cache")
	mix := flag.String("mix", "/", "weighted request paths, PATH=WEIGHT,… (e.g. /a=6,/b=3,/c=1); each request gets ?seed=N")
	n := flag.Int("n", 3000, "requests to send, one at a time")
	rows := flag.String("rows", "1,10,100,500,1000,2000,5000,10000", "last request of each table row")
	seed := flag.Uint64("seed", 1, "seed of the weighted path picks")
	csv := flag.String("csv", "", "also write every request (n,path,ms) to this CSV file")
	qps := flag.Float64("qps", 0, "requests per second, one at a time (0: each as soon as the last answered)")
	cpus := flag.String("cpus", "", "with -jar: run the JVM on these CPUs only (taskset -c LIST, and as many processors for the JVM), e.g. 1")
	jit := flag.Bool("jit", false, "read the JIT's compile time (jvm_compilation_time_ms_total on -jit-path) at the end of every row")
	jitPath := flag.String("jit-path", "/actuator/prometheus", "with -jit: the app's Prometheus page (Spring Boot's; the sample app serves it at /metrics)")
	flag.Parse()
	o := options{mix: *mix, n: *n, rows: *rows, seed: *seed, csv: *csv, qps: *qps, cpus: *cpus, jit: *jit, jitPath: *jitPath}
	if err := run(*url, *jar, env, o); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

// options are the command's flags but -url, -jar and -env.
type options struct {
	mix     string
	n       int
	rows    string
	seed    uint64
	csv     string
	qps     float64
	cpus    string
	jit     bool
	jitPath string
}

func run(url, jar string, env []string, o options) error {
	if o.n < 1 {
		return fmt.Errorf("-n must be >= 1")
	}
	if o.qps < 0 {
		return fmt.Errorf("-qps must be >= 0 (0: one request as soon as the last answered), got %g", o.qps)
	}
	if o.jit && !strings.HasPrefix(o.jitPath, "/") {
		return fmt.Errorf("-jit-path %q must be a path on the app, starting with /", o.jitPath)
	}
	if o.cpus != "" && jar == "" {
		return fmt.Errorf("-cpus pins the JVM that -jar starts: give -jar too")
	}
	paths, err := parseMix(o.mix)
	if err != nil {
		return err
	}
	rows, err := parseRows(o.rows)
	if err != nil {
		return err
	}
	if jar != "" {
		logPath := filepath.Join(os.TempDir(), "coldstart-sample-app.log")
		a, err := startApp(context.Background(), jar, logPath, env, 2*time.Minute, o.cpus)
		if err != nil {
			return err
		}
		defer a.stop()
		url = a.URL
		fmt.Fprintf(os.Stderr, "coldstart: sample app ready at %s (env %v, CPUs %q, log %s)\n", url, env, o.cpus, logPath)
	}
	var pace time.Duration
	if o.qps > 0 {
		pace = time.Duration(float64(time.Second) / o.qps)
	}
	// The JIT's compile time at the start and at the end of every row.
	var jit []float64
	readJIT := func() error {
		if !o.jit {
			return nil
		}
		ms, err := compiledMs(strings.TrimSuffix(url, "/") + o.jitPath)
		if err != nil {
			return fmt.Errorf("-jit: %w", err)
		}
		jit = append(jit, ms)
		return nil
	}
	if err := readJIT(); err != nil {
		return err
	}
	rowEnd := map[int]bool{}
	for _, r := range rows {
		rowEnd[r] = true
	}
	rs, err := measure(url, mixRequests(paths, rand.New(rand.NewPCG(o.seed, 0))), o.n, pace, func(done int) error {
		if rowEnd[done] {
			return readJIT()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if o.jit && !rowEnd[o.n] {
		if err := readJIT(); err != nil {
			return err
		}
	}
	if o.csv != "" {
		if err := writeCSV(o.csv, rs); err != nil {
			return err
		}
	}
	how := "sequential requests"
	if o.qps > 0 {
		how = fmt.Sprintf("requests one at a time at %g/s", o.qps)
	}
	fmt.Printf("%d %s to %s (mix %s, answered by %v)\n\n", o.n, how, url, o.mix, versions(rs))
	if o.jit {
		fmt.Printf("JIT compile time when the measurement started: %.0f ms\n\n", jit[0])
	}
	printTable(os.Stdout, rs, rows, jit)
	if len(paths) > 1 {
		fmt.Println()
		printPaths(os.Stdout, rs, paths)
	}
	return nil
}

// result is one request's outcome.
type result struct {
	path    string // without the query
	ms      float64
	version string // X-Version
	cache   string // X-Cache (the cache shape: hit or miss)
}

// weighted is one path of the request mix.
type weighted struct {
	path   string
	weight int
}

// mixRequests returns request i's path and query: a path picked from the
// weighted mix, with ?seed=i (a different workload every time, as the
// README's tables were measured).
func mixRequests(paths []weighted, rng *rand.Rand) func(i int) string {
	total := 0
	for _, p := range paths {
		total += p.weight
	}
	return func(i int) string {
		pick := rng.IntN(total)
		for _, p := range paths {
			if pick -= p.weight; pick < 0 {
				return p.path + "?seed=" + strconv.Itoa(i)
			}
		}
		panic("unreachable")
	}
}

// measure sends n sequential GETs over one keep-alive connection, request i
// to url + next(i) (a path with its query), one every pace (0: each as soon
// as the last answered; a late answer sends the next at once), and calls
// after (when not nil) with the count of requests done after each.
func measure(url string, next func(i int) string, n int, pace time.Duration, after func(done int) error) ([]result, error) {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	base := strings.TrimSuffix(url, "/")
	rs := make([]result, 0, n)
	due := time.Now()
	for i := range n {
		if pace > 0 {
			time.Sleep(time.Until(due))
			due = due.Add(pace)
		}
		target := next(i)
		path, _, _ := strings.Cut(target, "?")
		start := time.Now()
		resp, err := client.Get(base + target)
		if err != nil {
			return nil, fmt.Errorf("request %d (%s): %w", i+1, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ms := float64(time.Since(start).Microseconds()) / 1000
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("request %d (%s): status %d", i+1, path, resp.StatusCode)
		}
		rs = append(rs, result{path: path, ms: ms, version: resp.Header.Get("X-Version"), cache: resp.Header.Get("X-Cache")})
		if after != nil {
			if err := after(i + 1); err != nil {
				return nil, err
			}
		}
	}
	return rs, nil
}

// printTable prints latency per request range; "× warm" divides by the p50
// of the last quarter of the run (converged, for the shapes that converge).
// jit, when not empty, is the JIT's compile time at the start and at the
// end of each row (measure's reads): the table adds what each row compiled.
func printTable(w io.Writer, rs []result, rows []int, jit []float64) {
	lat := latencies(rs)
	warm := pct(lat[len(lat)*3/4:], 50)
	head, rule := "| requests | p50 ms | p90 ms | p99 ms | max ms | × warm p50 |", "|---|---|---|---|---|---|"
	if len(jit) > 0 {
		head, rule = head+" JIT ms compiled | JIT ms per request |", rule+"---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	from := 1
	for row, to := range rows {
		if from > len(lat) {
			break
		}
		seg := lat[from-1 : min(to, len(lat))]
		label := fmt.Sprintf("%d–%d", from, min(to, len(lat)))
		if from == min(to, len(lat)) {
			label = strconv.Itoa(from)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f× |", label, pct(seg, 50), pct(seg, 90), pct(seg, 99), slices.Max(seg), pct(seg, 50)/warm)
		if row+1 < len(jit) {
			added := jit[row+1] - jit[row]
			fmt.Fprintf(w, " %.0f | %.2f |", added, added/float64(len(seg)))
		}
		fmt.Fprintln(w)
		from = to + 1
	}
}

// printPaths prints, per path of the mix, its first call and its calls
// 2–10, 11–100 and later, counted per path.
func printPaths(w io.Writer, rs []result, paths []weighted) {
	fmt.Fprintln(w, "| path | weight | calls | 1st call ms | calls 2–10 p50 ms | calls 11–100 p50 ms | later calls p50 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, p := range paths {
		var lat []float64
		for _, r := range rs {
			if r.path == p.path {
				lat = append(lat, r.ms)
			}
		}
		cell := func(from, to int) string {
			if from > len(lat) {
				return "–"
			}
			return fmt.Sprintf("%.1f", pct(lat[from-1:min(to, len(lat))], 50))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s |\n", p.path, p.weight, len(lat), cell(1, 1), cell(2, 10), cell(11, 100), cell(101, len(lat)))
	}
}

func writeCSV(path string, rs []result) error {
	var b strings.Builder
	b.WriteString("n,path,ms\n")
	for i, r := range rs {
		fmt.Fprintf(&b, "%d,%s,%.3f\n", i+1, r.path, r.ms)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("-csv: %w", err)
	}
	return nil
}

func latencies(rs []result) []float64 {
	lat := make([]float64, len(rs))
	for i, r := range rs {
		lat[i] = r.ms
	}
	return lat
}

func parseMix(s string) ([]weighted, error) {
	var out []weighted
	for _, e := range strings.Split(s, ",") {
		path, w, found := strings.Cut(strings.TrimSpace(e), "=")
		weight := 1
		if found {
			var err error
			if weight, err = strconv.Atoi(w); err != nil || weight < 1 {
				return nil, fmt.Errorf("-mix %q: weight of %s must be a positive integer, got %q", s, path, w)
			}
		}
		if !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("-mix %q: path %q must start with /", s, path)
		}
		out = append(out, weighted{path, weight})
	}
	return out, nil
}

func parseRows(s string) ([]int, error) {
	var rows []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || (len(rows) > 0 && v <= rows[len(rows)-1]) {
			return nil, fmt.Errorf("-rows %q: want increasing positive integers, e.g. 1,10,100,1000", s)
		}
		rows = append(rows, v)
	}
	return rows, nil
}

func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)))
	return s[min(i, len(s)-1)]
}

func versions(rs []result) []string {
	count := map[string]int{}
	for _, r := range rs {
		count[r.version]++
	}
	var k []string
	for v, c := range count {
		k = append(k, fmt.Sprintf("%s×%d", v, c))
	}
	slices.Sort(k)
	return k
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
