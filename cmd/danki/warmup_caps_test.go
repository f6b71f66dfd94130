package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

// A numeric flag set to 0 used to mean its default silently
// (--connections 0 was 4 connections): it is an error naming the flag.
func TestWarmupZeroFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--connections", "0"}, {"-c", "-3"}, {"--qps", "0"}, {"--max-requests", "0"}, {"--timeout", "0s"},
		{"--deadline", "0s"}, {"--window", "0"}, {"--min-pods", "0"}, {"--reject-floor", "0s"},
	} {
		_, _, err := runWarmupCmd(append([]string{"--url", "http://127.0.0.1:1"}, args...)...)
		name := strings.TrimLeft(args[0], "-")
		if name == "c" {
			name = "connections"
		}
		if err == nil || !strings.Contains(err.Error(), "--"+name+" ") || !strings.Contains(err.Error(), "must be > 0") {
			t.Errorf("danki warmup %v: %v, want an error naming --%s", args, err, name)
		}
	}
	if _, _, err := runDanki("capacity", "--url", "http://127.0.0.1:1", "--connections", "0"); err == nil || !strings.Contains(err.Error(), "--connections 0") {
		t.Errorf("danki capacity --connections 0: %v", err)
	}
}

// The caps hold on the command line too (they catch typos; --cap-* raises
// them), and --max-requests is a budget: with far more connections than
// requests, exactly that many are sent.
func TestWarmupCapsAndMaxRequestsBudget(t *testing.T) {
	if _, _, err := runWarmupCmd("--url", "http://127.0.0.1:1", "--connections", "5000"); err == nil || !strings.Contains(err.Error(), "--connections (connections): 5000 is above the command line's cap of 64 (a guard against typos); lower it, or raise the cap with --cap-connections") {
		t.Errorf("--connections 5000: %v", err)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Neither the health probe nor the JIT signal's read of the
		// metrics page (--jit-metrics) is a warm-up request.
		if r.URL.Path != "/healthz" && !testutil.IsJITPage(r.URL.Path) {
			n.Add(1)
			time.Sleep(20 * time.Millisecond) // overlapping connections
		}
	}))
	defer srv.Close()
	if stdout, _, err := runWarmupCmd("--url", srv.URL, "--health-path", "/healthz", "--connections", "64", "--qps", "500", "--start-qps", "500",
		"--max-requests", "1", "--until-converged=false"); err != nil {
		t.Fatalf("danki warmup: %v\n%s", err, stdout)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("--max-requests 1 with 64 connections sent %d requests", got)
	}
}

// A custom marker with side effects must be stated twice.
func TestWarmupMarkerHeaderConfirm(t *testing.T) {
	args := []string{"--url", "http://127.0.0.1:1", "--method", "POST", "--allow-side-effects", "--marker-header", "X-Other"}
	_, _, err := runWarmupCmd(args...)
	if err == nil || !strings.Contains(err.Error(), "--marker-header (markerHeader): \"X-Other\" with allowSideEffects:") ||
		!strings.Contains(err.Error(), "markerHeaderConfirm: X-Other (got \"\")") ||
		!strings.HasSuffix(err.Error(), "\nflags: allowSideEffects is --allow-side-effects, markerHeaderConfirm is --marker-header-confirm") {
		t.Errorf("custom marker with side effects: %v", err)
	}
}
