// Package latency summarizes request latencies the way danki reports them,
// for the warm-up's windows (pkg/warmup) and the demo's phases and warm-up
// curves (lab/traffic):
//
//   - Summarize: count, errors, min, mean and max (fortio's stats.Counter)
//     and exact nearest-rank percentiles p50, p90, p99, p99.9 over the raw
//     latencies. fortio's histograms interpolate within buckets; a handful
//     of cold-start requests must show in p99.9 and max as they were, so
//     the percentiles come from the sorted values instead.
//   - Percentile: the nearest-rank percentile of sorted values.
//   - Format: one way to print a latency ("0.450ms", "3.52ms", "42.0ms",
//     "1396ms", "12.5s").
//
// The package is plain Go with no dependency beyond fortio's stats.
package latency
