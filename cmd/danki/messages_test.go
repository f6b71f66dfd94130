package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/danki-dev/danki/pkg/policy"
)

// A cap error names a flag the command has: the command line's caps are
// its own (--cap-*), never the plugins' --max-qps, which `danki warmup`
// rejects, or --max-requests, which is its budget.
func TestCapErrorsNameTheCommandsOwnFlag(t *testing.T) {
	for _, c := range []struct {
		args     []string
		wantFlag string
	}{
		{[]string{"warmup", "--url", "http://127.0.0.1:1", "--qps", "600"}, "--cap-qps"},
		{[]string{"warmup", "--url", "http://127.0.0.1:1", "--connections", "5000"}, "--cap-connections"},
		{[]string{"warmup", "--url", "http://127.0.0.1:1", "--max-requests", "300000"}, "--cap-requests"},
		{[]string{"warmup", "--url", "http://127.0.0.1:1", "--deadline", "2h"}, "--cap-deadline"},
		{[]string{"capacity", "--url", "http://127.0.0.1:1", "--max-qps", "9000"}, "--cap-qps"},
	} {
		_, _, err := runDanki(c.args...)
		if err == nil || !strings.Contains(err.Error(), "raise the cap with "+c.wantFlag) || strings.Contains(err.Error(), "operator") {
			t.Errorf("danki %v: %v\nwant the command line's cap, raised with %s", c.args, err, c.wantFlag)
			continue
		}
		name := strings.TrimPrefix(c.wantFlag, "--")
		cmd, _, ferr := newRootCmd().Find(c.args[:1])
		if ferr != nil || cmd.Flags().Lookup(name) == nil {
			t.Errorf("danki %s has no %s, which its error names", c.args[0], c.wantFlag)
		}
	}
	// Raised, the cap lets the value through.
	cmd, f := warmupCmd()
	if err := cmd.ParseFlags([]string{"--url", "http://127.0.0.1:1", "--qps", "600", "--cap-qps", "600"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.config(); err != nil {
		t.Errorf("--qps 600 --cap-qps 600: %v", err)
	}
	// analyze's load too (its config is held to the caps it runs under).
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	if out, _, err := runDanki("analyze", "--source", "load", "--url", srv.URL, "--stable-url", srv.URL, "--count", "20", "--qps", "600", "--cap-qps", "600",
		"--warm-up=false", "--p99", "1s"); exitCode(err) == exitError {
		t.Errorf("danki analyze --qps 600 --cap-qps 600: %v, want a measurement (20 requests: inconclusive)\n%s", err, out)
	}
	if _, _, err := runDanki("analyze", "--source", "load", "--url", srv.URL, "--count", "20", "--qps", "600", "--warm-up=false", "--p99", "1s"); err == nil || !strings.Contains(err.Error(), "raise the cap with --cap-qps") {
		t.Errorf("danki analyze --qps 600: %v, want the cap named with --cap-qps", err)
	}
	// Every command that sends load or checks a load config has the caps.
	for _, path := range [][]string{{"warmup"}, {"warmup", "mirror"}, {"capacity"}, {"analyze"}, {"shift", "ramp"}} {
		cmd, _, err := newRootCmd().Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range capFlagNames {
			if cmd.Flags().Lookup(name[2:]) == nil {
				t.Errorf("danki %s has no %s", strings.Join(path, " "), name)
			}
		}
	}
	// The rewrite follows pkg/policy's wording; a command without the
	// flag gets no flag named.
	over := errors.New("qps: " + policy.Over(600.0, 500.0, "--max-qps"))
	if got := explainCaps(&cobra.Command{}, over).Error(); got != "qps: 600 is above the command line's cap of 500; lower it (docs/security.md)" {
		t.Errorf("explainCaps without --cap-qps: %q (did policy.Over's wording change?)", got)
	}
}

// --max-requests below what the stopping rule needs to call a pod warm
// (two blocks of windows, the smallest 300 requests each: 600 at the
// defaults) could only end "not warm": refused, naming the flag and the
// minimum.
func TestWarmupMaxRequestsBelowTheRulesMinimum(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-requests", "300"}, "at least 600"},
		{[]string{"--max-requests", "599", "--stable-url", "http://127.0.0.1:2"}, "at least 600"},
		{[]string{"--max-requests", "1000", "--window", "100", "--stable-windows", "6"}, "at least 1200"},
		{[]string{"--max-requests", "2500", "--min-requests", "2500", "--window", "500"}, "at least 3000"},
	} {
		_, _, err := runWarmupCmd(append([]string{"--url", "http://127.0.0.1:1"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), "--max-requests ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("danki warmup %v: %v\nwant --max-requests refused, %s", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{
		{"--max-requests", "600"},
		{"--max-requests", "300", "--until-converged=false"},
		{"--max-requests", "50", "--until-converged=false"},
	} {
		cmd, f := warmupCmd()
		if err := cmd.ParseFlags(append([]string{"--url", "http://127.0.0.1:1"}, args...)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.config(); err != nil {
			t.Errorf("danki warmup %v: %v", args, err)
		}
	}
}

// A URL without its scheme is refused with the URL to write instead.
func TestURLFlagsWithoutScheme(t *testing.T) {
	for _, args := range [][]string{
		{"warmup", "--url", "127.0.0.1:8080"},
		{"warmup", "--url", "localhost:8080"},
		{"warmup", "--url", "http://127.0.0.1:1", "--stable-url", "127.0.0.1:8080", "--compare-to-stable"},
		{"capacity", "--url", "127.0.0.1:8080"},
		{"analyze", "--source", "load", "--url", "127.0.0.1:8080", "--stable-url", "http://127.0.0.1:1", "--p99", "1s"},
	} {
		_, _, err := runDanki(args...)
		u := args[len(args)-1]
		for i, a := range args {
			if strings.HasSuffix(a, "url") && !strings.Contains(args[i+1], "://") {
				u = args[i+1]
			}
		}
		if err == nil || !strings.Contains(err.Error(), "add the scheme") || !strings.Contains(err.Error(), "http://"+u) {
			t.Errorf("danki %v: %v\nwant: add the scheme, http://%s", args, err, u)
		}
	}
}

// --json names a file that cannot be written: refused before any target is
// looked up or loaded.
func TestWarmupJSONPathCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "missing", "warmup.json"), dir} {
		_, stderr, err := runWarmupCmd("--url", "http://127.0.0.1:1", "--json", path)
		if err == nil || !strings.Contains(err.Error(), "--json "+path) {
			t.Errorf("--json %s: %v, want it refused naming --json", path, err)
		}
		if strings.Contains(stderr, "waiting for") {
			t.Errorf("--json %s: the run started before the path was checked:\n%s", path, stderr)
		}
	}
	// A writable new path passes and is not left behind by the check.
	ok := filepath.Join(dir, "new.json")
	if err := checkOutputFile("json", ok); err != nil {
		t.Errorf("checkOutputFile(%s): %v", ok, err)
	}
	if _, err := os.Stat(ok); !os.IsNotExist(err) {
		t.Errorf("the check left %s behind (%v)", ok, err)
	}
}

// A kubeconfig that cannot be loaded is named, with where it came from
// (--kubeconfig, $KUBECONFIG, the default file) and what to do.
func TestKubeconfigErrorsReadable(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	missing := filepath.Join(dir, "nope")
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, []byte("apiVersion: v1\nkind: Config\nclusters: {not a list}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(name string, args []string, want ...string) {
		t.Helper()
		_, _, err := runWarmupCmd(append([]string{"--service", "cart"}, args...)...)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", name, err, w)
			}
		}
	}
	check("missing --kubeconfig", []string{"--kubeconfig", missing}, "kubeconfig "+missing+" (--kubeconfig): no such file", "--url")
	check("broken --kubeconfig", []string{"--kubeconfig", broken}, "kubeconfig "+broken+" (--kubeconfig):")
	if _, err := os.Stat(clientcmd.RecommendedHomeFile); os.IsNotExist(err) {
		check("default file missing", nil, "kubeconfig "+clientcmd.RecommendedHomeFile+" (the default", "no such file", "not running in a pod", "--kubeconfig FILE or set $KUBECONFIG")
	}
	t.Setenv("KUBECONFIG", missing)
	check("missing $KUBECONFIG", nil, "kubeconfig "+missing+" ($KUBECONFIG): no such file")
	t.Setenv("KUBECONFIG", "")
	check("unknown --context", []string{"--kubeconfig", writeKubeconfig(t, dir), "--context", "elsewhere"}, `context "elsewhere"`, "give --context one of its contexts")
}

func writeKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// danki --version prints what danki version prints.
func TestRootVersionFlag(t *testing.T) {
	out, _, err := runDanki("--version")
	info, ok := debug.ReadBuildInfo()
	if want := versionLine(buildVersion(info, ok)); err != nil || out != want {
		t.Errorf("danki --version: %q, %v; want %q", out, err, want)
	}
}
