package analysis

import (
	"strings"
	"testing"

	"github.com/danki-dev/danki/pkg/policy"
)

// A load block is held to the caps of the policy it runs under, not to the
// default caps: Compile (and ParseConfig) knows no policy, NewAnalyzer
// checks the load against the one WithPolicy gives. An operator who raised
// --max-qps (the command line: --cap-qps) may ask for more than 500.
func TestLoadCapsAreThePolicys(t *testing.T) {
	raw := `{"source": "load", "load": {"urls": ["http://10.0.0.5:8080"], "qps": 800, "count": 300000, "warmUp": false}, "slo": {"p99": "1s"}}`
	c, err := ParseConfig([]byte(raw))
	if err != nil {
		t.Fatalf("ParseConfig of load.qps 800, count 300000: %v (the caps are the policy's, not the parser's)", err)
	}
	raised := policy.Local()
	raised.Limits.QPS, raised.Limits.Requests = 1000, 400_000
	if _, err := NewAnalyzer(c, WithLogger(quietLoadLog), WithPolicy(raised)); err != nil {
		t.Errorf("under caps of 1000 qps and 400000 requests: %v", err)
	}
	_, err = NewAnalyzer(c, WithLogger(quietLoadLog), WithPolicy(policy.Local()))
	for _, want := range []string{"load.qps: 800 is above the operator's cap of 500", "--max-qps", "load.count: 300000", "--max-requests"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("under the default caps: %v\nwant %q", err, want)
		}
	}
}
