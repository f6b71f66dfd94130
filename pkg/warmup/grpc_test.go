package warmup

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/config"
)

// grpcTarget addresses a test gRPC server.
func grpcTarget(s *testutil.GRPCServer) Target { return Target{Name: "grpc-test", URL: s.URL} }

// grpcConfig is fastConfig with a gRPC request mix.
func grpcConfig(reqs ...GRPCRequest) Config {
	cfg := fastConfig()
	cfg.HealthPath = ""
	for _, r := range reqs {
		cfg.Requests = append(cfg.Requests, RequestSpec{GRPC: &r})
	}
	return cfg
}

func TestGRPCWarmupConverges(t *testing.T) {
	skipLongLoad(t, "a gRPC warm-up to its plateau")
	// Cold: 2 ms + 30 ms·e^(−n/50), as TestConvergesOnDecayingLatency.
	srv := testutil.NewGRPCServer(t, testutil.Decaying(2*time.Millisecond, 30*time.Millisecond, 50), true)
	srv.Serve(600 * time.Millisecond)
	cfg := grpcConfig(GRPCRequest{
		Method:   "danki.test.Catalog/Get",
		Message:  `{"id": "item-{{randInt 1 9}}", "n": "{{seq}}"}`,
		Metadata: map[string]string{"X-Tenant": `{{pick "a" "b"}}`},
	})
	res, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if err != nil {
		t.Fatalf("gRPC warm-up failed: %v\n%s", err, table(res))
	}
	tr := res.Targets[0]
	if !res.Converged || tr.Errors != 0 {
		t.Fatalf("not converged or errors:\n%s", table(res))
	}
	// Health: the load waited for SERVING (checks while NOT_SERVING).
	if n := srv.HealthChecks.Load(); n < 2 {
		t.Errorf("%d health checks, want several: the server was NOT_SERVING for 600 ms", n)
	}
	if n := srv.HealthUnmarked.Load(); n != 0 {
		t.Errorf("%d health checks without the marker metadata", n)
	}
	calls := srv.Seen()
	if int64(len(calls)) != res.Requests() {
		t.Errorf("server saw %d calls, danki counted %d", len(calls), res.Requests())
	}
	ids, tenants, ns := map[string]bool{}, map[string]bool{}, map[int64]bool{}
	for i, c := range calls {
		if !c.Marked || !strings.HasPrefix(c.UserAgent, userAgent) || c.Method != "Get" {
			t.Fatalf("call %d: %+v: want Get, metadata x-danki-warmup: 1 and danki's user agent", i, c)
		}
		ids[c.ID], tenants[c.Tenant], ns[c.N] = true, true, true
	}
	for id := range ids {
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "item-")); err != nil || n < 1 || n > 9 {
			t.Errorf("id %q is not the rendered template item-{{randInt 1 9}}", id)
		}
	}
	if len(ids) < 5 || len(tenants) != 2 || !tenants["a"] || !tenants["b"] {
		t.Errorf("templated fields do not vary: ids %v tenants %v", ids, tenants)
	}
	if len(ns) != len(calls) || !ns[1] || !ns[int64(len(calls))] {
		t.Errorf("seq gave %d distinct values over %d calls (1 and %d present: %v %v)", len(ns), len(calls), len(calls), ns[1], ns[int64(len(calls))])
	}
	// Convergence stops the load as for HTTP: within a window of the
	// converging one, on a window boundary, with a cold first window.
	if extra := tr.Requests - tr.ConvergedAfter; tr.ConvergedAfter%int64(cfg.Window) != 0 || extra > int64(cfg.Window) {
		t.Errorf("converged after %d, sent %d: not a window boundary or load not stopped", tr.ConvergedAfter, tr.Requests)
	}
	// The median p99 of the last three complete windows: a window's p99 is
	// its maximum here (20 calls), so one scheduler hiccup on the shared
	// test machine must not decide.
	var lastP99s []time.Duration
	for _, w := range tr.Windows {
		if !w.Partial {
			lastP99s = append(lastP99s, w.P99)
		}
	}
	lastP99s = lastP99s[len(lastP99s)-3:]
	slices.Sort(lastP99s)
	first, last := tr.Windows[0].P99, lastP99s[1]
	if first < 10*time.Millisecond || last > first/2 {
		t.Errorf("p99 first window %s → last windows %s, want a cold first window and much warmer last ones", first, last)
	}
	t.Logf("%s; median p99 of the last 3 windows %s", res.Summary(), last)
	if tr.RetCodes[0] != tr.Requests {
		t.Errorf("status codes %v, want all %d OK (0)", tr.RetCodes, tr.Requests)
	}
	if fr := res.FortioResults(); fr.RunType != "gRPC" || fr.RetCodes[0] != tr.Requests || fr.DurationHistogram.Count != tr.Requests {
		t.Errorf("fortio result: type %q codes %v count %d", fr.RunType, fr.RetCodes, fr.DurationHistogram.Count)
	}
}

func TestGRPCUnsafeMethodsRefused(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true)
	srv.Serve(0)
	for _, m := range []string{"Put", "Touch"} { // no idempotency_level; IDEMPOTENT
		cfg := grpcConfig(GRPCRequest{Method: "/danki.test.Catalog/" + m, Message: `{"id": "1"}`})
		_, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
		if err == nil {
			t.Fatalf("%s was called without being marked safe", m)
		}
		for _, want := range []string{"requests[0].grpc.method", "danki.test.Catalog/" + m, "NO_SIDE_EFFECTS", "grpcSafeMethods", "allowSideEffects", "x-danki-warmup"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error lacks %q: %v", m, want, err)
			}
		}
	}
	if n := srv.Calls.Load(); n != 0 {
		t.Fatalf("the server got %d calls of refused methods", n)
	}
	// Allowed by the list, by allowSideEffects; Get by its NO_SIDE_EFFECTS
	// option (TestGRPCWarmupConverges).
	listed := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Put"})
	listed.GRPCSafeMethods = []string{"danki.test.Catalog/Put"}
	allowed := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Touch"})
	allowed.AllowSideEffects = true
	for name, cfg := range map[string]Config{"grpcSafeMethods": listed, "allowSideEffects": allowed} {
		f := false
		cfg.UntilConverged, cfg.MaxRequests, cfg.Connections = &f, 30, 1 // exactly 30
		before := srv.Calls.Load()
		res, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
		if err != nil || res.Requests() != 30 || srv.Calls.Load()-before != 30 {
			t.Errorf("%s: %v, %d requests counted, %d served; want 30", name, err, res.Requests(), srv.Calls.Load()-before)
		}
	}
}

func TestGRPCNonOKCountedAsErrors(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true)
	srv.Serve(0)
	srv.Flaky = func(n int64) codes.Code {
		if n%4 == 0 {
			return codes.NotFound
		}
		return codes.OK
	}
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Flaky"})
	f := false
	cfg.UntilConverged, cfg.MaxRequests, cfg.Connections = &f, 100, 1
	res, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Targets[0]
	if tr.Errors != 25 || tr.RetCodes[int(codes.NotFound)] != 25 || tr.RetCodes[int(codes.OK)] != 75 {
		t.Errorf("errors %d, codes %v; want 25 NotFound (5) of 100", tr.Errors, tr.RetCodes)
	}
	if !strings.Contains(tr.LastError, "NotFound") {
		t.Errorf("last error %q does not show the code", tr.LastError)
	}

	// Every call failing: the target fails fast, with the code in the message.
	srv.Flaky = func(int64) codes.Code { return codes.Unavailable }
	_, err = Run(context.Background(), grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Flaky"}), []Target{grpcTarget(srv)}, Options{})
	if !errors.Is(err, ErrTargetFailing) || !strings.Contains(err.Error(), "gRPC status Unavailable") {
		t.Errorf("always-failing method: %v; want ErrTargetFailing naming gRPC status Unavailable", err)
	}
}

func TestGRPCHealthWaitTimesOut(t *testing.T) {
	skipLongLoad(t, "a gRPC health wait to its timeout")
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true) // never SERVING
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get"})
	cfg.HealthTimeout = config.Duration(time.Second)
	cfg.HealthService = ""
	_, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "NOT_SERVING") || !strings.Contains(err.Error(), "within healthTimeout 1s") {
		t.Errorf("got %v; want ErrUnhealthy with NOT_SERVING within healthTimeout 1s", err)
	}
	if srv.Calls.Load() != 0 {
		t.Errorf("load sent to an unhealthy server")
	}
	// An unknown health service is never SERVING either.
	srv.Serve(0)
	cfg.HealthService = "danki.test.Nope"
	if _, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{}); !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("unknown health service: %v", err)
	}
}

func TestGRPCHealthServiceMissing(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer() // no health service
	go func() { _ = bare.Serve(lis) }()
	t.Cleanup(bare.Stop)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get"})
	cfg.HealthTimeout = config.Duration(500 * time.Millisecond)
	_, err = Run(context.Background(), cfg, []Target{{Name: "bare", URL: "http://" + lis.Addr().String()}}, Options{})
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "Unimplemented") || !strings.Contains(err.Error(), "healthProtocol http") {
		t.Errorf("server without a health service: %v; want the Unimplemented status and the way out", err)
	}
}

func TestGRPCDescriptorSetWithoutReflection(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), false)
	srv.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get", Message: `{"id": "{{uuid}}"}`})
	f := false
	cfg.UntilConverged, cfg.MaxRequests, cfg.Connections = &f, 40, 1 // exactly 40
	_, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "requests[0].grpc.method") || !strings.Contains(err.Error(), "has no reflection service") || !strings.Contains(err.Error(), "grpcDescriptorSet") {
		t.Fatalf("no reflection and no descriptor set: %v; want an error saying to turn reflection on or give grpcDescriptorSet", err)
	}
	t.Log(err)
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(srv.File)}}
	data, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	cfg.GRPCDescriptorSet = filepath.Join(t.TempDir(), "catalog.pb")
	if err := os.WriteFile(cfg.GRPCDescriptorSet, data, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{})
	if err != nil || res.Requests() != 40 || srv.Calls.Load() != 40 {
		t.Fatalf("with grpcDescriptorSet: %v, %d counted, %d served; want 40", err, res.Requests(), srv.Calls.Load())
	}
	for _, c := range srv.Seen() {
		if len(c.ID) != 36 || !c.Marked {
			t.Fatalf("call %+v: want a rendered uuid and the marker", c)
		}
	}
	// A message that does not fit the type is refused before any load.
	cfg.Requests[0].GRPC.Message = `{"nope": 1}`
	if _, err := Run(context.Background(), cfg, []Target{grpcTarget(srv)}, Options{}); err == nil || !strings.Contains(err.Error(), "requests[0].grpc.message") {
		t.Errorf("bad static message: %v", err)
	}
}

func TestGRPCCancelCutsCallsInFlight(t *testing.T) {
	srv := testutil.NewGRPCServer(t, testutil.Flat(5*time.Second), true)
	srv.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get"})
	cfg.Timeout = config.Duration(30 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(ctx, cfg, []Target{grpcTarget(srv)}, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	// Calls in flight get hardStopGrace, then are cut: not the server's 5 s.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Run returned %s after the start, calls in flight were not cut", d)
	}
}

// Stable pods are loaded side by side with the same gRPC calls, and a
// slower version is rejected as for HTTP.
func TestGRPCSlowerVersionRejected(t *testing.T) {
	skipLongLoad(t, "gRPC canary and stable loaded to their plateaus")
	slow := func(n int64, _ bool) time.Duration {
		if n%20 == 0 { // 5 % of calls +100 ms
			return 101 * time.Millisecond
		}
		return time.Millisecond
	}
	canary, stable := testutil.NewGRPCServer(t, slow, true), testutil.NewGRPCServer(t, testutil.Flat(time.Millisecond), true)
	canary.Serve(0)
	stable.Serve(0)
	cfg := grpcConfig(GRPCRequest{Method: "danki.test.Catalog/Get", Message: `{"id": "{{seq}}"}`})
	cfg.StableQPS, cfg.MaxRequests = 500, 10000
	res, err := Run(context.Background(), cfg, []Target{grpcTarget(canary)}, Options{Stable: []Target{grpcTarget(stable)}})
	if !errors.Is(err, ErrSlowerVersion) {
		t.Fatalf("err = %v, want ErrSlowerVersion\n%s", err, table(res))
	}
	if stable.Calls.Load() == 0 || stable.HealthChecks.Load() == 0 {
		t.Errorf("stable got %d calls and %d health checks: not loaded side by side over gRPC", stable.Calls.Load(), stable.HealthChecks.Load())
	}
	for _, c := range stable.Seen() {
		if !c.Marked || c.Method != "Get" || c.ID == "" {
			t.Fatalf("stable call %+v: want Get with a rendered id and the marker", c)
		}
	}
}
