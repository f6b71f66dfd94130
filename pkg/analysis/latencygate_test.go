package analysis_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/shift"
)

// The ramp's gate is shift.LatencyGate (analysis.Gate repeated it and is
// gone): these tests keep what the analysis package promised its gate —
// verdicts mapped to pass / breach / no verdict, with ErrInconclusive for
// too little data — from this side of the import.

// gateSource returns a canned sample (or error) and records the window.
type gateSource struct {
	sample *analysis.Sample
	err    error
	window time.Duration
}

func (s *gateSource) Fetch(_ context.Context, w time.Duration) (*analysis.Sample, error) {
	s.window = w
	return s.sample, s.err
}

// gateSide is a canary of n requests: n-slow of them under 10 ms, slow
// ones between 500 ms and 1 s.
func gateSide(n, slow float64) analysis.Side {
	h := analysis.Histogram{Buckets: []analysis.Bucket{
		{UpperBound: 10, Count: n - slow}, {UpperBound: 500, Count: n - slow},
		{UpperBound: 1000, Count: n}, {UpperBound: math.Inf(+1), Count: n},
	}}
	return analysis.Side{Name: "canary", Latency: h, LatencyFrom: "test",
		Requests: analysis.Measured{From: "test:requests", Value: n, Found: true},
		Errors:   analysis.Measured{From: "test:errors"}}
}

func gateConfig() analysis.Config {
	p99 := config.Duration(150 * time.Millisecond)
	return analysis.Config{
		Source: analysis.SourceEnvoy, Prometheus: &analysis.PrometheusConfig{Address: "http://127.0.0.1:9"},
		Envoy: &analysis.EnvoyConfig{CanaryCluster: "c", StableCluster: "s"},
		SLO:   analysis.SLO{P99: &p99},
	}
}

func TestLatencyGateMapsVerdicts(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name     string
		src      *gateSource
		pass     bool
		inReason string
	}{
		{"pass", &gateSource{sample: &analysis.Sample{Canary: gateSide(1000, 0)}}, true, "Pass: all SLOs hold"},
		{"fail", &gateSource{sample: &analysis.Sample{Canary: gateSide(1000, 50)}}, false, "Fail: p99"},
		{"inconclusive", &gateSource{sample: &analysis.Sample{Canary: gateSide(0, 0)}}, false, "canary has 0 requests"},
		{"error", &gateSource{sample: &analysis.Sample{}, err: errors.New("prometheus at http://x unreachable")}, false, "unreachable"},
		{"empty sample", &gateSource{sample: &analysis.Sample{}}, false, "returned an empty sample"},
		{"nil sample", &gateSource{}, false, "returned no sample (nil)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			g, err := shift.NewLatencyGate(gateConfig(), analysis.WithSource(tc.src), analysis.WithLogger(quiet),
				analysis.WithClock(func() time.Time { return now.Add(90 * time.Second) }))
			if err != nil {
				t.Fatal(err)
			}
			pass, reason, err := g.Check(context.Background(), now)
			if pass != tc.pass || !strings.Contains(reason, tc.inReason) {
				t.Errorf("pass=%v reason=%q, want pass=%v reason containing %q", pass, reason, tc.pass, tc.inReason)
			}
			switch tc.name {
			case "pass", "fail":
				if err != nil {
					t.Errorf("err = %v, want nil for a verdict", err)
				}
				if tc.src.window != 90*time.Second {
					t.Errorf("window %v, want the 90s since the start passed in", tc.src.window)
				}
			case "inconclusive":
				if !errors.Is(err, analysis.ErrInconclusive) {
					t.Errorf("err = %v, want ErrInconclusive", err)
				}
			default:
				if err == nil || errors.Is(err, analysis.ErrInconclusive) || !strings.Contains(err.Error(), tc.inReason) {
					t.Errorf("err = %v, want the measuring error", err)
				}
			}
		})
	}
}

func TestLatencyGateRejectsBadConfig(t *testing.T) {
	_, err := shift.NewLatencyGate(analysis.Config{Source: analysis.SourceIstio})
	if err == nil || !strings.Contains(err.Error(), "istio: missing") {
		t.Fatalf("err = %v", err)
	}
}
