package warmup

import (
	"strings"
	"testing"

	"github.com/danki-dev/danki/internal/config"
)

func TestGRPCConfigDecodesAndValidates(t *testing.T) {
	var cfg Config
	err := config.Decode([]byte(`
healthProtocol: grpc
healthService: shop.Catalog
grpcSafeMethods: [shop.Catalog/Get]
requests:
- grpc:
    method: shop.Catalog/Get
    message: '{"id": "{{randInt 1 9}}"}'
    metadata: {x-tenant: "{{pick \"a\" \"b\"}}"}
  weight: 3
- grpc: {method: /shop.Catalog/List}
`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid gRPC config refused: %v", err)
	}
	if !cfg.isGRPC() || cfg.Requests[0].Method != "" || cfg.Requests[1].Weight != 1 || cfg.Requests[1].GRPC.message() != "{}" {
		t.Errorf("defaults: %+v", cfg.Requests)
	}
}

func TestGRPCConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"mixed", Config{Requests: []RequestSpec{{Path: "/"}, {GRPC: &GRPCRequest{Method: "a.B/C"}}}}, []string{"requests: mixes 1 gRPC entries"}},
		{"both kinds in one entry", Config{Requests: []RequestSpec{{Path: "/x", GRPC: &GRPCRequest{Method: "a.B/C"}}}}, []string{"requests[0].grpc: a request is either HTTP"}},
		{"method", Config{Requests: []RequestSpec{{GRPC: &GRPCRequest{Method: "a.B.C"}}}}, []string{"requests[0].grpc.method:", "package.Service/Method"}},
		{"static message not JSON", Config{Requests: []RequestSpec{{GRPC: &GRPCRequest{Method: "a.B/C", Message: "id=1"}}}}, []string{"requests[0].grpc.message:", "not JSON"}},
		{"template", Config{Requests: []RequestSpec{{GRPC: &GRPCRequest{Method: "a.B/C", Message: `{"id": {{nope}}}`}}}}, []string{"requests[0].grpc.message:", "nope"}},
		{"metadata", Config{Requests: []RequestSpec{{GRPC: &GRPCRequest{Method: "a.B/C", Metadata: map[string]string{"grpc-timeout": "1S", "bad key": "x"}}}}}, []string{"reserved by gRPC", `"bad key"`}},
		{"protocol", Config{HealthProtocol: "tcp"}, []string{"healthProtocol:", "grpc.health.v1.Health/Check"}},
		{"safe list", Config{GRPCSafeMethods: []string{"nope"}, Requests: []RequestSpec{{GRPC: &GRPCRequest{Method: "a.B/C"}}}}, []string{"grpcSafeMethods[0]:"}},
		{"descriptor set without gRPC", Config{GRPCDescriptorSet: "x.pb"}, []string{"grpcDescriptorSet: is set but no request is a gRPC call"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.WithDefaults().Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}
