package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

// analyzeBounds are Istio/Envoy's default bucket bounds (ms), and the counts
// per bucket (last: +Inf) of a stable version, a healthy canary with the
// same shape and a slow canary.
var (
	analyzeBounds  = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000}
	analyzeStable  = []float64{0, 0, 100, 2000, 4000, 2500, 1350, 45, 5, 0, 0}
	analyzeHealthy = []float64{0, 0, 10, 200, 400, 250, 135, 4, 1, 0, 0}
	analyzeSlow    = []float64{0, 0, 0, 50, 200, 300, 300, 120, 30, 0, 0}
)

// analyzeFakeProm serves, for app-canary (healthy), app-slow and
// app-stable, Envoy's cluster metrics (with Istio's stats tags: every
// request under response_code and again under response_code_class) and the
// gateway's Istio standard metrics; 0.5 % of requests failed.
func analyzeFakeProm(t *testing.T) *testutil.Prometheus {
	t.Helper()
	p := testutil.NewPrometheus(t)
	les := append(append([]float64(nil), analyzeBounds...), math.Inf(+1))
	for name, counts := range map[string][]float64{"app-canary": analyzeHealthy, "app-slow": analyzeSlow, "app-stable": analyzeStable} {
		cum, total := make([]float64, len(counts)), 0.0
		for i, c := range counts {
			total += c
			cum[i] = total
		}
		errors := total / 200
		service := name + ".default.svc.cluster.local"
		cluster := map[string]string{"cluster_name": "outbound|8080||" + service}
		p.AddHistogram("envoy_cluster_upstream_rq_time", cluster, les, cum)
		istio := map[string]string{"reporter": "source", "destination_service": service}
		p.AddHistogram("istio_request_duration_milliseconds", istio, les, cum)
		for _, code := range []struct {
			label, ok, failed string
		}{{"response_code", "200", "503"}, {"response_code_class", "2xx", "5xx"}} {
			p.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cluster["cluster_name"], code.label: code.ok}, total-errors)
			p.Add("envoy_cluster_upstream_rq", map[string]string{"cluster_name": cluster["cluster_name"], code.label: code.failed}, errors)
		}
		p.Add("istio_requests_total", map[string]string{"reporter": "source", "destination_service": service, "response_code": "200"}, total-errors)
		p.Add("istio_requests_total", map[string]string{"reporter": "source", "destination_service": service, "response_code": "503"}, errors)
	}
	return p
}

func runDanki(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestAnalyzeEnvoyPass(t *testing.T) {
	srv := analyzeFakeProm(t)
	out, _, err := runDanki("analyze", "--prometheus", srv.URL, "--source", "envoy",
		"--canary", "outbound|8080||app-canary.default.svc.cluster.local",
		"--stable", "outbound|8080||app-stable.default.svc.cluster.local",
		"--window", "10m", "--p99", "250ms", "--p99-ratio", "1.5", "--max-error-rate", "1%", "--tail-test")
	if err != nil {
		t.Fatalf("danki analyze failed on a healthy canary: %v\n%s", err, out)
	}
	for _, w := range []string{
		"danki analyze: source envoy, window 10m",
		"requests", "1000", "10000",
		"error rate", "0.50%", "≤ 1.00%",
		"p99 ", "≤ 250ms, ≤ 1.5× stable", "pass",
		"p99.9",
		"> 100ms (stable p99 bound)",
		"PASS         p99",
		"Pass: all SLOs hold",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// A Fail is a verdict, not an error: printed on stdout, exit code 1, no
// "Error:" line and no usage on stderr.
func TestAnalyzeSlowCanaryExitsNonZero(t *testing.T) {
	srv := analyzeFakeProm(t)
	out, stderr, err := runDanki("analyze", "--prometheus", srv.URL, "--source", "envoy",
		"--canary", "outbound|8080||app-slow.default.svc.cluster.local",
		"--stable", "outbound|8080||app-stable.default.svc.cluster.local",
		"--p99", "250ms", "--tail-test")
	if code := exitCode(err); code != exitVerdict {
		t.Fatalf("exit code %d (err %v), want %d for Fail\n%s", code, err, exitVerdict, out)
	}
	if !strings.Contains(out, "FAIL         p99") || !strings.Contains(out, "Fail: p99") {
		t.Errorf("output does not show the breach:\n%s", out)
	}
	if strings.Contains(stderr, "Error:") || strings.Contains(stderr, "Usage:") {
		t.Errorf("a Fail printed as an error:\n%s", stderr)
	}
}

// The exit codes tell Pass (0), Fail (1), Inconclusive (2) and an error (3)
// apart, as --help says; only the error prints "Error: …".
func TestAnalyzeExitCodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, count int, maxSeconds float64) string {
		p := filepath.Join(dir, name)
		data := fmt.Sprintf(`{"RunType":"HTTP","RetCodes":{"200":%d},"DurationHistogram":{"Count":%d,"Min":0.001,"Max":%g,
		  "Data":[{"Start":0.001,"End":%g,"Percent":100,"Count":%d}]}}`, count, count, maxSeconds, maxSeconds, count)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fast, slow, few := write("fast.json", 1000, 0.002), write("slow.json", 1000, 0.9), write("few.json", 20, 0.002)
	for _, tc := range []struct {
		name, canary string
		extra        []string
		code         int
		stdout       string
	}{
		{"pass", fast, nil, exitOK, "Pass: all SLOs hold"},
		{"fail", slow, nil, exitVerdict, "Fail: "},
		{"inconclusive", few, nil, exitInconclusive, "Inconclusive: "},
		{"error", fast, []string{"--max-error-rate", "lots"}, exitError, ""},
	} {
		args := append([]string{"analyze", "--source", "fortio", "--canary", tc.canary, "--stable", fast, "--max", "500ms"}, tc.extra...)
		out, stderr, err := runDanki(args...)
		if code := exitCode(err); code != tc.code || !strings.Contains(out, tc.stdout) {
			t.Errorf("%s: exit code %d (err %v), want %d with %q on stdout:\n%s", tc.name, code, err, tc.code, tc.stdout, out)
		}
		if wantErr := tc.code == exitError; strings.Contains(stderr, "Error:") != wantErr {
			t.Errorf("%s: stderr %q; want an \"Error:\" line only for an error", tc.name, stderr)
		}
	}
	help, _, _ := runDanki("analyze", "--help")
	for _, w := range []string{"0  Pass", "1  Fail", "2  Inconclusive", "3  error"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help does not document exit code %q", w)
		}
	}
}

func TestAnalyzeJSONOutput(t *testing.T) {
	srv := analyzeFakeProm(t)
	out, _, err := runDanki("analyze", "-o", "json", "--prometheus", srv.URL, "--source", "istio",
		"--canary", "app-canary.default.svc.cluster.local", "--stable", "app-stable.default.svc.cluster.local", "--p99-ratio", "1.2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var v struct {
		Phase   string   `json:"phase"`
		Queries []string `json:"queries"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if v.Phase != "Pass" || len(v.Queries) != 6 || !strings.Contains(v.Queries[0], `istio_request_duration_milliseconds_bucket{destination_service="app-canary.default.svc.cluster.local",reporter="source"}[5m]`) {
		t.Errorf("phase %s queries %q", v.Phase, v.Queries)
	}
}

func TestAnalyzeFortioFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, maxSeconds float64) string {
		p := filepath.Join(dir, name)
		data := fmt.Sprintf(`{"RunType":"HTTP","RetCodes":{"200":1000},"DurationHistogram":{"Count":1000,"Min":0.001,"Max":%g,
		  "Data":[{"Start":0.001,"End":0.002,"Percent":50,"Count":500},{"Start":0.002,"End":%g,"Percent":100,"Count":500}]}}`, maxSeconds, maxSeconds)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	canary, stable := write("canary.json", 0.9), write("stable.json", 0.05)
	out, _, err := runDanki("analyze", "--source", "fortio", "--canary", canary, "--stable", stable, "--max", "500ms", "--p50", "10ms")
	if err == nil || !strings.Contains(out, "max 900ms > 500ms SLO") || !strings.Contains(out, "max  ") {
		t.Fatalf("err %v, want a max breach:\n%s", err, out)
	}
}

func TestAnalyzeFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"analyze", "--canary", "c", "--p99", "250"}, `invalid argument "250" for "--p99" flag`},
		{[]string{"analyze", "--canary", "c", "--p99", "250ms"}, "--prometheus (prometheus.address): missing"},
		{[]string{"analyze", "--prometheus", "http://127.0.0.1:9", "--p99", "250ms"}, "--canary (istio.canary): selects nothing"},
		{[]string{"analyze", "--prometheus", "http://127.0.0.1:9", "--canary", "c", "--p99-ratio", "1.2"}, "set --stable (istio.stable)"},
		{[]string{"analyze", "--prometheus", "http://127.0.0.1:9", "--canary", "c", "--p99", "1s", "--window", "cumulative"}, "--window cumulative needs an analysis start"},
		{[]string{"analyze", "--source", "datadog", "--p99", "1s"}, `--source: "datadog" is not a source`},
		{[]string{"analyze", "--source", "fortio", "--canary", "c.json", "--max-error-rate", "lots"}, `--max-error-rate (slo.maxErrorRate): "lots" is not a number`},
		{[]string{"analyze", "-o", "yaml"}, `--output "yaml"`},
	} {
		_, _, err := runDanki(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("danki %s: err %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

func TestAnalyzeConfigFileWithOverrides(t *testing.T) {
	srv := analyzeFakeProm(t)
	cfg := filepath.Join(t.TempDir(), "latency.json")
	data := `{"source":"envoy","prometheus":{"address":"` + srv.URL + `"},
	  "envoy":{"canaryCluster":"outbound|8080||app-slow.default.svc.cluster.local","stableCluster":"outbound|8080||app-stable.default.svc.cluster.local"},
	  "window":"cumulative","slo":{"p99":"250ms"}}`
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runDanki("analyze", "--config", cfg); exitCode(err) != exitVerdict || !strings.Contains(out, "Fail: p99") {
		t.Fatalf("slow canary from the config file: err %v, want Fail\n%s", err, out)
	}
	out, _, err := runDanki("analyze", "--config", cfg, "--canary", "outbound|8080||app-canary.default.svc.cluster.local")
	if err != nil {
		t.Fatalf("--canary overriding the file's canary: %v\n%s", err, out)
	}
}

// TestAnalyzeConfigFileYAML: --config accepts YAML as well as JSON, with
// the plugin's strict decoding (a misspelt field names its path).
func TestAnalyzeConfigFileYAML(t *testing.T) {
	srv := analyzeFakeProm(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "latency.yaml")
	data := `source: envoy
prometheus: {address: "` + srv.URL + `"}
envoy:
  canaryCluster: "outbound|8080||app-slow.default.svc.cluster.local"
  stableCluster: "outbound|8080||app-stable.default.svc.cluster.local"
window: 10m
slo: {p99: 250ms}
`
	if err := os.WriteFile(good, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runDanki("analyze", "--config", good)
	if exitCode(err) != exitVerdict || !strings.Contains(out, "Fail: p99") || !strings.Contains(out, "window 10m") {
		t.Fatalf("slow canary from a YAML config: err %v, want Fail over the file's 10m window\n%s", err, out)
	}
	bad := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(data, "p99:", "p99x:", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runDanki("analyze", "--config", bad); err == nil || !strings.Contains(err.Error(), "slo.p99x: unknown field") {
		t.Fatalf("misspelt field: err %v, want one naming slo.p99x", err)
	}
}

// TestAnalyzeWorkloadNamespace: --workload-namespace selects Istio's
// destination_workload_namespace (--namespace is left to the kubectl-style
// flag all commands will share).
func TestAnalyzeWorkloadNamespace(t *testing.T) {
	srv := analyzeFakeProm(t)
	out, _, _ := runDanki("analyze", "-o", "json", "--prometheus", srv.URL, "--source", "istio",
		"--canary", "app-canary.default.svc.cluster.local", "--workload-namespace", "shop", "--p99", "250ms")
	if !strings.Contains(out, `destination_workload_namespace=\"shop\"`) {
		t.Fatalf("queries do not select destination_workload_namespace=\"shop\":\n%s", out)
	}
}

// danki analyze --source load sends the load itself: a good server passes,
// a server with a slow 5 % fails (exit non-zero), every request marked.
func TestAnalyzeLoadSource(t *testing.T) {
	good := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	slow := testutil.NewColdServer(t, func(n int64, _ bool) time.Duration {
		if n%20 == 0 {
			return 50 * time.Millisecond
		}
		return time.Millisecond
	})
	for _, s := range []*testutil.ColdServer{good, slow} {
		s.HealthPath, s.Record = "/healthz", true
	}
	args := func(url string) []string {
		return []string{"analyze", "--source", "load", "--url", url, "--health-path", "/healthz", "--path", "/items/<<randInt 1 9>>",
			"--count", "600", "--qps", "400", "--connections", "8", "--warm-up=false", "--p99", "30ms"}
	}
	out, stderr, err := runDanki(args(good.URL)...)
	if err != nil || !strings.Contains(out, "source load") || !strings.Contains(out, "Pass: all SLOs hold") || !strings.Contains(stderr, "measuring: ") {
		t.Fatalf("good server: err %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	out, _, err = runDanki(args(slow.URL)...)
	if exitCode(err) != exitVerdict || !strings.Contains(out, "Fail: p99") {
		t.Fatalf("slow server: err %v; want a Fail on p99\n%s", err, out)
	}
	for _, s := range []*testutil.ColdServer{good, slow} {
		if s.Unmarked() != 0 || !strings.HasPrefix(s.Last().URI, "/items/") || strings.Contains(s.Last().URI, "<") {
			t.Fatalf("server saw %d unmarked requests, last %s; want all marked, templates rendered", s.Unmarked(), s.Last().URI)
		}
	}
	_, _, err = runDanki("analyze", "--source", "load", "--url", good.URL, "--path", "/x", "--qps", "0", "--p99", "1s")
	if err == nil || !strings.Contains(err.Error(), "load.qps") || exitCode(err) != exitError {
		t.Fatalf("--qps 0: %v; want an error naming load.qps", err)
	}
}

// A POST in --config's load.requests is refused with the flag that allows
// it, --allow-side-effects, named; with the flag it is sent.
func TestAnalyzeLoadSideEffectsNameTheFlag(t *testing.T) {
	srv := testutil.NewColdServer(t, testutil.Flat(time.Millisecond))
	srv.HealthPath = "/healthz"
	cfg := filepath.Join(t.TempDir(), "load.yaml")
	data := "source: load\nload:\n  urls: [" + srv.URL + "]\n  healthPath: /healthz\n  requests: [{method: POST, path: /orders}]\n  count: 50\n  qps: 200\n  warmUp: false\nslo: {p50: 1s}\n"
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := runDanki("analyze", "--config", cfg)
	if err == nil || !strings.Contains(err.Error(), "unless --allow-side-effects is given (load.allowSideEffects: true)") {
		t.Fatalf("POST without --allow-side-effects: %v; want the flag named", err)
	}
	out, _, err := runDanki("analyze", "--config", cfg, "--allow-side-effects", "--min-samples", "50")
	if err != nil || srv.Load() == 0 || srv.Last().Method != "POST" {
		t.Fatalf("with --allow-side-effects: %v, %d requests (last %+v)\n%s", err, srv.Load(), srv.Last(), out)
	}
}

// Every flag of the per-source tables is one of danki analyze's flags
// (apply looks string flags up by name), and a string field's flag is a
// string flag.
func TestAnalyzeFieldTablesNameItsFlags(t *testing.T) {
	fl := newAnalyzeCmd().Flags()
	tables := map[string][]analyzeField{"prometheus": analyzePrometheusFlags, "istio.stable": analyzeIstioStableFlags}
	for name, src := range analyzeSources {
		tables[name] = src.fields
	}
	for name, fields := range tables {
		for _, fd := range fields {
			flag := fl.Lookup(fd.flag)
			switch {
			case flag == nil:
				t.Errorf("%s: --%s is no flag of danki analyze", name, fd.flag)
			case (fd.str == nil) == (fd.set == nil):
				t.Errorf("%s: --%s sets neither or both a string field and another", name, fd.flag)
			case fd.str != nil && flag.Value.Type() != "string":
				t.Errorf("%s: --%s is a %s flag, set as a string field", name, fd.flag, flag.Value.Type())
			}
		}
	}
}
