package warmup

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	refv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	refv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

// What a gRPC server (the tenant's code) may make the plugin receive. One
// `danki plugin` process serves every tenant, so none of these is a
// tenant's to raise.
const (
	// GRPCMaxReplyBytes is the largest message a warm-up channel accepts
	// (a call's reply, a health answer): a larger one fails the call with
	// RESOURCE_EXHAUSTED before it is buffered. Below gRPC's own default
	// of 4 MiB, so 64 connections hold at most 64 MiB of replies.
	GRPCMaxReplyBytes = 1 << 20
	// GRPCMaxHeaderListBytes bounds the metadata (headers and trailers) of
	// an answer, as MaxResponseHeaderBytes does for HTTP.
	GRPCMaxHeaderListBytes = 64 << 10

	// GRPCReflectionMaxFiles and GRPCReflectionMaxBytes are the budget of
	// one warm-up's reflection: the files the server sends for the
	// methods asked (their imports included, transitively) and their
	// encoded size. A real service's schema is a few dozen files and well
	// under a MiB; a server whose files import new files without end
	// would otherwise fill the plugin's memory (the files are parsed and
	// linked: about 8× their encoded size at this budget's end).
	GRPCReflectionMaxFiles = 1000
	GRPCReflectionMaxBytes = 4 << 20
	// GRPCReflectionTimeout bounds the whole reflection (at most the
	// config's timeout, when shorter).
	GRPCReflectionTimeout = 10 * time.Second
)

// grpcLimits are the dial options every warm-up channel gets.
func grpcLimits() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(GRPCMaxReplyBytes)),
		grpc.WithMaxHeaderListSize(GRPCMaxHeaderListBytes),
	}
}

// replyCodec encodes a call's request as protobuf and drops its reply
// unread: the warm-up measures the call and its status, as it reads no
// HTTP body, and decoding a dynamic message would cost the plugin many
// times the reply's size (a packed repeated field's every byte becomes a
// value of its own).
type replyCodec struct{}

var protoCodec = encoding.GetCodecV2(protocodec.Name)

func (replyCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }
func (replyCodec) Unmarshal(mem.BufferSlice, any) error   { return nil }
func (replyCodec) Name() string                           { return protocodec.Name }

// droppedReply is the reply argument of a call whose reply is dropped
// (replyCodec).
type droppedReply struct{}

// reflectionBudget is a channel, for the reflection client only, that
// counts the files the server sends and refuses once they exceed
// GRPCReflectionMaxFiles or GRPCReflectionMaxBytes: the stream is failed
// and every new one refused, so the client's retries end at once.
type reflectionBudget struct {
	cc     grpc.ClientConnInterface
	target string

	mu    sync.Mutex
	files int
	bytes int64
	err   error // set once the budget is spent
}

func (b *reflectionBudget) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return b.cc.Invoke(ctx, method, args, reply, opts...)
}

func (b *reflectionBudget) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := b.spent(); err != nil {
		return nil, err
	}
	// One answer may hold at most the whole budget's bytes (and a little
	// for the names around them).
	opts = append(opts, grpc.MaxCallRecvMsgSize(GRPCReflectionMaxBytes+64<<10))
	s, err := b.cc.NewStream(ctx, desc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &budgetStream{ClientStream: s, b: b}, nil
}

func (b *reflectionBudget) spent() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// take counts the files of one answer; it returns the budget's error once
// they are over it.
func (b *reflectionBudget) take(m any) error {
	var files [][]byte
	switch r := m.(type) {
	case *refv1.ServerReflectionResponse:
		files = r.GetFileDescriptorResponse().GetFileDescriptorProto()
	//lint:ignore SA1019 servers that speak only v1alpha reflection are still common; its answers count too
	case *refv1alpha.ServerReflectionResponse:
		//lint:ignore SA1019 as above
		files = r.GetFileDescriptorResponse().GetFileDescriptorProto()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.files += len(files)
	for _, f := range files {
		b.bytes += int64(len(f))
	}
	if b.files > GRPCReflectionMaxFiles || b.bytes > GRPCReflectionMaxBytes {
		b.err = status.Errorf(codes.ResourceExhausted,
			"the server reflection service of %s sent %d files (%d KiB) so far: over danki's budget of %d files or %d MiB for one warm-up's schema "+
				"(the methods called and every file they import); serve reflection for a smaller schema",
			b.target, b.files, b.bytes>>10, GRPCReflectionMaxFiles, GRPCReflectionMaxBytes>>20)
		return b.err
	}
	return nil
}

// exceeded is the budget's error wrapped for a config error, nil while
// within it.
func (b *reflectionBudget) exceeded() error {
	if b == nil {
		return nil // a descriptor set: no reflection
	}
	if err := b.spent(); err != nil {
		return fmt.Errorf("gRPC reflection: %w", err)
	}
	return nil
}

// budgetStream is a reflection stream counted by its budget.
type budgetStream struct {
	grpc.ClientStream
	b *reflectionBudget
}

func (s *budgetStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	return s.b.take(m)
}
