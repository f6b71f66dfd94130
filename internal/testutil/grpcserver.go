package testutil

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// CatalogFile is the test gRPC service, built without protoc:
//
//	package danki.test;
//	message Item { string id = 1; int64 n = 2; string tenant = 3; }
//	service Catalog {
//	  rpc Get(Item) returns (Item) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Put(Item) returns (Item);  // may change data
//	  rpc Touch(Item) returns (Item) { option idempotency_level = IDEMPOTENT; }
//	  rpc Flaky(Item) returns (Item) { option idempotency_level = NO_SIDE_EFFECTS; }
//	}
func CatalogFile(tb testing.TB) protoreflect.FileDescriptor {
	tb.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
	}
	method := func(name string, level *descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".danki.test.Item"), OutputType: proto.String(".danki.test.Item")}
		if level != nil {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: level}
		}
		return m
	}
	readOnly := descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("danki/test/catalog.proto"), Package: proto.String("danki.test"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Item"), Field: []*descriptorpb.FieldDescriptorProto{
			field("id", 1, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			field("n", 2, descriptorpb.FieldDescriptorProto_TYPE_INT64),
			field("tenant", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING),
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Catalog"), Method: []*descriptorpb.MethodDescriptorProto{
			method("Get", readOnly), method("Put", nil), method("Touch", descriptorpb.MethodOptions_IDEMPOTENT.Enum()), method("Flaky", readOnly),
		}}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return fd
}

// GRPCCall is one Catalog call as the GRPCServer saw it.
type GRPCCall struct {
	Method     string // "Get"
	ID, Tenant string // the message's id; metadata x-tenant
	N          int64  // the message's n
	Marked     bool   // metadata x-danki-warmup: 1
	UserAgent  string
	// Client is the caller's SPIFFE ID and ALPN the protocol negotiated,
	// when the server runs TLS (a STRICT sidecar's, Mesh.ServerTLS).
	Client, ALPN string
}

// GRPCServer is a cold-starting gRPC pod stand-in on 127.0.0.1: Catalog
// (CatalogFile) answers its n-th call after Delay(n, false), the standard
// health service says NOT_SERVING until Serve, and server reflection is
// on unless turned off. Set its fields before the first call.
type GRPCServer struct {
	// URL is http://127.0.0.1:port (plaintext HTTP/2).
	URL    string
	Health *health.Server
	File   protoreflect.FileDescriptor
	Delay  func(n int64, firstOnConn bool) time.Duration
	// Flaky gives the status of the n-th call of Flaky (nil: OK).
	Flaky func(n int64) codes.Code

	// Calls counts Catalog calls; HealthChecks the health checks and
	// HealthUnmarked those without the marker metadata.
	Calls, HealthChecks, HealthUnmarked atomic.Int64

	mu   sync.Mutex
	seen []GRPCCall
}

// NewGRPCServer starts a GRPCServer and stops it when the test ends; opts
// are the server's more options (grpc.Creds: behind a STRICT sidecar).
func NewGRPCServer(tb testing.TB, delay func(int64, bool) time.Duration, withReflection bool, opts ...grpc.ServerOption) *GRPCServer {
	tb.Helper()
	s := &GRPCServer{File: CatalogFile(tb), Delay: delay, Health: health.NewServer()}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, grpc.UnaryInterceptor(s.countHealth))...)
	sd := s.File.Services().Get(0)
	desc := grpc.ServiceDesc{ServiceName: string(sd.FullName()), HandlerType: (*any)(nil)}
	for i := range sd.Methods().Len() {
		md := sd.Methods().Get(i)
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: string(md.Name()),
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := dynamicpb.NewMessage(md.Input())
				if err := dec(in); err != nil {
					return nil, err
				}
				return s.handle(ctx, string(md.Name()), in)
			}})
	}
	srv.RegisterService(&desc, struct{}{})
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, s.Health)
	if withReflection {
		files := new(protoregistry.Files)
		if err := files.RegisterFile(s.File); err != nil {
			tb.Fatal(err)
		}
		reflectionpb.RegisterServerReflectionServer(srv, reflection.NewServerV1(reflection.ServerOptions{Services: srv, DescriptorResolver: files}))
	}
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	s.URL = "http://" + lis.Addr().String()
	return s
}

// Serve turns the health status SERVING after d.
func (s *GRPCServer) Serve(d time.Duration) {
	time.AfterFunc(d, func() { s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING) })
}

func (s *GRPCServer) countHealth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod == "/grpc.health.v1.Health/Check" {
		s.HealthChecks.Add(1)
		if md, _ := metadata.FromIncomingContext(ctx); strings.Join(md.Get("x-danki-warmup"), ",") != "1" {
			s.HealthUnmarked.Add(1)
		}
	}
	return h(ctx, req)
}

func (s *GRPCServer) handle(ctx context.Context, method string, in *dynamicpb.Message) (any, error) {
	n := s.Calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	f := in.Descriptor().Fields()
	c := GRPCCall{Method: method, ID: in.Get(f.ByName("id")).String(), N: in.Get(f.ByName("n")).Int(),
		Marked: strings.Join(md.Get("x-danki-warmup"), ",") == "1", UserAgent: strings.Join(md.Get("user-agent"), ",")}
	if v := md.Get("x-tenant"); len(v) == 1 {
		c.Tenant = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			c.Client, c.ALPN = strings.Join(SPIFFEIDs(ti.State.PeerCertificates[0]), ","), ti.State.NegotiatedProtocol
		}
	}
	s.mu.Lock()
	s.seen = append(s.seen, c)
	s.mu.Unlock()
	if s.Delay != nil {
		time.Sleep(s.Delay(n, false))
	}
	if method == "Flaky" && s.Flaky != nil {
		if code := s.Flaky(n); code != codes.OK {
			return nil, status.Errorf(code, "flaky call %d", n)
		}
	}
	out := dynamicpb.NewMessage(in.Descriptor())
	out.Set(f.ByName("id"), in.Get(f.ByName("id")))
	out.Set(f.ByName("tenant"), protoreflect.ValueOfString(c.Tenant))
	return out, nil
}

// Seen returns the Catalog calls so far.
func (s *GRPCServer) Seen() []GRPCCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]GRPCCall(nil), s.seen...)
}
