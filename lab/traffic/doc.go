// Package traffic holds the lab-independent pieces of `make demo` and
// `make bench`: steady user traffic, per-phase latency summaries, the tables
// that put a baseline rollout next to a danki rollout, and the latency chart.
//
// What users feel during a rollout is the latency of their own requests, so
// the demo measures it from the client side, request by request:
//
//   - StartTraffic sends steady traffic at a fixed QPS with pkg/load's
//     paced fortio runner (periodic driving fhttp clients, one per
//     connection) and records every request
//     as a Sample: start time, latency and HTTP status (-1 when no response
//     came). danki drives periodic with its own Runnable and collects
//     samples through periodic's AccessLogger, so nothing is left out, not
//     even the first request on each connection, which `fortio load` sends
//     as an unrecorded warm-up call. Pacing does not catch up after a stall
//     (fortio's NoCatchUp): a slow pod shows as latency and as achieved QPS
//     below the asked QPS, not as a burst afterwards.
//   - Summarize cuts samples into phases (before / during / after a rollout,
//     half-open [From, To) intervals), each a latency.Summary: exact
//     percentiles computed from the raw latencies, not from histogram
//     buckets: a handful of cold-start requests must show in p99.9 and max
//     as they were.
//   - WriteTable puts scenarios side by side (rows = phases, columns = p50,
//     p99, p99.9, max and errors per scenario, then the rollout durations), as
//     aligned text or Markdown, shaped like the field reports' tables;
//     Scenario and PhaseStats marshal to JSON for results files.
//     WarmupCurve and WriteWarmupTable give the "requests so far vs
//     latency" table (request 1, 2–10, 11–100, …) of the field reports.
//   - WriteChart and SaveChart draw user latency over time (per-second p50,
//     p99 and max, log scale) with one panel per scenario and labelled
//     vertical lines at rollout steps, as SVG or PNG with gonum.org/v1/plot.
//
// The package knows nothing about the lab, Kubernetes or Argo Rollouts: the
// demo orchestration starts the traffic, notes phase boundaries and markers
// while it drives the rollouts, and hands the samples to this package.
package traffic
