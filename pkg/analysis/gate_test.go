package analysis

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// fixedSource returns a canned sample (or error).
type fixedSource struct {
	sample *Sample
	err    error
	window time.Duration
}

func (f *fixedSource) Fetch(_ context.Context, w time.Duration) (*Sample, error) {
	f.window = w
	return f.sample, f.err
}

// shiftGate is the interface pkg/shift declares; Gate must satisfy it
// without either package importing the other.
type shiftGate interface {
	Check(ctx context.Context) (pass bool, reason string, err error)
}

var _ shiftGate = (*Gate)(nil)

func TestGateMapsVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	healthy := sampleHistogram(rng, typical, 1000)
	slowDist := typical
	slowDist.scale = 4
	slow := sampleHistogram(rng, slowDist, 1000)
	cfg := promConfig(SLO{P99: dur("150ms")})
	cfg.Window = Window{} // cumulative from the gate's creation

	for _, tc := range []struct {
		name     string
		src      *fixedSource
		pass     bool
		errIs    error
		inReason string
	}{
		{"pass", &fixedSource{sample: &Sample{Canary: *side("canary", healthy)}}, true, nil, "Pass: all SLOs hold"},
		{"fail", &fixedSource{sample: &Sample{Canary: *side("canary", slow)}}, false, nil, "Fail: p99"},
		{"inconclusive", &fixedSource{sample: &Sample{Canary: *side("canary", cumulative(istioBuckets, make([]float64, 20)))}}, false, ErrInconclusive, "canary has 0 requests"},
		{"error", &fixedSource{sample: &Sample{}, err: errors.New("prometheus at http://x unreachable")}, false, nil, "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := now
			g, err := NewGate(cfg, WithSource(tc.src), WithLogger(quiet), WithClock(func() time.Time { return clock }))
			if err != nil {
				t.Fatal(err)
			}
			clock = now.Add(90 * time.Second)
			pass, reason, err := g.Check(context.Background())
			if pass != tc.pass || !strings.Contains(reason, tc.inReason) {
				t.Errorf("pass=%v reason=%q, want pass=%v reason containing %q", pass, reason, tc.pass, tc.inReason)
			}
			switch tc.name {
			case "pass", "fail":
				if err != nil {
					t.Errorf("err = %v, want nil for a verdict", err)
				}
			case "inconclusive":
				if !errors.Is(err, ErrInconclusive) {
					t.Errorf("err = %v, want ErrInconclusive", err)
				}
			case "error":
				if err == nil || errors.Is(err, ErrInconclusive) || !strings.Contains(err.Error(), "unreachable") {
					t.Errorf("err = %v, want the fetch error", err)
				}
			}
			if tc.src.window != 90*time.Second && tc.name != "error" {
				t.Errorf("window %v, want 90s since the gate was created", tc.src.window)
			}
			if g.Last().Phase == "" {
				t.Error("Last() has no verdict")
			}
		})
	}
}

func TestNewGateRejectsBadConfig(t *testing.T) {
	_, err := NewGate(Config{Source: SourceIstio})
	if err == nil || !strings.Contains(err.Error(), "istio: missing") {
		t.Fatalf("err = %v", err)
	}
}
