package warmup

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jhump/protoreflect/v2/grpcreflect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/load"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

// grpcMethod is one gRPC request's method, resolved once per warm-up: its
// path on the wire and its message types, for dynamic messages.
type grpcMethod struct {
	path    string
	in, out protoreflect.MessageDescriptor
}

// descriptorResolver finds services by name: protoregistry.Files (a
// descriptor set file) and the reflection client's resolver both are one.
type descriptorResolver interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}

// resolveGRPC finds every gRPC request's method and message types — in
// Config.GRPCDescriptorSet when set, else through the server reflection
// service of t — checks that each may be called (Config.checkGRPCSafety)
// and stores them in set. The descriptors are resolved once, before any
// load, so a call only renders its JSON and encodes it.
func resolveGRPC(ctx context.Context, cfg *session, set *requestSet, t Target) error {
	var res descriptorResolver
	var budget *reflectionBudget
	source := "the descriptor set grpcDescriptorSet " + cfg.GRPCDescriptorSet
	if cfg.GRPCDescriptorSet != "" {
		files, err := readDescriptorSet(cfg.policy(), cfg.GRPCDescriptorSet)
		if err != nil {
			return err
		}
		res = files
	} else {
		conn, err := dialGRPC(cfg, t)
		if err != nil {
			return err
		}
		defer conn.Close()
		rctx, cancel := context.WithTimeout(markedContext(ctx, cfg.Config), min(cfg.Timeout.D(), GRPCReflectionTimeout))
		defer cancel()
		budget = &reflectionBudget{cc: conn, target: t.String()}
		client := grpcreflect.NewClientAuto(rctx, budget)
		defer client.Reset()
		res = client.AsResolver()
		source = fmt.Sprintf("the server reflection service of %s", t)
	}
	var errs config.Errors
	set.grpc = make([]*grpcMethod, len(set.requests))
	for i, r := range set.requests {
		path := fmt.Sprintf("requests[%d]", i)
		m, err := findGRPCMethod(res, r.grpc.spec, source)
		if err != nil {
			if over := budget.exceeded(); over != nil {
				// The reflection client's own error would read as a
				// service not found; no later method gets further.
				errs.Add(path+".grpc.method", over)
				break
			}
			errs.Add(path+".grpc.method", err)
			continue
		}
		if err := cfg.checkGRPCSafety(path, r.grpc.spec, m); err != nil {
			errs.Add("", err)
			continue
		}
		set.grpc[i] = &grpcMethod{path: r.grpc.spec.fullMethod(), in: m.Input(), out: m.Output()}
		// A static message is checked now, not on every call.
		if r.grpc.message == nil {
			if err := protojson.Unmarshal([]byte(r.grpc.spec.message()), dynamicpb.NewMessage(m.Input())); err != nil {
				errs.Addf(path+".grpc.message", "not a %s in protobuf's JSON mapping: %v", m.Input().FullName(), err)
			}
		}
	}
	if err := errs.Err(); err != nil {
		return fmt.Errorf("invalid warm-up config: %w", err)
	}
	return nil
}

// findGRPCMethod looks the request's method up; only unary methods are
// supported.
func findGRPCMethod(res descriptorResolver, g GRPCRequest, source string) (protoreflect.MethodDescriptor, error) {
	service, method, err := grpcMethodName(g.Method)
	if err != nil {
		return nil, err
	}
	d, err := res.FindDescriptorByName(service)
	if err != nil {
		if status.Code(err) == codes.Unimplemented { // status.Code sees through wrapping
			return nil, fmt.Errorf("%s: the server has no reflection service (%v): turn gRPC server reflection on (or, on the command line only, give a descriptor set: --grpc-descriptor-set, grpcDescriptorSet)", g.Method, err)
		}
		return nil, fmt.Errorf("%s: service %s not found in %s: %w", g.Method, service, source, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s: %s is a %T, not a service", g.Method, service, d)
	}
	md := sd.Methods().ByName(method)
	if md == nil {
		var names []string
		for i := range sd.Methods().Len() {
			names = append(names, string(sd.Methods().Get(i).Name()))
		}
		return nil, fmt.Errorf("%s: service %s has no method %s (methods: %s)", g.Method, service, method, strings.Join(names, ", "))
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, fmt.Errorf("%s is a streaming method: the warm-up calls unary methods only", g.Method)
	}
	return md, nil
}

// readDescriptorSet reads a FileDescriptorSet (protoc --include_imports
// --descriptor_set_out, buf build -o) into a registry of its files. Only
// the command line may name one (a tenant's config is refused at
// Validate, and again here); it is read only if it is a regular file and
// only up to the operator's Limits.FileBytes: /dev/zero or a FIFO would
// otherwise fill memory or hang.
func readDescriptorSet(p policy.Policy, path string) (descriptorResolver, error) {
	if err := p.CheckFile("grpcDescriptorSet", path, descriptorSetInstead); err != nil {
		return nil, err
	}
	data, err := policy.ReadFile(path, p.Limits.WithDefaults().FileBytes)
	if err != nil {
		return nil, &config.FieldError{Path: "grpcDescriptorSet", Err: err}
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &fds); err != nil {
		return nil, &config.FieldError{Path: "grpcDescriptorSet", Err: fmt.Errorf("%s is not a binary FileDescriptorSet: %w", path, err)}
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		return nil, &config.FieldError{Path: "grpcDescriptorSet", Err: fmt.Errorf("%s: %w (build it with --include_imports so every import is in it)", path, err)}
	}
	return files, nil
}

// dialGRPC makes a channel straight to the target's address (plaintext
// HTTP/2, like the HTTP warm-up talks plain HTTP to the pod IP, or inside
// Istio mTLS for a target with a Peer: Config.dial). The
// channel connects on its first call, through the warm-up's checked
// dialer (Config.dialer) under a tenant policy or a guard; a custom dialer
// also keeps gRPC from going through a proxy, which the command line may
// still use.
func dialGRPC(cfg *session, t Target) (*grpc.ClientConn, error) {
	u, err := url.Parse(t.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("target %s: no host:port in %q", t, t.URL)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent(userAgent)}, grpcLimits()...)
	if cfg.checked() {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			// A target with a Peer gets a TLS connection speaking h2
			// (ALPN istio-h2); the channel's own credentials stay
			// insecure, as the TLS is already done.
			return cfg.dial(ctx, "tcp", addr, mtls.H2)
		}))
	}
	conn, err := grpc.NewClient("passthrough:///"+u.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("gRPC channel to %s: %w", t, err)
	}
	return conn, nil
}

// markedContext adds the marker metadata (the marker header's name,
// lower-cased, = "1") to ctx.
func markedContext(ctx context.Context, cfg *Config) context.Context {
	return metadata.AppendToOutgoingContext(ctx, strings.ToLower(cfg.MarkerHeader), "1")
}

// grpcLoad sends one target's share of gRPC calls: one channel per
// connection (Config.Connections), each with its own generator.
type grpcLoad struct {
	cfg         *session
	set         *requestSet
	conns       []*grpc.ClientConn
	lastErr     *errorBox
	renderFails *atomic.Int64 // calls never sent: see loadRunner.renderFails
	explain     explainer
}

// newGRPCLoad returns the load.Options.Call of a gRPC target, and a func closing
// its channels.
func newGRPCLoad(t Target, conns int, cfg *session, set *requestSet, seed, stream uint64, lastErr *errorBox, renderFails *atomic.Int64) (func(int) func(context.Context) (bool, string), func(), error) {
	gl := &grpcLoad{cfg: cfg, set: set, lastErr: lastErr, renderFails: renderFails, explain: cfg.explainerFor(t.URL)}
	closeAll := func() {
		for _, c := range gl.conns {
			c.Close()
		}
	}
	for range max(conns, 1) {
		c, err := dialGRPC(cfg, t)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		gl.conns = append(gl.conns, c)
	}
	seq := &atomic.Int64{}
	call := func(conn int) func(context.Context) (bool, string) {
		gen := set.newGenerator(seed, stream<<20|uint64(conn), seq)
		return func(ctx context.Context) (bool, string) {
			return gl.call(ctx, gl.conns[conn], gen)
		}
	}
	return call, closeAll, nil
}

// call makes one call: render the next request of the mix, encode its JSON
// as the method's input message, send it with the marker metadata and
// report its status code (0 OK) as the details.
func (gl *grpcLoad) call(ctx context.Context, conn *grpc.ClientConn, g *generator) (bool, string) {
	i := g.pick()
	r, t, m := g.set.requests[i].grpc, g.templates[i], g.set.grpc[i]
	fail := func(err error) (bool, string) {
		gl.lastErr.set(err)
		return false, "-1"
	}
	unsent := func(err error) (bool, string) {
		gl.renderFails.Add(1)
		return fail(err)
	}
	text, err := g.render(t.message, r.spec.message())
	if err != nil {
		return unsent(fmt.Errorf("render %s message template: %w", r.spec.Method, err))
	}
	in := dynamicpb.NewMessage(m.in)
	if err := protojson.Unmarshal([]byte(text), in); err != nil {
		return unsent(fmt.Errorf("%s: rendered message %s is not a %s: %w", r.spec.Method, text, m.in.FullName(), err))
	}
	md := make([]string, 0, 2*len(r.metadataKeys)+2)
	for j, k := range r.metadataKeys {
		v, err := g.render(t.metadata[j], r.metadataText[j])
		if err != nil {
			return unsent(fmt.Errorf("render %s metadata %s: %w", r.spec.Method, k, err))
		}
		md = append(md, k, v)
	}
	md = append(md, strings.ToLower(gl.cfg.MarkerHeader), "1")
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, md...), gl.cfg.Timeout.D())
	defer cancel()
	err = conn.Invoke(ctx, m.path, in, droppedReply{}, grpc.ForceCodecV2(replyCodec{}))
	code := status.Code(err)
	if err != nil {
		gl.lastErr.set(fmt.Errorf("%s: %w", r.spec.Method, gl.explain.grpc(err)))
	}
	return code == codes.OK, strconv.Itoa(int(code))
}

// newGRPCRunner is newLoadRunner for a gRPC request mix.
func newGRPCRunner(reqCtx context.Context, lr *loadRunner, qps float64, pace *load.Pace, conns int, limit int64, cfg *session, set *requestSet, seed, stream uint64, rec *recorder) error {
	call, closeAll, err := newGRPCLoad(lr.target, conns, cfg, set, seed, stream, lr.lastErr, &lr.renderFails)
	if err != nil {
		return err
	}
	r, err := load.New(load.Options{
		QPS:            qps,
		Pace:           pace,
		Connections:    conns,
		Recorder:       rec,
		Label:          "danki warmup gRPC " + lr.target.Name,
		Percentiles:    fortioPercentiles,
		Resolution:     fortioResolution,
		RequestContext: reqCtx,
		Call:           call,
		MaxRequests:    limit,
	})
	if err != nil {
		closeAll()
		return fmt.Errorf("load %s: %w", lr.target, err)
	}
	lr.runner, lr.close = r, closeAll
	return nil
}

// answerText names a failed answer's code for messages: an HTTP status, or
// a gRPC status code for a gRPC warm-up.
func (c *Config) answerText(code int) string {
	if c.isGRPC() {
		return "gRPC status " + codes.Code(code).String()
	}
	return fmt.Sprintf("HTTP %d", code)
}
