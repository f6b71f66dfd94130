package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

func TestWarmupCommandGRPC(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Decaying(time.Millisecond, 20*time.Millisecond, 40), true)
	srv.Serve(300 * time.Millisecond)
	args := append([]string{"--url", srv.URL, "--max-requests", "3000",
		"--grpc-method", "danki.test.Catalog/Get", "--grpc-message", `{"id": "{{randInt 1 3}}"}`, "--grpc-metadata", `x-tenant: {{pick "a"}}`},
		quickWarmup[2:]...) // no --health-path: gRPC requests check gRPC health
	stdout, stderr, err := runWarmupCmd(args...)
	if err != nil {
		t.Fatalf("danki warmup --grpc-method: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "converged: 1/1 targets warm") || srv.HealthChecks.Load() < 2 {
		t.Errorf("not converged after a health wait (%d checks):\n%s", srv.HealthChecks.Load(), stdout)
	}
	calls := srv.Seen()
	if len(calls) == 0 {
		t.Fatal("no gRPC calls")
	}
	for _, c := range calls {
		if c.Method != "Get" || !c.Marked || c.Tenant != "a" || (c.ID != "1" && c.ID != "2" && c.ID != "3") {
			t.Fatalf("call %+v: want Get with id 1-3, tenant a and the marker", c)
		}
	}
}

func TestWarmupCommandGRPCRequestFile(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true)
	srv.Serve(0)
	file := filepath.Join(t.TempDir(), "requests.yaml")
	if err := os.WriteFile(file, []byte(`
- grpc: {method: danki.test.Catalog/Get, message: '{"id": "g"}'}
  weight: 3
- grpc: {method: danki.test.Catalog/Put, message: '{"id": "p"}'}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--url", srv.URL, "--request-file", file, "--until-converged=false", "--max-requests", "200", "-c", "1", "--qps", "500", "--window", "20"}
	_, _, err := runWarmupCmd(base...)
	if err == nil || !strings.Contains(err.Error(), "requests[1].grpc.method") || srv.Calls.Load() != 0 {
		t.Fatalf("Put (not marked read-only) was not refused before any call: %v (%d calls)", err, srv.Calls.Load())
	}
	// The refusal happens at run time (after reflection), not in config():
	// warmupOutcome names the flags too, in the legend.
	for _, want := range []string{"list it in grpcSafeMethods", "or set allowSideEffects", "\nflags: grpcSafeMethods is --grpc-safe-method, allowSideEffects is --allow-side-effects"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name the flags: want %q in %v", want, err)
		}
	}
	stdout, stderr, err := runWarmupCmd(append(base, "--grpc-safe-method", "danki.test.Catalog/Put")...)
	if err != nil {
		t.Fatalf("with --grpc-safe-method: %v\n%s\n%s", err, stdout, stderr)
	}
	gets, puts := 0, 0
	for _, c := range srv.Seen() {
		switch {
		case c.Method == "Get" && c.ID == "g":
			gets++
		case c.Method == "Put" && c.ID == "p":
			puts++
		default:
			t.Fatalf("unexpected call %+v", c)
		}
	}
	if gets+puts != 200 || gets < 2*puts {
		t.Errorf("%d Get and %d Put calls; want 200 weighted 3:1", gets, puts)
	}
}

func TestWarmupCommandGRPCFlagErrors(t *testing.T) {
	for _, tc := range [][]string{
		{"--grpc-method", "a.B/C", "--path", "/x"},
		{"--grpc-message", "{}"},
		{"--grpc-method", "a.B/C", "--grpc-metadata", "novalue"},
		{"--grpc-method", "nope"},
		{"--grpc-method", "a.B/C", "--health-protocol", "tcp"},
	} {
		if _, _, err := runWarmupCmd(append([]string{"--url", "http://127.0.0.1:1"}, tc...)...); err == nil {
			t.Errorf("%v accepted", tc)
		}
	}
	stdout, _, err := runWarmupCmd("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--grpc-method", "--grpc-message", "--grpc-metadata", "--grpc-descriptor-set", "--grpc-safe-method", "--health-protocol", "--health-service", "NO_SIDE_EFFECTS"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("--help lacks %s", flag)
		}
	}
}
