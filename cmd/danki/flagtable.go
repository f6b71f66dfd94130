package main

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// configFlag is a flag that sets one warmup.Config field, named by its JSON
// path as the step plugin's config and the warm-up's errors name it. The
// table is the one place that ties a flag to its field: registration, the
// refusal of a zero, and the naming of flags in errors all read it.
type configFlag struct {
	flag, short string
	field       string // JSON path in warmup.Config: "qps", "jitMetrics.port"
	def         any    // converted to the field's type; nil: the zero value
	usage       string
	// positive: 0 or less would silently mean the field's default, so it
	// is refused (refuseZeroFlags).
	positive bool
	// byHand: registered by the command itself (its value is not the
	// field's as it is, e.g. --cpu-budget, or it overrides a --config
	// file's field); listed for naming in errors.
	byHand bool
}

// configFlags is a table of configFlag.
type configFlags []configFlag

// stoppingRuleConfigFlags are the stopping rule's flags, the same for
// synthetic and mirrored warm-ups; what names the requests counted.
func stoppingRuleConfigFlags(what string) configFlags {
	return configFlags{
		{flag: "max-requests", field: "maxRequests", def: warmup.DefaultMaxRequests, positive: true, usage: "cap of " + what + ": fail when they did not converge"},
		{flag: "min-requests", field: "minRequests", def: warmup.DefaultMinRequests, positive: true, usage: what + " before the latency may count as converged"},
		{flag: "window", field: "window", def: warmup.DefaultWindow, positive: true, usage: "requests per latency window"},
		{flag: "stable-windows", field: "stableWindows", def: warmup.DefaultStableWindows, positive: true, usage: "smallest block of windows the stopping rule compares (docs/stopping-rule.md)"},
		{flag: "tolerance", field: "tolerance", def: warmup.DefaultTolerance, positive: true, usage: "still warming while the latest block is faster than the one before by more than this (docs/stopping-rule.md)"},
		{flag: "abs-tolerance", field: "absoluteTolerance", def: warmup.DefaultAbsoluteTolerance, positive: true, usage: "an improvement this small counts as none (nor a request this little above the p50 as slow)"},
		// 0 is meant: no errors.
		{flag: "max-error-ratio", field: "maxErrorRatio", def: warmup.DefaultMaxErrorRatio, usage: "share of failed requests a converging window may have"},
		{flag: "deadline", field: "deadline", def: warmup.DefaultDeadline, positive: true, usage: "give up after this long"},
	}
}

// warmupConfigFlags are the `danki warmup` flags that set a warmup.Config
// field.
var warmupConfigFlags = append(configFlags{
	{flag: "until-converged", field: "untilConverged", def: true, usage: "stop when latency converged; false: send exactly --max-requests per target (a fixed count) and only report"},
	{flag: "qps", field: "qps", def: warmup.DefaultQPS, positive: true, usage: "requests per second per target"},
	{flag: "start-qps", field: "startQPS", positive: true, usage: "pace per target at the start, raised up to --qps while the pod keeps up (default --qps / 8, at least 1)"},
	{flag: "connections", short: "c", field: "connections", def: warmup.DefaultConnections, positive: true, usage: "concurrent connections per target"},
	{flag: "cpu-budget", field: "cpuBudget", byHand: true},
	{flag: "timeout", field: "timeout", def: warmup.DefaultTimeout, positive: true, usage: "per-request timeout"},
	{flag: "health-path", field: "healthPath", usage: "path that must answer 200 before load starts (default: each pod's httpGet readinessProbe, else /)"},
	{flag: "health-timeout", field: "healthTimeout", def: warmup.DefaultHealthTimeout, positive: true, usage: "how long to wait for pods and health"},
	{flag: "health-protocol", field: "healthProtocol", usage: "http (GET --health-path until 200) or grpc (grpc.health.v1.Health/Check until SERVING); default grpc for gRPC requests or ports named grpc/grpc-*, else http"},
	{flag: "health-service", field: "healthService", usage: "service name asked in the gRPC health check (default: the server as a whole)"},

	{flag: "grpc-descriptor-set", field: "grpcDescriptorSet", usage: "FileDescriptorSet file with the gRPC services (default: the server's reflection service)"},
	{flag: "grpc-safe-method", field: "grpcSafeMethods", usage: "gRPC method known to be read-only, callable without --allow-side-effects (repeatable)"},
	{flag: "allow-side-effects", field: "allowSideEffects", usage: "allow HTTP methods other than GET, HEAD, OPTIONS and gRPC methods not marked read-only (the app must honour the marker)"},
	{flag: "marker-header", field: "markerHeader", def: wellknown.MarkerHeader, usage: "header set to 1 on every warm-up request"},
	{flag: "marker-header-confirm", field: "markerHeaderConfirm", usage: "the same header as --marker-header again: needed with --allow-side-effects and a marker other than " + wellknown.MarkerHeader + " (the app must check that header)"},
	{flag: "seed", field: "seed", usage: "seed for random template fields (0: random)"},

	{flag: "compare-to-stable", field: "compareToStable", usage: "also load stable pods and require p99 within --stable-ratio of theirs"},
	{flag: "stable-ratio", field: "stableRatio", def: warmup.DefaultStableRatio, positive: true, usage: "allowed canary p99 / stable p99"},
	{flag: "stable-qps", field: "stableQPS", def: warmup.DefaultStableQPS, positive: true, usage: "total requests per second to the stable pods"},
	{flag: "reject-slower-version", field: "rejectSlowerVersion", byHand: true},
	{flag: "reject-ratio", field: "rejectRatio", def: warmup.DefaultRejectRatio, positive: true, usage: "see --reject-slower-version"},
	{flag: "reject-floor", field: "rejectFloor", def: warmup.DefaultRejectFloor, positive: true, usage: "a converged p99 at most this far above stable's is never rejected"},
	{flag: "accept-near-stable", field: "acceptNearStable", def: true, usage: "with stable pods: at --deadline or --max-requests, accept a target still improving whose p99 is within the rejection bar of stable's"},
	{flag: "jit-metrics", field: "jitMetrics.enabled", def: true, usage: "read each pod's JIT compile time (Micrometer's jvm_compilation_time_ms_total or the Prometheus Java client's jvm_compilation_time_seconds_total, else the actuator's /actuator/metrics/jvm.compilation.time JSON) from its own address and hold the stop while the JIT still compiles; a pod without it is judged on latency alone"},
	{flag: "jit-metrics-port", field: "jitMetrics.port", positive: true, usage: "see --jit-metrics: the pod's port serving the metrics page (default: the target port)"},
	{flag: "jit-metrics-path", field: "jitMetrics.path", def: warmup.DefaultJITMetricsPath, usage: "see --jit-metrics: the metrics page's path on the pod"},
	{flag: "jit-metric", field: "jitMetrics.metric", usage: "see --jit-metrics: the compile-time counter (default: jvm_compilation_time_ms_total, else jvm_compilation_time_seconds_total)"},
	{flag: "neighbour-guard", field: "neighbourGuard", def: true, usage: "with stable pods: halve the pace while their latency rises above its baseline"},
	{flag: "neighbour-ratio", field: "neighbourRatio", def: warmup.DefaultNeighbourRatio, positive: true, usage: "see --neighbour-guard: back off when stable's p90 is above this × its baseline"},
	{flag: "neighbour-floor", field: "neighbourFloor", def: warmup.DefaultNeighbourFloor, positive: true, usage: "see --neighbour-guard: a rise of stable's p90 this small never backs off"},
}, stoppingRuleConfigFlags("requests per target")...)

// register adds the table's flags (all but the byHand ones) to fl, each
// parsing straight into its field of c. A pointer field (*bool, *float64)
// is set to a fresh value the flag parses into: the flag always has a value,
// so the field is never "unset". A path or default that does not fit the
// field panics: the table is wrong, and every test that builds the command
// says so.
func (t configFlags) register(fl *pflag.FlagSet, c *warmup.Config) {
	for _, e := range t {
		if e.byHand {
			continue
		}
		v, err := configField(reflect.ValueOf(c).Elem(), e.field)
		if err != nil {
			panic(fmt.Sprintf("flag --%s: %v", e.flag, err))
		}
		if v.Kind() == reflect.Pointer {
			v.Set(reflect.New(v.Type().Elem()))
			v = v.Elem()
		}
		def := reflect.Zero(v.Type())
		if e.def != nil {
			def = reflect.ValueOf(e.def).Convert(v.Type())
		}
		switch p := v.Addr().Interface().(type) {
		case *float64:
			fl.Float64VarP(p, e.flag, e.short, def.Float(), e.usage)
		case *int:
			fl.IntVarP(p, e.flag, e.short, int(def.Int()), e.usage)
		case *int64:
			fl.Int64VarP(p, e.flag, e.short, def.Int(), e.usage)
		case *string:
			fl.StringVarP(p, e.flag, e.short, def.String(), e.usage)
		case *bool:
			fl.BoolVarP(p, e.flag, e.short, def.Bool(), e.usage)
		case *[]string:
			fl.StringArrayVarP(p, e.flag, e.short, def.Interface().([]string), e.usage)
		case *config.Duration:
			fl.DurationVarP((*time.Duration)(p), e.flag, e.short, time.Duration(def.Int()), e.usage)
		default:
			panic(fmt.Sprintf("flag --%s: field %s is a %s, which the table cannot bind", e.flag, e.field, v.Type()))
		}
	}
}

// configField is the field of the struct v at a JSON path ("jitMetrics.port").
func configField(v reflect.Value, path string) (reflect.Value, error) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("field %s: %s is not an object", path, name)
		}
		found := false
		for i := range v.NumField() {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			if tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, fmt.Errorf("field %s: no %s in %s", path, name, v.Type())
		}
	}
	return v, nil
}

// positive are the flags refused at 0 or less.
func (t configFlags) positive() []string {
	var names []string
	for _, e := range t {
		if e.positive {
			names = append(names, e.flag)
		}
	}
	return names
}

// field is the config field a flag sets; a flag not in the table gets its
// name in camelCase (flagField), the way other commands' configs name them.
func (t configFlags) field(flag string) string {
	for _, e := range t {
		if e.flag == flag {
			return e.field
		}
	}
	return flagField(flag)
}

// flagFor is the table entry setting the field at path or, for a path into
// a field (grpcSafeMethods[0], jitMetrics.port.x), at its longest prefix
// that is one.
func (t configFlags) flagFor(path string) (configFlag, bool) {
	for end := len(path); end > 0; end-- {
		if end < len(path) && path[end] != '.' && path[end] != '[' {
			continue
		}
		for _, e := range t {
			if e.field == path[:end] {
				return e, true
			}
		}
	}
	return configFlag{}, false
}

// flagNamedError is an error whose message names config fields by their
// flags; it still unwraps to the error it renders.
type flagNamedError struct {
	msg string
	err error
}

func (e *flagNamedError) Error() string { return e.msg }
func (e *flagNamedError) Unwrap() error { return e.err }

// nameFlags renders err for the command line: a field error whose path is a
// flag's field reads "--flag (path): message"; fields only mentioned in a
// message's prose are left as written (rewriting prose garbles it) and
// named once, in a legend line after the list.
func (t configFlags) nameFlags(err error) string {
	r := flagRenderer{table: t, named: map[string]bool{}, mentioned: map[string]bool{}}
	msg := r.render(err)
	var legend []string
	for _, e := range t {
		if r.mentioned[e.field] && !r.named[e.field] {
			legend = append(legend, e.field+" is --"+e.flag)
		}
	}
	if len(legend) > 0 {
		msg += "\nflags: " + strings.Join(legend, ", ")
	}
	return msg
}

// flagRenderer walks one error tree: named are the fields shown with their
// flag, mentioned the fields named in messages.
type flagRenderer struct {
	table            configFlags
	named, mentioned map[string]bool
}

func (r *flagRenderer) render(err error) string {
	var fe *config.FieldError
	if errors.As(err, &fe) && fe == err {
		if e, ok := r.table.flagFor(fe.Path); ok {
			r.named[e.field] = true
			return "--" + e.flag + " (" + fe.Path + "): " + r.render(fe.Err)
		}
		return fe.Path + ": " + r.render(fe.Err)
	}
	msg := err.Error()
	// Only wrappers whose message is made of their errors' are walked
	// (errors.Join's lines, fmt.Errorf's "context: %w"): anything else is
	// rendered as it reads.
	switch w := err.(type) {
	case interface{ Unwrap() []error }:
		var lines, rendered []string
		for _, inner := range w.Unwrap() {
			lines = append(lines, inner.Error())
			rendered = append(rendered, r.render(inner))
		}
		if strings.Join(lines, "\n") == msg {
			return strings.Join(rendered, "\n")
		}
	case interface{ Unwrap() error }:
		if inner := w.Unwrap(); inner != nil {
			if prefix, ok := strings.CutSuffix(msg, inner.Error()); ok {
				r.scan(prefix)
				return prefix + r.render(inner)
			}
		}
	}
	r.scan(msg)
	return msg
}

// scan records the table's fields msg mentions. Only names a reader can
// tell from prose count (allowSideEffects, jitMetrics.port): a field
// named by a plain word (window, timeout, qps) is English in a message
// more often than a field.
func (r *flagRenderer) scan(msg string) {
	for _, e := range r.table {
		if strings.ToLower(e.field) == e.field && !strings.Contains(e.field, ".") {
			continue
		}
		for rest, off := msg, 0; ; {
			i := strings.Index(rest, e.field)
			if i < 0 {
				break
			}
			at := off + i
			end := at + len(e.field)
			if (at == 0 || !fieldRune(msg[at-1])) && (end == len(msg) || !identRune(msg[end])) {
				r.mentioned[e.field] = true
				break
			}
			rest, off = msg[end:], end
		}
	}
}

// identRune: b continues an identifier, so a match ending before it is part
// of a longer name (markerHeader in markerHeaderConfirm).
func identRune(b byte) bool {
	return b == '_' || b < unicode.MaxASCII && (unicode.IsLetter(rune(b)) || unicode.IsDigit(rune(b)))
}

// fieldRune: b before a match makes it another object's field
// (mirror.allowSideEffects) or part of a longer name.
func fieldRune(b byte) bool { return b == '.' || identRune(b) }
