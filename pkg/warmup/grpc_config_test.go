package warmup

import (
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
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
		{"healthPath with grpc", Config{HealthProtocol: "grpc", HealthPath: "/healthz"}, []string{"healthPath: is an HTTP path"}},
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

// The gRPC step example in docs/warmup.md is a valid step config.
func TestGRPCDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/warmup.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## gRPC services\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/warmup.md has no yaml example in its gRPC services section")
	}
	var rollout struct {
		Steps []struct {
			Plugin *struct {
				Name   string          `json:"name"`
				Config json.RawMessage `json:"config"`
			} `json:"plugin"`
			SetCanaryScale any `json:"setCanaryScale"`
			SetWeight      any `json:"setWeight"`
		} `json:"steps"`
	}
	if err := yaml.UnmarshalStrict([]byte(block), &rollout); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range rollout.Steps {
		if s.Plugin == nil {
			continue
		}
		found = true
		c, err := ParseStepConfig(s.Plugin.Config, policy.Local())
		if err != nil {
			t.Fatalf("the doc's gRPC step config is refused: %v", err)
		}
		if !c.isGRPC() || !c.healthGRPC(nil) || len(c.Requests) != 2 {
			t.Errorf("the doc's example is not a gRPC warm-up: %+v", c.Config)
		}
		// Its templates render to JSON.
		set, err := newRequestSet(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		g := set.newGenerator(1, 2, &atomic.Int64{})
		for i, r := range set.requests {
			text, err := g.render(g.templates[i].message, r.grpc.spec.message())
			if err != nil || !json.Valid([]byte(text)) {
				t.Errorf("requests[%d].grpc.message renders %q (%v): not JSON", i, text, err)
			}
		}
	}
	if !found {
		t.Error("no plugin step in the doc's gRPC example")
	}
}

func TestGRPCPortDetected(t *testing.T) {
	grpcProto, h2c := "grpc", "kubernetes.io/h2c"
	for _, tc := range []struct {
		name        string
		appProtocol *string
		want        bool
	}{
		{"grpc", nil, true}, {"grpc-web", nil, true}, {"http", nil, false}, {"api", &grpcProto, true}, {"api", &h2c, false}, {"grpcx", nil, false},
	} {
		if got := grpcPort(tc.name, tc.appProtocol); got != tc.want {
			t.Errorf("grpcPort(%q, %v) = %v, want %v", tc.name, tc.appProtocol, got, tc.want)
		}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Ports:          []corev1.ContainerPort{{Name: "api", ContainerPort: 9090}, {Name: "grpc-admin", ContainerPort: 9091}, {Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}},
	}}}}
	if !podGRPCPort(pod, 9090) || !podGRPCPort(pod, 9091) || podGRPCPort(pod, 8080) {
		t.Errorf("podGRPCPort: 9090 (gRPC readinessProbe) %v, 9091 (grpc-admin) %v, 8080 %v", podGRPCPort(pod, 9090), podGRPCPort(pod, 9091), podGRPCPort(pod, 8080))
	}
	// Auto: gRPC when every target is a gRPC port or the requests are gRPC.
	var http Config
	if http.healthGRPC([]Target{{GRPC: true}, {}}) || !http.healthGRPC([]Target{{GRPC: true}}) {
		t.Error("healthGRPC by port")
	}
	http.HealthProtocol = HealthHTTP
	if http.healthGRPC([]Target{{GRPC: true}}) {
		t.Error("healthProtocol http overridden by the port")
	}
}
