package warmup

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// zooPinnedSeeds are the seeds of zooPinned: the zoo's first seeds, each
// shape's runs through the real stopping rule in a few seconds.
const zooPinnedSeeds = 3

// zooPinned are the zoo's stop points for its first seeds (zooStop, default
// settings): the requests sent when the rule called the pod warm, "never"
// when it reached maxRequests, "rejected" for a slower version, per
// signal, reference and shape. Pinned before the stopping rule moved into
// package rule, and unchanged since: a change to the rule that moves a
// stop shows here in seconds, under -short, where the zoo's full goals
// (TestZooDoneWhen, 200 seeds per shape) take minutes. A change meant to
// move stops updates the pins (ZOO_PIN=1 prints them) and argues each.
var zooPinned = []struct {
	jit          bool
	against      string
	shape, stops string
}{
	{false, zooOwn, "jit-fast", "1200 1400 1400"},
	{false, zooOwn, "jit-fast+noise", "1400 1200 1400"},
	{false, zooOwn, "jit-slow", "7300 8000 9200"},
	{false, zooOwn, "jit-slow+noise", "7700 7300 9500"},
	{false, zooOwn, "cache-fill", "5800 5700 3100"},
	{false, zooOwn, "cache-fill+noise", "5900 2900 6000"},
	{false, zooOwn, "lazy-endpoints", "4600 5000 3600"},
	{false, zooOwn, "lazy-endpoints+noise", "5800 4300 4000"},
	{false, zooOwn, "warm", "600 600 600"},
	{false, zooOwn, "warm+noise", "600 600 600"},
	{false, zooOwn, "spring-steps", "900 900 900"},
	{false, zooOwn, "spring-steps+noise", "900 900 900"},
	{false, zooOwn, "never-settles", "never never never"},
	{false, zooOwn, "never-settles+noise", "never never never"},
	{false, zooStable, "jit-fast", "1200 1400 1500"},
	{false, zooStable, "jit-fast+noise", "1200 1400 1200"},
	{false, zooStable, "jit-slow", "6700 7500 8400"},
	{false, zooStable, "jit-slow+noise", "7300 6900 7600"},
	{false, zooStable, "cache-fill", "4400 4800 3900"},
	{false, zooStable, "cache-fill+noise", "4600 4200 4700"},
	{false, zooStable, "lazy-endpoints", "3500 4400 3600"},
	{false, zooStable, "lazy-endpoints+noise", "4400 3200 3400"},
	{false, zooStable, "warm", "600 600 600"},
	{false, zooStable, "warm+noise", "600 600 1000"},
	{false, zooStable, "spring-steps", "5700 6800 4400"},
	{false, zooStable, "spring-steps+noise", "5700 6900 4500"},
	{false, zooStable, "never-settles", "18600 19000 19400"},
	{false, zooStable, "never-settles+noise", "19500 19300 19000"},
	{false, zooNeighbours, "jit-fast", "1200 1400 1500"},
	{false, zooNeighbours, "jit-fast+noise", "1200 1400 1200"},
	{false, zooNeighbours, "jit-slow", "6700 7500 8400"},
	{false, zooNeighbours, "jit-slow+noise", "7300 6900 7600"},
	{false, zooNeighbours, "cache-fill", "4400 4800 3900"},
	{false, zooNeighbours, "cache-fill+noise", "4600 4200 4700"},
	{false, zooNeighbours, "lazy-endpoints", "3500 4400 3600"},
	{false, zooNeighbours, "lazy-endpoints+noise", "4400 3200 3400"},
	{false, zooNeighbours, "warm", "600 600 600"},
	{false, zooNeighbours, "warm+noise", "600 600 1000"},
	{false, zooNeighbours, "spring-steps", "900 900 900"},
	{false, zooNeighbours, "spring-steps+noise", "900 900 900"},
	{false, zooNeighbours, "never-settles", "18600 19000 19400"},
	{false, zooNeighbours, "never-settles+noise", "19500 19300 19000"},
	{true, zooOwn, "jit-fast", "1200 1700 1400"},
	{true, zooOwn, "jit-fast+noise", "1400 1200 1400"},
	{true, zooOwn, "jit-slow", "7300 8000 9200"},
	{true, zooOwn, "jit-slow+noise", "7700 7300 9500"},
	{true, zooOwn, "cache-fill", "5800 5700 3100"},
	{true, zooOwn, "cache-fill+noise", "5900 2900 6000"},
	{true, zooOwn, "lazy-endpoints", "4600 5000 3600"},
	{true, zooOwn, "lazy-endpoints+noise", "5800 4300 4000"},
	{true, zooOwn, "warm", "600 600 600"},
	{true, zooOwn, "warm+noise", "600 600 600"},
	{true, zooOwn, "spring-steps", "1400 1700 1300"},
	{true, zooOwn, "spring-steps+noise", "1100 2300 1300"},
	{true, zooOwn, "never-settles", "never never never"},
	{true, zooOwn, "never-settles+noise", "never never never"},
	{true, zooStable, "jit-fast", "1200 1700 1500"},
	{true, zooStable, "jit-fast+noise", "1200 1700 1200"},
	{true, zooStable, "jit-slow", "6700 7500 8400"},
	{true, zooStable, "jit-slow+noise", "7300 6900 7600"},
	{true, zooStable, "cache-fill", "4400 4800 3900"},
	{true, zooStable, "cache-fill+noise", "4600 4200 4700"},
	{true, zooStable, "lazy-endpoints", "3500 4400 3600"},
	{true, zooStable, "lazy-endpoints+noise", "4400 3200 3400"},
	{true, zooStable, "warm", "600 600 600"},
	{true, zooStable, "warm+noise", "600 600 1000"},
	{true, zooStable, "spring-steps", "5700 6800 5000"},
	{true, zooStable, "spring-steps+noise", "5700 6900 5000"},
	{true, zooStable, "never-settles", "18600 19000 19400"},
	{true, zooStable, "never-settles+noise", "19500 19300 19000"},
	{true, zooNeighbours, "jit-fast", "1200 1700 1500"},
	{true, zooNeighbours, "jit-fast+noise", "1200 1700 1200"},
	{true, zooNeighbours, "jit-slow", "6700 7500 8400"},
	{true, zooNeighbours, "jit-slow+noise", "7300 6900 7600"},
	{true, zooNeighbours, "cache-fill", "4400 4800 3900"},
	{true, zooNeighbours, "cache-fill+noise", "4600 4200 4700"},
	{true, zooNeighbours, "lazy-endpoints", "3500 4400 3600"},
	{true, zooNeighbours, "lazy-endpoints+noise", "4400 3200 3400"},
	{true, zooNeighbours, "warm", "600 600 600"},
	{true, zooNeighbours, "warm+noise", "600 600 1000"},
	{true, zooNeighbours, "spring-steps", "1400 1700 1300"},
	{true, zooNeighbours, "spring-steps+noise", "1100 2300 1300"},
	{true, zooNeighbours, "never-settles", "18600 19000 19400"},
	{true, zooNeighbours, "never-settles+noise", "19500 19300 19000"},
}

// TestZooPinnedStops runs the zoo's first seeds through the stopping rule
// and holds every stop to its pin.
func TestZooPinnedStops(t *testing.T) {
	cfg := Config{}.WithDefaults()
	var pins strings.Builder
	for _, pin := range zooPinned {
		shape := zooShape(t, pin.shape)
		var stops []string
		for seed := range uint64(zooPinnedSeeds) {
			run := zooStop(&cfg, shape, seed+1, pin.against, pin.jit)
			switch {
			case run.rejected:
				stops = append(stops, "rejected")
			case !run.stopped:
				stops = append(stops, "never")
			default:
				stops = append(stops, fmt.Sprint(run.stop))
			}
		}
		got := strings.Join(stops, " ")
		fmt.Fprintf(&pins, "\t{%v, %q, %q, %q},\n", pin.jit, pin.against, pin.shape, got)
		if got != pin.stops {
			t.Errorf("%s vs %s (JIT signal %v), seeds 1–%d: stops %s, pinned %s", pin.shape, pin.against, pin.jit, zooPinnedSeeds, got, pin.stops)
		}
	}
	if os.Getenv("ZOO_PIN") != "" {
		t.Log("\n" + pins.String())
	}
}
