package warmup

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRandIntOverTheWholeRange: a span wider than int64 used to reach
// rand's IntN with a non-positive n (a panic text/template turned into a
// failed render); it draws now.
func TestRandIntOverTheWholeRange(t *testing.T) {
	cfg := Config{Requests: []RequestSpec{{Path: "/{{randInt -9223372036854775808 9223372036854775807}}/{{randInt -5 -5}}"}}}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set, err := newRequestSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := set.newGenerator(1, 2, &atomic.Int64{})
	seen := map[string]bool{}
	for range 20 {
		r, err := g.next()
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(r.path, "/")
		if _, err := strconv.ParseInt(parts[1], 10, 64); err != nil || parts[2] != "-5" {
			t.Fatalf("rendered %q", r.path)
		}
		seen[parts[1]] = true
	}
	if len(seen) < 19 {
		t.Errorf("%d distinct draws of 20 over the whole range", len(seen))
	}
}

// TestTemplateErrorsNameTheirField: every templated field's parse errors
// and budget are reported by Validate under its own path, gRPC metadata
// included (its parse errors used to surface only when the run started).
func TestTemplateErrorsNameTheirField(t *testing.T) {
	over := strings.Repeat("{{randString 4096}}", 17)
	for want, r := range map[string]RequestSpec{
		"requests[0].grpc.metadata[x-id]: 1:3: nope is not a function here":                      {GRPC: &GRPCRequest{Method: "a.B/C", Metadata: map[string]string{"x-id": "{{nope}}"}}},
		"requests[0].grpc.metadata[x-id]: fails when rendered: renders to more than 65536 bytes": {GRPC: &GRPCRequest{Method: "a.B/C", Metadata: map[string]string{"x-id": over}}},
		"requests[0].grpc.message: fails when rendered: renders to more than 65536 bytes":        {GRPC: &GRPCRequest{Method: "a.B/C", Message: `{"a": "` + over + `"}`}},
		"requests[0].body: fails when rendered: renders to more than 65536 bytes":                {Method: "POST", Path: "/", Body: over},
		"requests[0].headers: fails when rendered: renders to more than 65536 bytes":             {Path: "/", Headers: map[string]string{"X-Id": over}},
		"requests[0].path: 1:4: randString: n: 4097 is outside 0..4096":                          {Path: "/{{randString 4097}}"},
	} {
		err := Config{AllowSideEffects: true, Requests: []RequestSpec{r}}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %s", err, want)
		}
	}
}
