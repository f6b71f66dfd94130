package warmup

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	refv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// A hostile canary is the tenant's own code, and one `danki plugin`
// process warms every tenant's: whatever a canary makes the plugin hold,
// every tenant pays for. Each test below warms such a canary on 127.0.0.1
// with 64 connections (the default cap) and holds the plugin's heap to
// hostileHeapBound over its baseline, and the bytes the canary got to
// send to a bound of its own: the warm-up ends, with a clear failure or a
// bounded run, rather than reading gigabytes.
const hostileHeapBound = 64 << 20

// hostileConnections is the default cap of connections per target.
const hostileConnections = 64

// heapPeak samples the heap while f runs: its peak over the baseline
// taken before f (after a GC), and the bytes allocated in all.
func heapPeak(t *testing.T, f func()) (peak, allocated uint64) {
	t.Helper()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop, done := make(chan struct{}), make(chan struct{})
	var high uint64
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			high = max(high, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	if high > base.HeapAlloc {
		peak = high - base.HeapAlloc
	}
	return peak, end.TotalAlloc - base.TotalAlloc
}

// bytesRead is what this process has read from files and sockets so far
// (/proc/self/io rchar): in these tests the canary only reads small
// requests, so its growth is what danki read of the answers. ok is false
// where the kernel does not say.
func bytesRead() (n int64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, found := strings.CutPrefix(line, "rchar: "); found {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readDuring is the bytes this process read while f ran (-1: unknown).
func readDuring(f func()) int64 {
	before, ok := bytesRead()
	f()
	after, ok2 := bytesRead()
	if !ok || !ok2 {
		return -1
	}
	return after - before
}

// hostileConfig is a fixed count of requests at full pace on 64
// connections: every connection is busy with the canary at once.
func hostileConfig() Config {
	cfg := fastConfig()
	f := false
	cfg.UntilConverged, cfg.MaxRequests = &f, 1000
	cfg.Connections, cfg.QPS, cfg.StartQPS = hostileConnections, 500, 500
	cfg.JITMetrics.Enabled = &f
	return cfg
}

// countingListener counts the bytes its connections write.
type countingListener struct {
	net.Listener
	written *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.written}, nil
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// hostileHTTP serves handler on 127.0.0.1 (/healthz answers 200) and
// counts what it sends.
func hostileHTTP(t *testing.T, handler http.HandlerFunc) (url string, sent *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sent = &atomic.Int64{}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/", handler)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(countingListener{lis, sent}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String(), sent
}

func TestHostileCanaryEndlessBody(t *testing.T) {
	chunk := []byte(strings.Repeat("x", 32<<10))
	url, sent := hostileHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		for { // until danki closes the connection
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	cfg := hostileConfig()
	var res *Result
	var err error
	start := time.Now()
	var read int64
	peak, allocated := heapPeak(t, func() {
		read = readDuring(func() {
			res, err = Run(context.Background(), cfg, []Target{{Name: "endless-body", URL: url}}, Options{})
		})
	})
	took := time.Since(start)
	n := res.Requests()
	t.Logf("endless body: %d requests in %s, %v; danki read %d MiB (%d KiB per request), the canary sent %d MiB (%d KiB per request: the sockets' buffers fill before the close); heap peak +%d MiB, %d MiB allocated",
		n, took.Round(time.Millisecond), err, read>>20, read/max(n, 1)>>10, sent.Load()>>20, sent.Load()/max(n, 1)>>10, peak>>20, allocated>>20)
	// What danki read: the cap per request, and a read-ahead buffer.
	if perRequest := read / max(n, 1); perRequest > MaxResponseBodyBytes+32<<10 {
		t.Errorf("danki read %d KiB per request: past the %d KiB cap", perRequest>>10, MaxResponseBodyBytes>>10)
	}
	// A body cut at the cap is an answer: the fixed count runs out, each
	// request's latency the time to its first 64 KiB.
	if err != nil || n != cfg.MaxRequests {
		t.Errorf("got %d requests, %v; want the fixed count of %d, each answer cut at %d KiB", n, err, cfg.MaxRequests, MaxResponseBodyBytes>>10)
	}
	// What the canary got to send: the cap per request, plus what the
	// sockets' buffers took before danki closed the connection (the
	// kernel's, up to tcp_rmem's maximum; before the cap: until the
	// request's timeout).
	if perRequest := sent.Load() / max(n, 1); perRequest > 16<<20 {
		t.Errorf("the canary sent %d KiB per request: danki reads on past the %d KiB cap", perRequest>>10, MaxResponseBodyBytes>>10)
	}
	if peak > hostileHeapBound {
		t.Errorf("heap peak +%d MiB over the baseline; want at most %d MiB", peak>>20, hostileHeapBound>>20)
	}
}

func TestHostileCanaryEndlessHeaders(t *testing.T) {
	line := "X-Endless: " + strings.Repeat("h", 1000) + "\r\n"
	url, sent := hostileHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := rw.WriteString("HTTP/1.1 200 OK\r\n"); err != nil {
			return
		}
		for {
			if _, err := rw.WriteString(line); err != nil {
				return
			}
			if rw.Writer.Buffered() > 16<<10 {
				if err := rw.Flush(); err != nil {
					return
				}
			}
		}
	})
	cfg := hostileConfig()
	var res *Result
	var err error
	var read int64
	peak, allocated := heapPeak(t, func() {
		read = readDuring(func() {
			res, err = Run(context.Background(), cfg, []Target{{Name: "endless-headers", URL: url}}, Options{})
		})
	})
	n := res.Requests()
	t.Logf("endless headers: %d requests, %v; danki read %d KiB (%d KiB per request), the canary sent %d MiB; heap peak +%d MiB, %d MiB allocated",
		n, err, read>>10, read/max(n, 1)>>10, sent.Load()>>20, peak>>20, allocated>>20)
	if perRequest := read / max(n, 1); perRequest > 2*(64<<10) {
		t.Errorf("danki read %d KiB per request: headers read past the cap", perRequest>>10)
	}
	// No answer ever comes: the warm-up gives the target up as failing.
	if err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("warm-up ended with %v; want a failure naming the oversized headers", err)
	}
	if peak > hostileHeapBound {
		t.Errorf("heap peak +%d MiB over the baseline; want at most %d MiB", peak>>20, hostileHeapBound>>20)
	}
}

// hostileFile is a .proto file of package hostile: message M (a packed
// repeated int64, big replies), a service Svc with Get(M) M when
// withService, importing deps.
func hostileFile(name string, withService bool, deps []string, padFields int) *descriptorpb.FileDescriptorProto {
	repeated, int64Type := descriptorpb.FieldDescriptorProto_LABEL_REPEATED, descriptorpb.FieldDescriptorProto_TYPE_INT64
	msg := &descriptorpb.DescriptorProto{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{
		{Name: proto.String("v"), Number: proto.Int32(1), Label: &repeated, Type: &int64Type, Options: &descriptorpb.FieldOptions{Packed: proto.Bool(true)}}}}
	pkg := "hostile"
	if !withService {
		// Each dependency its own package, so their M do not clash.
		pkg = "hostile." + strings.TrimSuffix(name, ".proto")
		for i := range padFields {
			msg.Field = append(msg.Field, &descriptorpb.FieldDescriptorProto{Name: proto.String(fmt.Sprintf("pad_field_with_a_long_name_%d", i)),
				Number: proto.Int32(int32(i + 2)), Label: &repeated, Type: &int64Type})
		}
	}
	f := &descriptorpb.FileDescriptorProto{Name: proto.String(name), Package: proto.String(pkg), Syntax: proto.String("proto3"),
		Dependency: deps, MessageType: []*descriptorpb.DescriptorProto{msg}}
	if withService {
		f.Service = []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Svc"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Get"), InputType: proto.String(".hostile.M"), OutputType: proto.String(".hostile.M")}}}}
	}
	return f
}

// endlessSchema is a reflection service whose root file imports width
// files, each of which imports width new ones, without end (padFields
// make each file larger) (issue 55: a
// graph of 150,000 files took the plugin from 48 MB to 4.3 GB).
type endlessSchema struct {
	refv1.UnimplementedServerReflectionServer
	width, padFields    int
	files, bytes, named atomic.Int64
}

// deps are width files never named before.
func (s *endlessSchema) deps() []string {
	out := make([]string, s.width)
	for i := range out {
		out[i] = fmt.Sprintf("f%d.proto", s.named.Add(1))
	}
	return out
}

func (s *endlessSchema) ServerReflectionInfo(stream refv1.ServerReflection_ServerReflectionInfoServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		var f *descriptorpb.FileDescriptorProto
		switch {
		case req.GetFileContainingSymbol() != "":
			f = hostileFile("root.proto", true, s.deps(), 0)
		default:
			f = hostileFile(req.GetFileByFilename(), false, s.deps(), s.padFields)
		}
		b, _ := proto.Marshal(f)
		s.files.Add(1)
		s.bytes.Add(int64(len(b)))
		resp := &refv1.ServerReflectionResponse{MessageResponse: &refv1.ServerReflectionResponse_FileDescriptorResponse{
			FileDescriptorResponse: &refv1.FileDescriptorResponse{FileDescriptorProto: [][]byte{b}}}}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

// rawCodec passes messages as raw bytes: the hostile server sends what it
// likes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*(v.(*[]byte)))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// hostileGRPC serves every method with reply as raw bytes (the health
// check SERVING); with a schema, only its reflection service and a health
// service SERVING.
func hostileGRPC(t *testing.T, schema *endlessSchema, reply []byte) (url string, sent *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sent = &atomic.Int64{}
	serving := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // HealthCheckResponse{status: SERVING}
	opts := []grpc.ServerOption{grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		method, _ := grpc.MethodFromServerStream(stream)
		out := reply
		if method == "/grpc.health.v1.Health/Check" {
			out = serving
		}
		return stream.SendMsg(&out)
	}), grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxSendMsgSize(1 << 30)}
	if schema != nil { // the reflection service speaks protobuf
		opts = nil
	}
	srv := grpc.NewServer(opts...)
	if schema != nil {
		refv1.RegisterServerReflectionServer(srv, schema)
		hs := health.NewServer()
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(srv, hs)
	}
	go func() { _ = srv.Serve(countingListener{lis, sent}) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String(), sent
}

// TestHostileCanaryReflectionWithoutEnd: the budget (GRPCReflectionMaxFiles,
// GRPCReflectionMaxBytes) ends the reflection with an error saying so.
func TestHostileCanaryReflectionWithoutEnd(t *testing.T) {
	for _, c := range []struct {
		name             string
		width, padFields int
	}{
		{"many small files", 2, 0},
		{"fewer, large files", 2, 2000},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema := &endlessSchema{width: c.width, padFields: c.padFields}
			url, sent := hostileGRPC(t, schema, nil)
			cfg := hostileConfig()
			cfg.HealthPath = ""
			cfg.Requests = []RequestSpec{{GRPC: &GRPCRequest{Method: "hostile.Svc/Get"}}}
			cfg.GRPCSafeMethods = []string{"hostile.Svc/Get"}
			var err error
			start := time.Now()
			peak, allocated := heapPeak(t, func() {
				_, err = Run(context.Background(), cfg, []Target{{Name: "endless-schema", URL: url}}, Options{})
			})
			t.Logf("reflection, %s: %s, %v; the server sent %d files (%d KiB of descriptors, %d MiB in all); heap peak +%d MiB, %d MiB allocated",
				c.name, time.Since(start).Round(time.Millisecond), err, schema.files.Load(), schema.bytes.Load()>>10, sent.Load()>>20, peak>>20, allocated>>20)
			if err == nil || !strings.Contains(err.Error(), "over danki's budget") || !strings.Contains(err.Error(), "requests[0].grpc.method") {
				t.Errorf("warm-up ended with %v; want requests[0].grpc.method refused as over the reflection budget", err)
			}
			if files := schema.files.Load(); files > GRPCReflectionMaxFiles+1 {
				t.Errorf("the server sent %d files; the budget is %d", files, GRPCReflectionMaxFiles)
			}
			if peak > hostileHeapBound {
				t.Errorf("heap peak +%d MiB over the baseline; want at most %d MiB", peak>>20, hostileHeapBound>>20)
			}
		})
	}
}

// TestHostileCanaryBigReplies: replies are received up to
// GRPCMaxReplyBytes and dropped undecoded; a larger one fails its call.
func TestHostileCanaryBigReplies(t *testing.T) {
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{hostileFile("big.proto", true, nil, 0)}}
	raw, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.pb")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// M{v: [1, 1, …]}: a packed field whose every byte is a value, which a
	// dynamic message holds as a value of its own.
	packed := func(size int) []byte {
		ones := make([]byte, size)
		for i := range ones {
			ones[i] = 1
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ones)
	}
	for _, c := range []struct {
		name  string
		reply []byte
		fails bool
	}{
		{"just under the cap", packed(GRPCMaxReplyBytes - 16), false},
		{"over the cap", packed(64 << 20), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, sent := hostileGRPC(t, nil, c.reply)
			cfg := hostileConfig()
			cfg.MaxRequests = 500
			cfg.HealthPath = ""
			cfg.GRPCDescriptorSet = path
			cfg.Requests = []RequestSpec{{GRPC: &GRPCRequest{Method: "hostile.Svc/Get"}}}
			cfg.GRPCSafeMethods = []string{"hostile.Svc/Get"}
			var res *Result
			var err error
			peak, allocated := heapPeak(t, func() {
				res, err = Run(context.Background(), cfg, []Target{{Name: "big-replies", URL: url}}, Options{})
			})
			n := res.Requests()
			t.Logf("gRPC replies of %d KiB: %d calls, %v; the server sent %d MiB; heap peak +%d MiB, %d MiB allocated",
				len(c.reply)>>10, n, err, sent.Load()>>20, peak>>20, allocated>>20)
			if c.fails {
				if err == nil || !strings.Contains(err.Error(), "ResourceExhausted") && !strings.Contains(err.Error(), "RESOURCE_EXHAUSTED") && !strings.Contains(err.Error(), "larger than max") {
					t.Errorf("warm-up ended with %v; want the calls failed as over the reply cap", err)
				}
			} else if err != nil || n != cfg.MaxRequests || res.Targets[0].Errors != 0 {
				t.Errorf("got %d calls (%d failed), %v; want the fixed count of %d, every reply received", n, res.Targets[0].Errors, err, cfg.MaxRequests)
			}
			if peak > hostileHeapBound {
				t.Errorf("heap peak +%d MiB over the baseline; want at most %d MiB", peak>>20, hostileHeapBound>>20)
			}
		})
	}
}
