package metrics

import (
	"cmp"
	"errors"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildVersion is danki's version as danki_build_info reports it:
// cmd/danki sets it once at start, before any registry is built (the
// -ldflags version, else what the go command recorded; `danki version`
// prints the same). Empty, the module version of the build info is used,
// else "dev".
var BuildVersion string

// buildInfo is the one danki_build_info gauge of the process, shared by
// the gate's and the plugins' registrations (NewGate, NewPlugin): a
// process that has both registers it once.
var buildInfo = sync.OnceValue(func() prometheus.Collector {
	version, revision := BuildVersion, "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; version == "" && v != "" && v != "(devel)" {
			version = v
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "build_info",
		Help: "Always 1: the danki build this process runs, by version, goversion and revision (the VCS commit, unknown when the build recorded none).",
		ConstLabels: prometheus.Labels{
			"version":   cmp.Or(version, "dev"),
			"goversion": runtime.Version(),
			"revision":  revision,
		}})
	g.Set(1)
	return g
})

// registerBuildInfo registers danki_build_info on reg, unless it already
// is (the gate and the plugins in one registry).
func registerBuildInfo(reg prometheus.Registerer) error {
	err := reg.Register(buildInfo())
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) && are.ExistingCollector == buildInfo() {
		return nil
	}
	return err
}
