package warmup

import (
	"fmt"
	"strings"
	"testing"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// TestSizesAreCappedWhateverUntilConverged: every size a tenant's config
// turns into memory before a request is sent is refused at validation,
// naming the field, in the step config and the gate's annotation alike
// (both validate through Config.Validate). window 10,000,000,000 with
// untilConverged false was once accepted and its window buffer
// (make([]sample, 0, window)) killed the plugin.
func TestSizesAreCappedWhateverUntilConverged(t *testing.T) {
	mix := func(n int) string {
		reqs := make([]string, n)
		for i := range reqs {
			reqs[i] = fmt.Sprintf(`{"path": "/p%d"}`, i)
		}
		return strings.Join(reqs, ",")
	}
	headers := func(n int) string {
		h := make([]string, n)
		for i := range h {
			h[i] = fmt.Sprintf(`"X-H%d": "v"`, i)
		}
		return strings.Join(h, ",")
	}
	for _, c := range []struct {
		name, raw string
		want      []string // in the error; none: accepted
	}{
		{"window far above maxRequests, fixed count", `{"window": 10000000000, "untilConverged": false}`, []string{"window: 10000000000 is above maxRequests 20000"}},
		{"window far above maxRequests, converging", `{"window": 10000000000}`, []string{"window: 10000000000 is above maxRequests"}},
		{"window above a fixed count's maxRequests", `{"window": 150, "maxRequests": 120, "untilConverged": false}`, []string{"window: 150 is above maxRequests 120"}},
		{"stableWindows far above maxRequests", `{"stableWindows": 4611686018427387904, "untilConverged": false}`, []string{"stableWindows: 4611686018427387904 is above maxRequests"}},
		{"stableWindows whose product with window wraps", `{"window": 10, "stableWindows": 1844674407370955162}`, []string{"stableWindows: 1844674407370955162 is above maxRequests"}},
		{"too many requests", `{"requests": [` + mix(MaxRequestMix+1) + `]}`, []string{fmt.Sprintf("requests: %d entries is above danki's limit of %d", MaxRequestMix+1, MaxRequestMix)}},
		{"too many headers", `{"requests": [{"path": "/", "headers": {` + headers(MaxRequestHeaders+1) + `}}]}`, []string{fmt.Sprintf("requests[0].headers: %d headers is above danki's limit of %d", MaxRequestHeaders+1, MaxRequestHeaders)}},
		{"too many gRPC metadata keys", `{"requests": [{"grpc": {"method": "a.B/C", "metadata": {` + headers(MaxRequestHeaders+1) + `}}}]}`, []string{"requests[0].grpc.metadata: 33 keys is above danki's limit of 32"}},
		// What stays valid: the limits themselves, and a fixed count below
		// the defaults' window and stableWindows.
		{"the limits", `{"requests": [` + mix(MaxRequestMix) + `], "maxRequests": 200000, "window": 200000, "untilConverged": false}`, nil},
		{"a fixed count below the default window", `{"maxRequests": 50, "untilConverged": false}`, nil},
		{"a fixed count of 2 with the default stableWindows", `{"maxRequests": 2, "untilConverged": false}`, nil},
		{"maxRequests below window × stableWindows, converging", `{"maxRequests": 50}`, []string{"maxRequests: 50 leaves no room to converge: raise it to at least 300"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stepErr := ParseStepConfig([]byte(c.raw), policy.Policy{})
			var gate Config
			gateErr := decodeAndValidate(t, c.raw, &gate)
			for _, err := range []error{stepErr, gateErr} {
				if len(c.want) == 0 {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					continue
				}
				if err == nil {
					t.Fatalf("accepted; want %q", c.want)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\nwant it to contain %q", err, w)
					}
				}
			}
		})
	}
}

// decodeAndValidate reads raw as the gate reads a pod's annotation
// (pkg/gate.ParseConfig, which this package's tests cannot import): a
// strict decode under a tenant's policy, the defaults, Validate.
func decodeAndValidate(t *testing.T, raw string, c *Config) error {
	t.Helper()
	if err := config.Decode([]byte(raw), c); err != nil {
		return err
	}
	c.Policy = &policy.Policy{}
	*c = c.WithDefaults()
	return c.Validate()
}
