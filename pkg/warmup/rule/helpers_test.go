package rule

import "time"

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// sample is one completed request, as the warm-up records it.
type sample struct {
	latency time.Duration
	ok      bool
}

// computeWindow is the warm-up's window of samples (NewWindow).
func computeWindow(samples []sample) Window {
	lat := make([]time.Duration, len(samples))
	errs := 0
	for i, s := range samples {
		lat[i] = s.latency
		if !s.ok {
			errs++
		}
	}
	return NewWindow(lat, errs)
}

// defaults is the rule's config from a warm-up config left at its
// defaults, without stable (pkg/warmup's TestRuleConfigOfDefaults holds
// the two together).
func defaults() Config {
	return Config{
		Window: 100, StableWindows: 3, MinRequests: 300, MaxRequests: 20000,
		Tolerance: 0.1, AbsoluteTolerance: time.Millisecond, MaxErrorRatio: 0.01,
		StableRatio: 1.2, RejectRatio: 2, RejectFloor: 5 * time.Millisecond,
		AcceptNearStable: true,
	}
}

// defaultsWithMax is defaults with maxRequests n.
func defaultsWithMax(n int64) Config {
	c := defaults()
	c.MaxRequests = n
	return c
}
