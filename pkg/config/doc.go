// Package config is danki's one configuration convention, shared by the
// plugins' configs (danki/warmup, danki/istio, danki/latency) and the CLI's
// --config files:
//
//   - Decode reads JSON or YAML strictly: unknown or duplicate fields, field
//     names in the wrong case and text after the document are errors that
//     name the field path, so a typo never silently falls back to a default.
//   - Duration is the one duration type: "250ms", "1m30s", and the
//     Prometheus units "1d", "1w", "1y" where windows are meant.
//   - Number is a number written as a JSON number or as a string (Argo's
//     {{args.…}} substitution produces strings).
//   - Errors collects every problem, each prefixed with its field path
//     ("slo.p99: …"), and joins them with errors.Join.
//
// Each config type follows the same three steps: Decode, then WithDefaults
// (returns a copy with zero values filled in), then Validate (pure: it
// reports every problem and changes nothing). Configs that compile into
// another form (pkg/analysis rules) do it in a side-effect-free function
// that returns the compiled value.
package config
