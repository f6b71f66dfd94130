package analysis

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestVerdictJSONHasEveryNumber(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	cfg := promConfig(SLO{P99: dur("250ms"), MaxErrorRate: number("0.01"), Ratio: RatioSLO{P99: number("1.5")}})
	cfg.TailTest = &TailTestConfig{}
	r := mustRules(t, cfg)
	c, s := side("canary", sampleHistogram(rng, typical, 1000)), side("stable", sampleHistogram(rng, typical, 9000))
	c.Errors = Measured{From: "e", Value: 3, Found: true}
	v := evaluate(r, &Sample{Canary: *c, Stable: s}, "5m")
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"phase":"Pass"`, `"p50Ms":`, `"p999Ms":`, `"errorRate":0.003`, `"tailTest":{`, `"eValue":`, `"thresholdMs":100`, `"canaryAbove":`, `"name":"ratio:p99"`, `"count":1000`, `"count":9000`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("verdict JSON lacks %s: %s", key, b)
		}
	}
	// No NaN can reach JSON: an empty stable side still marshals.
	v = evaluate(r, &Sample{Canary: *c, Stable: &Side{Name: "stable", LatencyFrom: "q"}}, "5m")
	if _, err := json.Marshal(v); err != nil {
		t.Fatalf("marshal with missing data: %v", err)
	}
	if v.Stable.P99 != nil {
		t.Errorf("stable p99 %v, want nil for no data", *v.Stable.P99)
	}
}
