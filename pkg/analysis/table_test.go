package analysis

import (
	"bytes"
	"testing"
)

// TestVerdictWriteTable pins the table danki analyze prints (its tests
// check lines of it against a fake Prometheus; this pins every byte).
func TestVerdictWriteTable(t *testing.T) {
	bounds := []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000}
	canary := side("canary", cumulative(bounds, []float64{100, 2000, 4000, 2500, 1350, 45, 5, 0, 0, 0}))
	canary.Errors.Value, canary.Errors.Found = 10, true
	stable := side("stable", cumulative(bounds, []float64{100, 2000, 4000, 2500, 1350, 45, 5, 0, 0, 0}))
	cfg := promConfig(SLO{P50: dur("10ms"), P99: dur("250ms"), MaxErrorRate: number("1%")})
	cfg.SLO.Ratio.P99 = number("1.5")
	v := evaluate(mustRules(t, cfg), &Sample{Canary: *canary, Stable: stable}, "5m")

	var b bytes.Buffer
	if err := v.WriteTable(&b, cfg.Source); err != nil {
		t.Fatal(err)
	}
	want := `danki analyze: source envoy, window 5m

            canary  stable  canary/stable  SLO                     result
requests    10000   10000                                          
error rate  0.10%   0.00%                  ≤ 1.00%                 pass
p50         8.62ms  8.62ms  1.00           ≤ 10.0ms                pass
p90         32.4ms  32.4ms  1.00                                   
p95         41.7ms  41.7ms  1.00                                   
p99         49.1ms  49.1ms  1.00           ≤ 250ms, ≤ 1.5× stable  pass
p99.9       94.4ms  94.4ms  1.00                                   

  PASS         p50 8.62ms ≤ 10.0ms
  PASS         p99 49.1ms ≤ 250ms
  PASS         p99 canary/stable 1.00 (49.1ms / 49.1ms) ≤ 1.5
  PASS         error rate 0.10% ≤ 1.00% (10 of 10000)

` + v.Summary + "\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// A verdict without data (an Error before any fetch) still prints
	// every row, with dashes.
	b.Reset()
	if err := (Verdict{Phase: Error, Window: "5m", Summary: "Error: prometheus down"}).WriteTable(&b, SourceIstio); err != nil {
		t.Fatal(err)
	}
	want = `danki analyze: source istio, window 5m

          canary  stable  canary/stable  SLO  result
requests  0       -                           
p50       -       -                           
p90       -       -                           
p95       -       -                           
p99       -       -                           
p99.9     -       -                           

Error: prometheus down
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
