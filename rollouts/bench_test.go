package rollouts

import (
	"testing"
	"time"
)

// BenchmarkRPCTrafficRouter measures what one controller reconcile costs in
// danki/istio: SetWeight then VerifyWeight, each a go-plugin net/rpc round
// trip (gob-encoding the whole Rollout) into the adapter, which reads and,
// when the ramp moves, writes the VirtualService (fake clientset here, so
// the figure is danki's overhead, not the API server's).
func BenchmarkRPCTrafficRouter(b *testing.B) {
	f := newTRFixture(b, hostVS())
	ro := trRollout(hostConfig)
	b.ReportAllocs()
	for b.Loop() {
		mustOK(b, "SetWeight", f.plugin.SetWeight(ro, 20, nil))
		if _, err := f.plugin.VerifyWeight(ro, 20, nil); err.HasError() {
			b.Fatal(err)
		}
		f.clock.Add(time.Minute)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "µs/call")
}

// BenchmarkRPCTrafficRouterType is the bare go-plugin round trip, for
// comparison.
func BenchmarkRPCTrafficRouterType(b *testing.B) {
	f := newTRFixture(b, hostVS())
	for b.Loop() {
		if f.plugin.Type() != TrafficRouterName {
			b.Fatal("wrong type")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
}
