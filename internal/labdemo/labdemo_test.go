package labdemo

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/demo"
	"github.com/danki-dev/danki/pkg/latency"
)

// A pod whose latency decays from 200 ms to 4 ms over its first 1,500
// requests and then stays there (with noise and a rare outlier): the oracle
// puts "warm" at the 1,500-request window boundary, not before, and not far
// after.
func TestFindPlateau(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var samples []demo.Sample
	for i := range 5000 {
		ms := 4.0 + rng.Float64()
		if i < 1500 {
			ms += 196 * float64(1500-i) / 1500
		}
		if rng.IntN(500) == 0 {
			ms = 30 // a rare slow request, also when warm
		}
		if i >= 4900 && i < 5000 {
			ms *= 3 // a GC-heavy last window: noise, not a cold pod
		}
		samples = append(samples, demo.Sample{Start: start.Add(time.Duration(i) * 10 * time.Millisecond), Latency: time.Duration(ms * float64(time.Millisecond)), Code: 200})
	}
	o := findPlateau(samples, 100, 0.2)
	if o.WarmAfter < 1300 || o.WarmAfter > 1600 {
		t.Fatalf("warm after %d requests, want about 1,500 (plateau p50 %s, p99 %s)", o.WarmAfter, o.PlateauP50, o.PlateauP99)
	}
	if o.PlateauP50 < 4*time.Millisecond || o.PlateauP50 > 5*time.Millisecond {
		t.Fatalf("plateau p50 %s, want 4–5 ms", o.PlateauP50)
	}
	if len(o.Curve) == 0 || o.Curve[0].Max < 190*time.Millisecond {
		t.Fatalf("warm-up curve %+v: want the cold first request in it", o.Curve)
	}
	// A pod that is warm from the start is warm after 0 requests.
	for i := range samples {
		samples[i].Latency = 4 * time.Millisecond
	}
	if o := findPlateau(samples, 100, 0.2); o.WarmAfter != 0 {
		t.Fatalf("an always-warm pod is warm after %d requests, want 0", o.WarmAfter)
	}
}

func TestRatios(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	res := &Result{
		Scenarios: []demo.Scenario{
			{Name: "baseline", Phases: []demo.PhaseStats{{Name: "before", Summary: latency.Summary{Count: 100, P99: ms(5), Max: ms(9)}}, {Name: "during", Summary: latency.Summary{Count: 100, P99: ms(400), P999: ms(900), Max: ms(1200)}}, {Name: "after", Summary: latency.Summary{Count: 100, P999: ms(60), Max: ms(200)}}}},
			{Name: "danki", Phases: []demo.PhaseStats{{Name: "before", Summary: latency.Summary{Count: 100, P99: ms(5), Max: ms(10)}}, {Name: "during", Summary: latency.Summary{Count: 100, P99: ms(8), P999: ms(20), Max: ms(30)}}, {Name: "after", Summary: latency.Summary{Count: 100, P999: ms(10), Max: ms(10)}}}},
		},
		Runs:    []Run{{}, {WarmupRequests: 2000}},
		Oracle:  &Oracle{WarmAfter: 1600},
		Traffic: demo.Result{AskedQPS: 80, AchievedQPS: 78},
	}
	got := map[string]float64{}
	for _, r := range ratios(res) {
		got[r.Name] = r.Value
	}
	want := map[string]float64{
		"danki p99 during rollout ÷ warm steady state": 1.6,
		"danki max during rollout ÷ warm steady state": 3,
		"baseline ÷ danki, p99 during rollout":         50,
		"baseline ÷ danki, p99.9 during rollout":       45,
		"baseline ÷ danki, max during rollout":         40,
		"baseline ÷ danki, p99.9 after rollout":        6,
		"baseline ÷ danki, max after rollout":          20,
		"danki warm-up length ÷ oracle":                1.25,
		"user traffic achieved ÷ asked QPS":            0.975,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %t), want %v", name, g, ok, w)
		}
	}
	res.Ratios = ratios(res)
	var b strings.Builder
	if err := WriteReport(&b, demo.Markdown, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "baseline ÷ danki, p99 during rollout") || !strings.Contains(b.String(), "50.00") {
		t.Fatalf("report lacks the ratios:\n%s", b.String())
	}
}
