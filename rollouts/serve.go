package rollouts

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
)

// Handshake values shared with the Argo Rollouts controller
// (rollout/*/plugin/client in argo-rollouts).
const (
	MagicCookieKey  = "ARGO_ROLLOUTS_RPC_PLUGIN"
	ProtocolVersion = 1

	KindStep           = "step"
	KindTrafficRouter  = "trafficrouter"
	KindMetricProvider = "metricprovider"
)

type pluginFactory struct {
	// mapKey is the name the controller dispenses the plugin by,
	// e.g. "RpcStepPlugin".
	mapKey string
	build  func(*slog.Logger, policy.Policy, *metrics.Plugin) goplugin.Plugin
}

var factories = map[string]pluginFactory{}

// register makes a plugin kind servable. Adapters call it from init.
func register(kind, mapKey string, build func(*slog.Logger, policy.Policy, *metrics.Plugin) goplugin.Plugin) {
	if _, dup := factories[kind]; dup {
		panic("rollouts: plugin kind registered twice: " + kind)
	}
	factories[kind] = pluginFactory{mapKey: mapKey, build: build}
}

// Kinds lists the plugin kinds this binary serves.
func Kinds() []string {
	kinds := make([]string, 0, len(factories))
	for k := range factories {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// Serve serves the plugin kind the controller asked for through the
// ARGO_ROLLOUTS_RPC_PLUGIN handshake variable, until the controller ends it.
// pol is the operator's policy (the plugin's args in argo-rollouts-config):
// every tenant config the plugin is given is checked against it. m records
// danki's own metrics (nil: none; see pkg/metrics).
func Serve(logger *slog.Logger, pol policy.Policy, m *metrics.Plugin) error {
	kind := os.Getenv(MagicCookieKey)
	f, ok := factories[kind]
	if !ok {
		return fmt.Errorf("danki plugin is started by the Argo Rollouts controller, which sets %s to one of %s (got %q); register the binary in the argo-rollouts-config ConfigMap",
			MagicCookieKey, strings.Join(Kinds(), ", "), kind)
	}
	logger = logger.With("plugin", kind)
	logger.Info("serving Argo Rollouts plugin", "pid", os.Getpid())
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  ProtocolVersion,
			MagicCookieKey:   MagicCookieKey,
			MagicCookieValue: kind,
		},
		Plugins: map[string]goplugin.Plugin{f.mapKey: f.build(logger, pol, m)},
	})
	return nil
}
