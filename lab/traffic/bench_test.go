package traffic

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTrafficAchievedQPS sends traffic to a local server for 3 s per
// iteration and reports achieved/asked QPS (1 = the generator keeps up) and
// the achieved rate. The server answers at once, so a shortfall is the
// generator's (or the machine's), not the target's.
func BenchmarkTrafficAchievedQPS(b *testing.B) {
	const runFor = 3 * time.Second
	for _, qps := range []float64{500, 2000} {
		b.Run(fmt.Sprintf("qps=%g", qps), func(b *testing.B) {
			srv := startTestServer(b, 0, 0)
			var ratio, achieved float64
			for range b.N {
				tr, err := StartTraffic(b.Context(), TrafficConfig{URL: srv.URL, QPS: qps})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(runFor)
				res := tr.Stop()
				if res.Errors > 0 {
					b.Fatalf("%d errors of %d requests", res.Errors, res.Requests)
				}
				ratio += res.AchievedQPS / res.AskedQPS
				achieved += res.AchievedQPS
			}
			b.ReportMetric(ratio/float64(b.N), "achieved/asked")
			b.ReportMetric(achieved/float64(b.N), "achieved-qps")
		})
	}
}

// BenchmarkSummarize summarizes a 10-minute run at 2,000 qps (1.2 M samples)
// into three phases.
func BenchmarkSummarize(b *testing.B) {
	const n = 1_200_000
	samples := make([]Sample, n)
	for i := range samples {
		samples[i] = Sample{
			Start:   t0.Add(time.Duration(i) * 500 * time.Microsecond),
			Latency: time.Duration(1000+(i*7919)%50000) * time.Microsecond,
			Code:    200,
		}
	}
	phases := []Phase{
		{Name: "before", To: t0.Add(2 * time.Minute)},
		{Name: "during", From: t0.Add(2 * time.Minute), To: t0.Add(8 * time.Minute)},
		{Name: "after", From: t0.Add(8 * time.Minute)},
	}
	b.ReportAllocs()
	for b.Loop() {
		Summarize(samples, phases)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/sample")
}

// BenchmarkRecorderReport is the cost of recording one request, called
// concurrently as periodic does; B/op is the memory each sample takes.
func BenchmarkRecorderReport(b *testing.B) {
	r := newRecorder(time.Now())
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Report(b.Context(), 0, 0, start, 0.0042, true, "200")
		}
	})
}
