package warmupstep

import (
	"reflect"
	"strings"
	"testing"

	"github.com/danki-dev/danki/pkg/capacity"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
)

// The capacity and mirror blocks are decoded with the step, once: what the
// step holds is what their own parsers make of the block (defaults, the
// operator's policy), and no block means no check.
func TestStepConfigTypedBlocks(t *testing.T) {
	const block = `{"minQPS": 150, "hold": "5s", "p99": "80ms", "maxErrorRate": 0, "refine": 2,
	  "requests": [{"path": "/a", "weight": 2, "headers": {"x-a": "b"}}, {"path": "/b", "method": "HEAD", "name": "b"}]}`
	c, err := ParseStepConfig([]byte(`{"urls": ["http://127.0.0.1:1"], "capacity": `+block+`,
	  "mirror": {"allowSideEffects": true, "source": "envoy", "prometheus": {"address": "http://127.0.0.1:9"}, "envoy": {"canaryCluster": "c"}}}`), policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	want, err := capacity.ParseCheck([]byte(block), policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	if c.Capacity == nil || !reflect.DeepEqual(*c.Capacity, want) {
		t.Errorf("capacity block\n got %+v\nwant %+v (capacity.ParseCheck)", c.Capacity, want)
	}
	if c.Mirror == nil || c.Mirror.Mode != mirror.ModeOnly || c.Mirror.MaxPercent != mirror.DefaultMaxPercent {
		t.Errorf("mirror block %+v; want its defaults", c.Mirror)
	}
	// A gRPC mix comes through the same.
	const grpcBlock = `{"minQPS": 10, "requests": [{"grpc": {"method": "shop.Catalog/Get", "message": "{\"id\": 1}", "metadata": {"x-t": "eu"}}, "weight": 3}]}`
	g, err := ParseStepConfig([]byte(`{"urls": ["http://127.0.0.1:1"], "capacity": `+grpcBlock+`}`), policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	if want, err := capacity.ParseCheck([]byte(grpcBlock), policy.Local()); err != nil || !reflect.DeepEqual(*g.Capacity, want) {
		t.Errorf("gRPC capacity block\n got %+v\nwant %+v (%v)", g.Capacity, want, err)
	}
	none, err := ParseStepConfig([]byte(`{"urls": ["http://127.0.0.1:1"]}`), policy.Local())
	if err != nil || none.Capacity != nil || none.Mirror != nil {
		t.Errorf("no blocks: %+v, %+v (%v); want none", none.Capacity, none.Mirror, err)
	}
}

// A config with problems in the warm-up, the capacity block and the mirror
// block reports them all at once, each naming its field.
func TestStepConfigOneErrorList(t *testing.T) {
	_, err := ParseStepConfig([]byte(`{"pollInterval": "5s", "capacity": {"maxQPS": 10},
	  "mirror": {"mode": "sometimes", "allowSideEffects": true, "source": "envoy", "envoy": {"canaryCluster": "c"}}}`), policy.Local())
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"pollInterval: 5s is too short", "capacity.minQPS: required", `mirror.mode: "sometimes" is not a mode`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q; want it to say %q", err, want)
		}
	}
	// Unknown fields in a block are found by the one strict decode, with
	// their path.
	_, err = ParseStepConfig([]byte(`{"capacity": {"minQPS": 1, "minQps": 2}}`), policy.Local())
	if err == nil || !strings.Contains(err.Error(), "capacity.minQps") {
		t.Errorf("unknown capacity field: %v; want it named capacity.minQps", err)
	}
}

// mtls is the warm-up's, decoded with the step; the capacity block has
// its own (inherited from the warm-up's when unset, at Job assembly).
func TestStepConfigMTLS(t *testing.T) {
	c, err := ParseStepConfig([]byte(`{"mtls": "off", "capacity": {"minQPS": 10, "mtls": "auto"}}`), policy.Local())
	if err != nil || c.MTLS != mtls.Off || c.Capacity.MTLS != mtls.Auto {
		t.Fatalf("mtls %q, capacity.mtls %q, %v", c.MTLS, c.Capacity.MTLS, err)
	}
	_, err = ParseStepConfig([]byte(`{"mtls": "on", "capacity": {"minQPS": 10, "mtls": 1}}`), policy.Local())
	if want := `mtls: want auto, istio or off, got "on"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v; want it to say %q", err, want)
	}
}
