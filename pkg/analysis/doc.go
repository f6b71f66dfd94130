// Package analysis judges a canary's tail latency against SLOs: absolute
// percentile limits (p50 … p99.9, max, error rate), limits relative to the
// stable version over the same window, and a sequential statistical test of
// the tail that stays valid however often it is checked.
//
// Data comes from a Source (one small interface, source.go). Each source
// keeps its config block, defaults, checks and queries in its own file, in
// the style of Flagger's metric providers:
//
//   - Prometheus (prometheus.go: the client, the prometheus block and what
//     every query shares) reads Istio standard metrics (istio.go), Envoy
//     cluster metrics (envoy.go) or a custom PromQL query set (promql.go,
//     also the PromQL templates of the queries checks). Canary and stable
//     *bucket counts* are fetched with sum by (le) (increase(…[window])),
//     so the percentiles and the tail test see exactly the same requests.
//   - Fortio (fortio.go): fortio's result JSON (danki's warm-up step writes
//     the same format), with finer buckets and the raw min and max.
//   - Load (load.go): the measurement sends its own synthetic load and
//     judges every request's exact latency (over Istio mTLS to pods
//     behind a sidecar, as the warm-up: load.mtls).
//
// Percentiles are interpolated inside buckets exactly as Prometheus'
// histogram_quantile does, so they are only as fine as the buckets (Istio's
// and Envoy's defaults read a true p99 of 15 ms as ~24 ms).
//
// A verdict (verdict.go) is Pass, Fail, Inconclusive (not enough data, or
// data that cannot tell — a percentile above the top bucket bound with a
// limit above it: never a pass) or Error (could not measure, or non-finite
// data), with every number it was decided on and a one-line summary
// (summary.go); WriteTable prints it as `danki analyze` does (table.go).
// The SLO checks (checks.go) always judge latency together with the error
// rate.
//
// Config (config.go: the shared schema and its decoding) follows
// pkg/config's convention: ParseConfig decodes JSON or YAML strictly,
// WithDefaults returns a copy with defaults, Validate is pure, and Compile
// returns the Rules an Analyzer judges by. Analyzer runs one analysis;
// pkg/shift's LatencyGate wraps it for the ramp; the Argo Rollouts metric
// plugin danki/latency (package rollouts) and `danki analyze` use the same
// Config. See docs/latency.md.
//
// Inside the Argo Rollouts controller every config is a tenant's: the
// sources are built under the operator's policy (WithPolicy, policy.go):
// only the operator's Prometheus servers with their credentials, no file
// the config names, explicit URLs only within the allowed targets, the
// load caps. Without WithPolicy the strictest applies; the command line
// passes policy.Local().
//
// This package imports neither Argo nor cobra.
package analysis
