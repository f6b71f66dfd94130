package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"fortio.org/fortio/fhttp"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
)

// warmupServer is a cold pod stand-in on 127.0.0.1: 1 ms + 20 ms·e^(−n/40),
// health path /healthz.
func warmupServer(t *testing.T) *testutil.ColdServer {
	t.Helper()
	srv := testutil.NewColdServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 40))
	srv.HealthPath = "/healthz"
	t.Cleanup(func() {
		if n := srv.Unmarked(); n != 0 {
			t.Errorf("%d requests without the marker header X-Danki-Warmup: 1", n)
		}
	})
	return srv
}

func runWarmupCmd(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"warmup"}, args...))
	err = root.Execute()
	return out.String(), errOut.String(), err
}

var quickWarmup = []string{"--health-path", "/healthz", "--qps", "500", "-c", "2", "--window", "20", "--min-requests", "60", "--tolerance", "0.5", "--abs-tolerance", "3ms", "--deadline", "60s"}

func TestWarmupCommandConverges(t *testing.T) {
	srv := warmupServer(t)
	jsonPath := filepath.Join(t.TempDir(), "warmup.json")
	stdout, stderr, err := runWarmupCmd(append([]string{"--url", srv.URL, "--json", jsonPath, "--max-requests", "3000"}, quickWarmup...)...)
	if err != nil {
		t.Fatalf("danki warmup: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"| window | requests |", "converged after", "converged: 1/1 targets warm"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// Progress goes to stderr (not a terminal here: one line per update),
	// the converged line saying by which rule it is warm.
	if !strings.Contains(stderr, "waiting for 1 target(s)") || !regexp.MustCompile(`window [0-9]+: p50 [0-9.]+ms p99`).MatchString(stderr) || !strings.Contains(stderr, "warm on its own plateau: not improving at its last ") {
		t.Errorf("stderr progress:\n%s", stderr)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res fhttp.HTTPRunnerResults
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("--json is not fortio's result JSON: %v", err)
	}
	if res.DurationHistogram == nil || res.DurationHistogram.Count != srv.Load() || res.RetCodes[200] != srv.Load() {
		t.Errorf("fortio JSON counts %+v / codes %v, server served %d", res.DurationHistogram, res.RetCodes, srv.Load())
	}
}

// --cpu-budget bounds the pace by rate × latency, and the summary says so.
func TestWarmupCommandCPUBudget(t *testing.T) {
	srv := warmupServer(t)
	stdout, stderr, err := runWarmupCmd(append([]string{"--url", srv.URL, "--max-requests", "3000", "--cpu-budget", "0.5"}, quickWarmup...)...)
	if err != nil {
		t.Fatalf("danki warmup --cpu-budget 0.5: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "CPU budget 0.5 cores per pod (lowered the pace") {
		t.Errorf("stdout does not name the CPU budget:\n%s", stdout)
	}
}

// --cpu-budget takes the cpuBudget field's forms: cores as in a pod's
// resources, or a share of each pod's CPU request.
func TestWarmupFlagsCPUBudgetForms(t *testing.T) {
	for arg, want := range map[string]config.CPUBudget{
		"0.25": {Cores: 0.25}, "250m": {Cores: 0.25}, "2": {Cores: 2}, "50%": {Share: 0.5},
	} {
		cmd, f := warmupCmd()
		if err := cmd.Flags().Parse([]string{"--selector", "app=cart", "--cpu-budget", arg}); err != nil {
			t.Fatalf("--cpu-budget %s: %v", arg, err)
		}
		cfg, err := f.config()
		if err != nil {
			t.Fatalf("--cpu-budget %s: config: %v", arg, err)
		}
		if cfg.CPUBudget == nil || *cfg.CPUBudget != want {
			t.Errorf("--cpu-budget %s: cpuBudget = %v, want %v", arg, cfg.CPUBudget, want)
		}
	}
}

func TestWarmupCommandMeasureMode(t *testing.T) {
	srv := warmupServer(t)
	stdout, _, err := runWarmupCmd("--url", srv.URL, "--health-path", "/healthz", "--until-converged=false", "--max-requests", "100", "-c", "1", "--qps", "500", "--window", "20")
	if err != nil {
		t.Fatalf("measure mode: %v\n%s", err, stdout)
	}
	if srv.Load() != 100 {
		t.Errorf("--until-converged=false --max-requests 100 -c 1 sent %d requests, want 100", srv.Load())
	}
	if strings.Count(stdout, "\n| ") != 2+5 { // header, separator, 5 windows of 20
		t.Errorf("want 5 window rows:\n%s", stdout)
	}
	// A fixed count was asked for, not convergence: the output says what
	// was sent, never "not converged".
	if strings.Contains(stdout, "not converged") || !strings.Contains(stdout, "fixed load (no convergence asked): sent 100 requests (5 windows of 20 per target)") {
		t.Errorf("a fixed load's summary:\n%s", stdout)
	}
}

// A fixed count below the converging minimums (minRequests 300, window ×
// stableWindows) is a valid warm-up: the field reports' habit.
func TestWarmupCommandFixedSmallCount(t *testing.T) {
	srv := warmupServer(t)
	stdout, _, err := runWarmupCmd("--url", srv.URL, "--health-path", "/healthz", "--until-converged=false", "--max-requests", "20", "--qps", "500")
	if err != nil {
		t.Fatalf("--until-converged=false --max-requests 20: %v\n%s", err, stdout)
	}
	// The cap stops new requests; up to connections−1 (3) in flight finish.
	if n := srv.Load(); n < 20 || n > 23 {
		t.Errorf("sent %d requests, want 20 (up to 23 with the 4 connections' requests in flight)", n)
	}
	if !strings.Contains(stdout, "partial (") {
		t.Errorf("want the 20 requests as one partial window of 100:\n%s", stdout)
	}
}

func TestWarmupCommandFailsWithoutConvergence(t *testing.T) {
	srv := warmupServer(t)
	stdout, stderr, err := runWarmupCmd("--url", srv.URL, "--health-path", "/healthz", "--qps", "500", "-c", "1", "--window", "20", "--min-requests", "1000", "--max-requests", "1000", "--deadline", "700ms")
	if err == nil || !strings.Contains(err.Error(), "deadline 700ms") || !strings.Contains(err.Error(), "p99 of windows") {
		t.Fatalf("err = %v, want a deadline failure with the trend", err)
	}
	if !strings.Contains(stdout, "not converged") {
		t.Errorf("table should still be printed:\n%s", stdout)
	}
	// Not warm is a verdict (exit code 1, the reason on stderr), not an
	// error (3, "Error: …").
	if code := exitCode(err); code != exitVerdict || strings.Contains(stderr, "Error:") || !strings.Contains(stderr, "latency did not converge: deadline 700ms") {
		t.Errorf("exit code %d, stderr:\n%s\nwant %d and the reason without \"Error:\"", code, stderr, exitVerdict)
	}
}

// The warm-up's side-effect refusals name the flag that allows the request:
// the package's message names the config field, as the step's YAML has it,
// and stays as written; a legend after the list names its flag.
func TestWarmupSideEffectsNameTheFlags(t *testing.T) {
	const legend = "\nflags: allowSideEffects is --allow-side-effects"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--method", "POST"}, "requests[0].method: POST may change data on the canary; warm-up only sends GET, HEAD and OPTIONS unless allowSideEffects is true"},
		{[]string{"--path", "/x?_method=DELETE"}, "requests[0].path: "},
		{[]string{"--header", "X-HTTP-Method-Override: DELETE"}, "requests[0].headers: "},
	} {
		_, stderr, err := runWarmupCmd(append([]string{"--url", "http://127.0.0.1:1"}, tc.args...)...)
		if err == nil || exitCode(err) != exitError || !strings.Contains(stderr, "Error: ") {
			t.Fatalf("danki warmup %v: err %v (exit code %d), want an error", tc.args, err, exitCode(err))
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "invalid warm-up settings (fields as in the step plugin config, see docs/warmup.md): ") ||
			!strings.Contains(msg, tc.want) || !strings.HasSuffix(msg, legend) || strings.Count(msg, "--allow-side-effects") != 1 {
			t.Errorf("danki warmup %v: %q\nwant %q in it, the prose as written, and the legend %q once at the end", tc.args, msg, tc.want, legend)
		}
	}
	help, _, _ := runWarmupCmd("--help")
	for _, w := range []string{"Exit status:", "0  warm", "1  not warm", "3  error"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help lacks %q", w)
		}
	}
}

func TestWarmupCommandRequestFileAndErrors(t *testing.T) {
	srv := warmupServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "requests.yaml")
	if err := os.WriteFile(file, []byte("- path: /\n  headers: {X-Id: \"{{uuid}}\"}\n  weight: 2\n- method: HEAD\n  path: /\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runWarmupCmd("--url", srv.URL, "--health-path", "/healthz", "--request-file", file, "--until-converged=false", "--max-requests", "60", "--window", "20", "--qps", "500"); err != nil {
		t.Errorf("request file: %v", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- pth: /\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"requests[0].method":             {"--url", srv.URL, "--method", "POST", "--path", "/orders"},
		"requests[0].pth: unknown field": {"--url", srv.URL, "--request-file", bad},
		"--url[0]":                       {"--url", srv.URL + "/api"},
		"nothing to warm":                {},
		"either --url or pods":           {"--url", srv.URL, "--service", "cart"},
		"--compare-to-stable":            {"--url", srv.URL, "--compare-to-stable"},
		`--header "oops"`:                {"--url", srv.URL, "--header", "oops"},
		"maxRequests":                    {"--url", srv.URL, "--max-requests", "10"},
		"--request-file and --path":      {"--url", srv.URL, "--path", "/", "--request-file", file},
		"--start-qps (startQPS): must be > 0 and at most qps 10": {"--url", srv.URL, "--qps", "10", "--start-qps", "20"},
		"--jit-metrics-port (jitMetrics.port): must be a port":   {"--url", srv.URL, "--jit-metrics-port", "70000"},
		"--grpc-safe-method (grpcSafeMethods[0]): ":              {"--url", srv.URL, "--grpc-safe-method", "nope"},
		"neighbourRatio": {"--url", srv.URL, "--neighbour-ratio", "0.5"},
		"--cpu-budget (cpuBudget): must not be negative":          {"--url", srv.URL, "--cpu-budget", "-1"},
		`invalid argument "lots" for "--cpu-budget"`:              {"--url", srv.URL, "--cpu-budget", "lots"},
		"--cpu-budget 50%: a share of the CPU request needs pods": {"--url", srv.URL, "--cpu-budget", "50%"},
	}
	for want, args := range cases {
		if _, _, err := runWarmupCmd(args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("danki warmup %v: err = %v, want it to mention %s", args, err, want)
		}
	}
}

// Given stable pods, the command rejects a target whose latency settles far
// above theirs, by default; --reject-slower-version=false lets it converge.
func TestWarmupCommandRejectsSlowerVersion(t *testing.T) {
	slow := func(n int64, _ bool) time.Duration {
		if n%20 == 0 {
			return 100 * time.Millisecond
		}
		return time.Millisecond
	}
	canary, stable := testutil.NewColdServer(t, slow), testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	canary.HealthPath, stable.HealthPath = "/healthz", "/healthz"
	args := append([]string{"--url", canary.URL, "--stable-url", stable.URL, "--stable-qps", "500", "--max-requests", "3000"}, quickWarmup...)
	stdout, _, err := runWarmupCmd(args...)
	if err == nil || !strings.Contains(err.Error(), "slower than stable") || !strings.Contains(err.Error(), "× stable's") {
		t.Fatalf("err = %v, want the slower version rejected naming both p99s\n%s", err, stdout)
	}
	canary2, stable2 := testutil.NewColdServer(t, slow), testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	canary2.HealthPath, stable2.HealthPath = "/healthz", "/healthz"
	args = append([]string{"--url", canary2.URL, "--stable-url", stable2.URL, "--stable-qps", "500", "--max-requests", "3000", "--reject-slower-version=false"}, quickWarmup...)
	if stdout, _, err := runWarmupCmd(args...); err != nil {
		t.Fatalf("--reject-slower-version=false: %v\n%s", err, stdout)
	}
}

// The pace ramps up from --start-qps (shown in the progress), and with
// stable pods whose latency rises, the neighbour guard's back-off gets a
// line of its own on stderr.
func TestWarmupCommandPaceAndNeighbourGuard(t *testing.T) {
	canary := warmupServer(t)
	// Stable answers in 1 ms for its first 60 requests (its baseline),
	// then in 30 ms for 60 requests: the users' latency rose.
	stable := testutil.NewColdServer(t, func(n int64, _ bool) time.Duration {
		if n > 60 && n <= 120 {
			return 30 * time.Millisecond
		}
		return time.Millisecond
	})
	stable.HealthPath = "/healthz"
	args := append([]string{"--url", canary.URL, "--stable-url", stable.URL, "--stable-qps", "200", "--start-qps", "50",
		"--until-converged=false", "--max-requests", "1000"}, quickWarmup...)
	stdout, stderr, err := runWarmupCmd(args...)
	if err != nil {
		t.Fatalf("danki warmup: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !regexp.MustCompile(`window [0-9]+: .*  pace [0-9.]+ qps`).MatchString(stderr) {
		t.Errorf("progress should show the pace:\n%s", stderr)
	}
	if !regexp.MustCompile(`(?m)^ *[0-9.]+s  neighbour guard: stable p90 [0-9.]+ms above .*: warm-up pace halved to [0-9.]+ qps per pod \(back-off 1\)$`).MatchString(stderr) {
		t.Errorf("stderr lacks the neighbour guard's back-off line:\n%s", stderr)
	}
	if !strings.Contains(stdout, "neighbour guard backed off") {
		t.Errorf("the summary should count the back-offs:\n%s", stdout)
	}
}
