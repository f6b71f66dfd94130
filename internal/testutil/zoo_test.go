package testutil

import (
	"math"
	"testing"
)

// The oracles order the shapes as their definitions say: a warm pod is
// warm at once, slow JIT takes longer than fast JIT, a cache is warm for
// p99 only once misses are rarer than 1 %, and a noisy shape is warm when
// its quiet twin is.
func TestZooOracles(t *testing.T) {
	got := map[string]int64{}
	for _, s := range Zoo() {
		got[s.Name] = s.Oracle(20000, 0.1, 200, 50)
		t.Logf("%-22s oracle %d requests", s.Name, got[s.Name])
	}
	if got["warm"] != 0 || got["warm+noise"] != 0 {
		t.Errorf("warm shapes: oracle %d and %d, want 0 (warm from the first request)", got["warm"], got["warm+noise"])
	}
	if got["never-settles"] != math.MaxInt64 {
		t.Errorf("never-settles: oracle %d, want never", got["never-settles"])
	}
	if !(got["jit-fast"] > 200 && got["jit-fast"] < got["jit-slow"]) {
		t.Errorf("jit-fast oracle %d, jit-slow %d: want 200 < fast < slow", got["jit-fast"], got["jit-slow"])
	}
	if o := got["cache-fill"]; o < 3*800 || o > 7*800 {
		t.Errorf("cache-fill oracle %d, want 3–7 × its 800 keys", o)
	}
	for _, name := range []string{"jit-fast", "jit-slow", "cache-fill", "lazy-endpoints"} {
		if got[name] != got[name+"+noise"] {
			t.Errorf("%s: oracle %d alone, %d with noise: want the same", name, got[name], got[name+"+noise"])
		}
	}
}
