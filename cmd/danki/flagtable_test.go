package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
)

// Every table entry is a flag of danki warmup with the table's usage and
// shorthand, and a few defaults --help has always shown stay as they were.
func TestWarmupConfigFlagsRegistered(t *testing.T) {
	cmd, _ := warmupCmd()
	fl := cmd.Flags()
	for _, e := range warmupConfigFlags {
		f := fl.Lookup(e.flag)
		if f == nil {
			t.Errorf("--%s (%s) is not a flag of danki warmup", e.flag, e.field)
			continue
		}
		if !e.byHand && (f.Usage != e.usage || f.Shorthand != e.short) {
			t.Errorf("--%s: usage %q, shorthand %q; the table has %q, %q", e.flag, f.Usage, f.Shorthand, e.usage, e.short)
		}
	}
	for name, def := range map[string]string{
		"connections": "4", "qps": "20", "start-qps": "0", "abs-tolerance": "1ms", "deadline": "10m0s", "max-requests": "20000",
		"max-error-ratio": "0.01", "until-converged": "true", "jit-metrics": "true", "jit-metrics-path": "/actuator/prometheus",
		"marker-header": "X-Danki-Warmup", "grpc-safe-method": "[]", "allow-side-effects": "false", "seed": "0",
	} {
		if f := fl.Lookup(name); f == nil || f.DefValue != def {
			t.Errorf("--%s: default %v, want %s", name, f, def)
		}
	}
	if f := fl.ShorthandLookup("c"); f == nil || f.Name != "connections" {
		t.Errorf("-c is %v, want --connections", f)
	}
	mirror, _, err := newWarmupCmd().Find([]string{"mirror"})
	if err != nil {
		t.Fatal(err)
	}
	if f := mirror.Flags().Lookup("max-requests"); f == nil || f.Usage != "cap of mirrored requests: fail when they did not converge" {
		t.Errorf("danki warmup mirror --max-requests: %v", f)
	}
}

// The table's paths follow the flags' names (the camelCase flagField),
// but for the few fields named otherwise, and no two flags set one field.
func TestWarmupConfigFlagsFields(t *testing.T) {
	otherwise := map[string]string{
		"abs-tolerance": "absoluteTolerance", "grpc-safe-method": "grpcSafeMethods", "jit-metrics": "jitMetrics.enabled",
		"jit-metrics-port": "jitMetrics.port", "jit-metrics-path": "jitMetrics.path", "jit-metric": "jitMetrics.metric",
	}
	seen := map[string]string{}
	for _, e := range warmupConfigFlags {
		want, ok := otherwise[e.flag]
		if !ok {
			want = flagField(e.flag)
		}
		if e.field != want {
			t.Errorf("--%s sets %s, want %s", e.flag, e.field, want)
		}
		if other, dup := seen[e.field]; dup {
			t.Errorf("--%s and --%s both set %s", other, e.flag, e.field)
		}
		seen[e.field] = e.flag
	}
	// The flags refused at 0: the same as before the table.
	want := "qps start-qps connections timeout health-timeout stable-ratio stable-qps reject-ratio reject-floor jit-metrics-port neighbour-ratio neighbour-floor " +
		"max-requests min-requests window stable-windows tolerance abs-tolerance deadline min-pods"
	if got := strings.Join(warmupPositiveFlags, " "); got != want {
		t.Errorf("warmupPositiveFlags = %s\nwant %s", got, want)
	}
}

// Each flag parses into the field at its path: set to a value other than
// its default, the config's JSON has that value at the table's path.
func TestWarmupConfigFlagsSetTheirField(t *testing.T) {
	for _, e := range warmupConfigFlags {
		if e.byHand {
			continue
		}
		cmd, f := warmupCmd()
		fl := cmd.Flags()
		var arg string
		var want any
		switch typ := fl.Lookup(e.flag).Value.Type(); typ {
		case "bool":
			arg = fmt.Sprint(fl.Lookup(e.flag).DefValue != "true")
			want = arg == "true"
		case "duration":
			arg, want = "7s", "7s"
		case "stringArray":
			arg, want = "a.B/C", []any{"a.B/C"}
		case "string":
			arg, want = "/seven", "/seven"
		default:
			arg, want = "7", 7.0
		}
		if err := fl.Parse([]string{"--" + e.flag + "=" + arg}); err != nil {
			t.Fatalf("--%s=%s: %v", e.flag, arg, err)
		}
		data, err := json.Marshal(f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		for _, name := range strings.Split(e.field, ".") {
			obj, _ := got.(map[string]any)
			got = obj[name]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("--%s=%s: %s is %v in %s, want %v", e.flag, arg, e.field, got, data, want)
		}
	}
}

// A field error for a flag's field names the flag before its path; fields
// mentioned in prose stay as written and get one legend line, in the
// table's order, without the fields already named, plain words (window)
// or parts of longer names.
func TestNameFlags(t *testing.T) {
	err := errors.Join(
		&config.FieldError{Path: "qps", Err: errors.New("must be > 0")},
		&config.FieldError{Path: "requests[0].method", Err: errors.New("POST: set allowSideEffects, or list it in grpcSafeMethods")},
		fmt.Errorf("request file: %w", &config.FieldError{Path: "jitMetrics.port", Err: errors.New("70000: a window too far")}),
		&config.FieldError{Path: "markerHeader", Err: errors.New("confirm with markerHeaderConfirm: X (not markerHeader), mirror.stableQPS is another's")},
		&config.FieldError{Path: "grpcSafeMethods[1]", Err: errors.New("not a method")},
	)
	want := `--qps (qps): must be > 0
requests[0].method: POST: set allowSideEffects, or list it in grpcSafeMethods
request file: --jit-metrics-port (jitMetrics.port): 70000: a window too far
--marker-header (markerHeader): confirm with markerHeaderConfirm: X (not markerHeader), mirror.stableQPS is another's
--grpc-safe-method (grpcSafeMethods[1]): not a method
flags: allowSideEffects is --allow-side-effects, markerHeaderConfirm is --marker-header-confirm`
	if got := warmupConfigFlags.nameFlags(err); got != want {
		t.Errorf("nameFlags:\n%s\nwant\n%s", got, want)
	}
	// A name inside a longer one is not mentioned (markerHeader in
	// markerHeaderConfirm), nor is a plain word that is a field (timeout).
	if got, want := warmupConfigFlags.nameFlags(errors.New("set markerHeaderConfirm before the timeout")),
		"set markerHeaderConfirm before the timeout\nflags: markerHeaderConfirm is --marker-header-confirm"; got != want {
		t.Errorf("nameFlags = %q, want %q", got, want)
	}
	// Nothing to name: the message as it was, no legend.
	plain := errors.Join(&config.FieldError{Path: "requests[0].path", Err: errors.New("must start with /")}, errors.New("no targets"))
	if got := warmupConfigFlags.nameFlags(plain); got != plain.Error() {
		t.Errorf("nameFlags(%q) = %q", plain, got)
	}
}

// warmupOutcome names the flags of a run's error and keeps the error
// itself underneath, for errors.As and the exit code.
func TestWarmupOutcomeNamesFlags(t *testing.T) {
	cmd, _ := warmupCmd()
	cmd.SetErr(io.Discard) // a verdict is printed there
	fe := &config.FieldError{Path: "requests[0].grpc.method", Err: errors.New("list it in grpcSafeMethods")}
	err := warmupOutcome(cmd, fmt.Errorf("warm-up: %w", fe))
	var got *config.FieldError
	if !strings.HasSuffix(err.Error(), "\nflags: grpcSafeMethods is --grpc-safe-method") || !errors.As(err, &got) || got != fe || exitCode(err) != exitError {
		t.Errorf("warmupOutcome: %v (exit code %d), want the legend and the field error underneath", err, exitCode(err))
	}
	// A verdict is not an error of settings: shown as it is.
	if err := warmupOutcome(cmd, fmt.Errorf("%w: set maxRequests higher", warmup.ErrNotConverged)); exitCode(err) != exitVerdict || strings.Contains(err.Error(), "flags:") {
		t.Errorf("not converged: %v (exit code %d)", err, exitCode(err))
	}
}
