package warmup

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/danki-dev/danki/pkg/config"
)

// Health protocols (Config.HealthProtocol).
const (
	HealthHTTP = "http"
	HealthGRPC = "grpc"
)

// GRPCRequest is a gRPC call in the warm-up request mix (RequestSpec.GRPC).
// Message and metadata values are templates with the same functions and
// delimiters as HTTP requests' (see RequestSpec). The message's type comes
// from the server's reflection service or from Config.GRPCDescriptorSet;
// the rendered JSON is decoded with protojson into a dynamic message, so no
// code is generated per service.
type GRPCRequest struct {
	// Method is the full method name, "package.Service/Method" (a leading
	// "/" is accepted). Only unary methods are supported.
	Method string `json:"method"`
	// Message is the request message in protobuf's JSON mapping, a
	// template. Default "{}" (every field at its default).
	Message string `json:"message,omitempty"`
	// Metadata are extra request metadata (gRPC headers); values are
	// templates. Keys are sent lower-cased.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// grpcMethodName splits "pkg.Service/Method" (or "/pkg.Service/Method")
// into the service's full name and the method's name.
func grpcMethodName(s string) (service protoreflect.FullName, method protoreflect.Name, err error) {
	svc, m, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
	service, method = protoreflect.FullName(svc), protoreflect.Name(m)
	if !ok || !service.IsValid() || !method.IsValid() {
		return "", "", fmt.Errorf("%q is not a gRPC method name: write \"package.Service/Method\"", s)
	}
	return service, method, nil
}

// fullMethod is the method's path on the wire: "/pkg.Service/Method".
func (g GRPCRequest) fullMethod() string { return "/" + strings.TrimPrefix(g.Method, "/") }

// message returns the message template, "{}" when empty.
func (g GRPCRequest) message() string {
	if strings.TrimSpace(g.Message) == "" {
		return "{}"
	}
	return g.Message
}

// validate checks one gRPC request; error paths are relative to the request
// entry ("grpc.method"). Side-effect safety needs the method's descriptor
// (its idempotency_level), so it is checked when the descriptors are
// resolved, before any load (checkGRPCSafety).
func (g GRPCRequest) validate(delims Delims) error {
	var errs config.Errors
	if _, _, err := grpcMethodName(g.Method); err != nil {
		errs.Add("grpc.method", err)
	}
	for _, name := range slices.Sorted(maps.Keys(g.Metadata)) {
		if !httpguts.ValidHeaderFieldName(name) {
			errs.Addf("grpc.metadata", "%q is not a valid metadata key (an HTTP/2 header name)", name)
		} else if strings.HasPrefix(strings.ToLower(name), "grpc-") || strings.HasPrefix(name, ":") {
			errs.Addf("grpc.metadata", "%q: keys starting with grpc- are reserved by gRPC itself", name)
		}
		// Parsed here, as the message is: the caller skips the sample
		// render of a request that does not compile.
		if _, err := parseTemplate(fmt.Sprintf("grpc.metadata[%s]", name), g.Metadata[name], delims); err != nil {
			errs.Add("", err)
		}
	}
	if t, err := parseTemplate("grpc.message", g.message(), delims); err != nil {
		errs.Add("", err)
	} else if t == nil && !json.Valid([]byte(g.message())) {
		errs.Addf("grpc.message", "%q is not JSON: write the request message in protobuf's JSON mapping, e.g. {\"id\": \"42\"}", g.Message)
	}
	return errs.Err()
}

// compiledGRPC is a GRPCRequest with its templates parsed (nil: static).
type compiledGRPC struct {
	spec         GRPCRequest
	message      *requestTemplate
	metadataKeys []string // sorted, lower-cased
	metadata     []*requestTemplate
	metadataText []string // parallel to metadataKeys
}

func compileGRPC(g GRPCRequest, delims Delims) (*compiledGRPC, error) {
	c := &compiledGRPC{spec: g}
	var errs config.Errors
	var err error
	if c.message, err = parseTemplate("grpc.message", g.message(), delims); err != nil {
		errs.Add("", err)
	}
	// Sorted, so a fixed seed draws random fields in the same order each run.
	for _, k := range slices.Sorted(maps.Keys(g.Metadata)) {
		t, err := parseTemplate(fmt.Sprintf("grpc.metadata[%s]", k), g.Metadata[k], delims)
		errs.Add("", err)
		c.metadataKeys = append(c.metadataKeys, strings.ToLower(k))
		c.metadata = append(c.metadata, t)
		c.metadataText = append(c.metadataText, g.Metadata[k])
	}
	return c, errs.Err()
}

// isGRPC reports whether the request mix is gRPC calls (Validate refuses a
// mix of both kinds).
func (c Config) isGRPC() bool {
	return len(c.Requests) > 0 && c.Requests[0].GRPC != nil
}

// validateGRPC checks the gRPC settings of a defaulted Config.
func (c Config) validateGRPC(errs *config.Errors) {
	switch c.HealthProtocol {
	case "", HealthHTTP, HealthGRPC:
	default:
		errs.Addf("healthProtocol", "%q: use http (GET healthPath, 200) or grpc (grpc.health.v1.Health/Check, SERVING)", c.HealthProtocol)
	}
	if c.HealthProtocol == HealthGRPC && c.HealthPath != "" {
		errs.Addf("healthPath", "is an HTTP path, but healthProtocol is grpc: remove it (healthService names what the gRPC health check asks)")
	}
	grpcs := 0
	for _, r := range c.Requests {
		if r.GRPC != nil {
			grpcs++
		}
	}
	if grpcs > 0 && grpcs < len(c.Requests) {
		errs.Addf("requests", "mixes %d gRPC entries (grpc) with %d HTTP entries (path): one warm-up speaks one protocol to a port; split them into two warm-up steps", grpcs, len(c.Requests)-grpcs)
	}
	for i, m := range c.GRPCSafeMethods {
		if _, _, err := grpcMethodName(m); err != nil {
			errs.Add(fmt.Sprintf("grpcSafeMethods[%d]", i), err)
		}
	}
	// Before any look at the file: whether a path exists is no business
	// of a tenant's config (the error would tell).
	if err := c.policy().CheckFile("grpcDescriptorSet", c.GRPCDescriptorSet, descriptorSetInstead); err != nil {
		errs.Add("", err)
	} else if c.GRPCDescriptorSet != "" && grpcs == 0 {
		errs.Addf("grpcDescriptorSet", "is set but no request is a gRPC call (requests[].grpc)")
	}
}

// checkGRPCSafety says whether a method may be called by the warm-up: with
// allowSideEffects, when listed in grpcSafeMethods, or when its descriptor
// declares option idempotency_level = NO_SIDE_EFFECTS (protobuf's marker of
// a read-only method). IDEMPOTENT is not enough: an idempotent call still
// changes data the first time. path names the request ("requests[0]").
func (c Config) checkGRPCSafety(path string, g GRPCRequest, md protoreflect.MethodDescriptor) error {
	if c.AllowSideEffects {
		return nil
	}
	want := strings.TrimPrefix(g.Method, "/")
	for _, m := range c.GRPCSafeMethods {
		if strings.TrimPrefix(m, "/") == want {
			return nil
		}
	}
	level := descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN
	if o, ok := md.Options().(*descriptorpb.MethodOptions); ok && o != nil {
		level = o.GetIdempotencyLevel()
	}
	if level == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
		return nil
	}
	return &config.FieldError{Path: path + ".grpc.method", Err: fmt.Errorf(
		"%s may change data on the canary (its idempotency_level is %s); gRPC has no GET, so the warm-up only calls methods known to be read-only: "+
			"mark it `option idempotency_level = NO_SIDE_EFFECTS;` in its .proto, or list it in grpcSafeMethods, "+
			"or set allowSideEffects (only if the service keeps calls with metadata %s: 1 free of side effects)",
		want, level, strings.ToLower(c.MarkerHeader))}
}
