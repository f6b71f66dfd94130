package warmup

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
)

// zooRuns is the number of seeded warm-ups per shape.
const zooRuns = 200

// zooStop runs the stopping rule with cfg on one seeded run of a shape,
// window by window exactly as the coordinator does, and returns the
// requests sent when it stopped (cfg.MaxRequests when it never did).
func zooStop(cfg *Config, shape *testutil.Shape, seed uint64) int64 {
	seq := shape.Sequence(seed)
	var windows []WindowStats
	samples := make([]sample, cfg.Window)
	for n := int64(0); n+int64(cfg.Window) <= cfg.MaxRequests; {
		for i := range samples {
			samples[i] = sample{latency: seq.Next(), ok: true}
		}
		n += int64(cfg.Window)
		w := computeWindow(samples)
		w.Index, w.Requests = len(windows)+1, n
		windows = append(windows, w)
		if cfg.judge(windows, 0, false).converged {
			return n
		}
	}
	return cfg.MaxRequests
}

// zooResult is one shape's row of the zoo table.
type zooResult struct {
	shape        string
	oracle, ref  int64   // ref: what the stop is measured against
	median, p10  float64 // stop ÷ ref
	p90, worst   float64
	within, runs int
}

// The warm-up zoo (docs/warmup.md): with default settings, on every
// cold-start shape, alone and with a noisy neighbour, how often the
// warm-up stops within 1.5× of the shape's oracle and not before 0.9× of
// it, over seeded runs. A pod warm from the start must stop at the rule's
// minimum (Config.MinStop), as must one whose oracle lies below it; one
// that never settles must never be called warm.
func TestZooStopsNearTheOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("seeded simulation: 12 shapes × 200 warm-ups")
	}
	cfg := Config{}.WithDefaults()
	minimum := cfg.MinStop()
	var rows []zooResult
	for _, shape := range testutil.Zoo() {
		oracle := shape.Oracle(cfg.MaxRequests, 0.1, 200, 50)
		r := zooResult{shape: shape.Name, oracle: oracle, ref: max(oracle, minimum), runs: zooRuns}
		var ratios []float64
		for seed := range uint64(zooRuns) {
			stop := zooStop(&cfg, shape, seed+1)
			if shape.Never {
				ratios = append(ratios, float64(stop)/float64(cfg.MaxRequests))
				if stop >= cfg.MaxRequests {
					r.within++
				}
				continue
			}
			ratio := float64(stop) / float64(r.ref)
			ratios = append(ratios, ratio)
			if ratio >= 0.9 && ratio <= 1.5 {
				r.within++
			}
		}
		slices.Sort(ratios)
		r.median, r.p10, r.p90 = ratios[len(ratios)/2], ratios[len(ratios)/10], ratios[len(ratios)*9/10]
		r.worst = ratios[len(ratios)-1]
		if shape.Never || ratios[0] < 1/r.worst {
			r.worst = ratios[0]
		}
		rows = append(rows, r)
	}
	t.Log("\n" + zooTable(rows, minimum))
	// The goal (stop within 0.9–1.5× of the oracle in ≥ 90 % of runs) is
	// met by the shapes below; docs/warmup.md gives the others' shortfall
	// and its cause. Their floors guard against a rule that gets worse.
	floor := map[string]int{"warm": 90, "never-settles": 90, "jit-slow": 85, "jit-fast": 70, "cache-fill": 40, "lazy-endpoints": 25}
	for _, r := range rows {
		want := floor[strings.TrimSuffix(r.shape, "+noise")]
		if r.within*100 < r.runs*want {
			t.Errorf("%s: stopped within 0.9–1.5× of %d requests in %d of %d runs, want ≥ %d %%", r.shape, r.ref, r.within, r.runs, want)
		}
	}
}

func zooTable(rows []zooResult, minimum int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| shape | oracle (requests) | stop ÷ oracle: median | p10–p90 | worst | runs in 0.9–1.5× |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		oracle := fmt.Sprint(r.oracle)
		switch {
		case r.oracle == math.MaxInt64:
			oracle = "never (must not stop)"
		case r.ref > r.oracle:
			oracle = fmt.Sprintf("%d (minimum %d)", r.oracle, minimum)
		}
		within := fmt.Sprintf("%.0f %%", 100*float64(r.within)/float64(r.runs))
		if r.oracle == math.MaxInt64 {
			within += " never stopped"
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f–%.2f | %.2f | %s |\n", r.shape, oracle, r.median, r.p10, r.p90, r.worst, within)
	}
	return b.String()
}
