package gate

import (
	"cmp"
	"testing"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// TestLoadBudget: however many pods warm at once, the warm-ups' rates add
// up to at most the process-wide budget.
func TestLoadBudget(t *testing.T) {
	cfg, err := ParseConfig(`{"qps": 400, "startQPS": 200}`, policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		maxConcurrent int
		maxTotal      float64
		podQPS        float64
		want          float64
	}{
		{"default budget, a pod asking more than its share", 0, 0, 400, DefaultMaxTotalQPS / DefaultMaxConcurrent},
		{"default budget, a pod within its share keeps its rate", 0, 0, warmup.DefaultQPS, warmup.DefaultQPS},
		{"a budget of 100 among 4", 4, 100, 400, 25},
		{"no budget (-1)", 4, -1, 400, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{MaxConcurrent: tc.maxConcurrent, MaxTotalQPS: tc.maxTotal}
			r.init()
			c := cfg.Config
			c.QPS = tc.podQPS
			c.StartQPS = min(200, c.QPS)
			got := r.withinBudget(c)
			if got.QPS != tc.want {
				t.Fatalf("qps %g, want %g", got.QPS, tc.want)
			}
			if got.StartQPS > got.QPS {
				t.Fatalf("startQPS %g above qps %g: the warm-up would refuse its config", got.StartQPS, got.QPS)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("config within the budget does not validate: %v", err)
			}
			if tc.maxTotal >= 0 {
				total := cmp.Or(tc.maxTotal, DefaultMaxTotalQPS)
				if sum := got.QPS * float64(r.slots.size); sum > total {
					t.Fatalf("%d warm-ups at %g: %g requests a second, above the budget %g", r.slots.size, got.QPS, sum, total)
				}
			}
		})
	}
}
