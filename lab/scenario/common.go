package scenario

import (
	"log/slog"
	"time"
)

// Where the lab's gateway listens: users' requests (DefaultGatewayURL) and
// its Envoy's admin API (DefaultEnvoyAdminURL).
const (
	DefaultGatewayURL    = "http://127.0.0.1:18080/"
	DefaultEnvoyAdminURL = "http://127.0.0.1:15000"
)

// Common is what every scenario (Demo, AA, GateBench) is given: where the
// lab is, how its users reach it, and the log. Each scenario's config
// embeds it; withDefaults fills it in one place.
type Common struct {
	// Root is the repository root (lab/manifests, deploy/gate); Kubeconfig
	// the lab's.
	Root, Kubeconfig string
	// Danki is the danki binary, for the scenarios that run it (GateBench:
	// `danki gate`).
	Danki string
	// GatewayURL is where users' requests enter (the lab's Envoy), and
	// EnvoyAdminURL its admin API (for counting requests per cluster).
	GatewayURL, EnvoyAdminURL string
	// QPS is the steady user traffic (GateBench: per way).
	QPS float64
	// Settle is how long users warm the freshly started pods before
	// anything is measured.
	Settle time.Duration
	// Mesh is the lab's LAB_MESH (LabMesh): the results say through which
	// data path users were measured, and the danki processes a scenario
	// starts get the lab's mesh flags (MeshFlags).
	Mesh string
	Log  *slog.Logger
}

// withDefaults fills the fields left zero: the lab's gateway and admin API,
// slog.Default(), and the scenario's own qps and settle.
func (c Common) withDefaults(qps float64, settle time.Duration) Common {
	if c.GatewayURL == "" {
		c.GatewayURL = DefaultGatewayURL
	}
	if c.EnvoyAdminURL == "" {
		c.EnvoyAdminURL = DefaultEnvoyAdminURL
	}
	if c.QPS == 0 {
		c.QPS = qps
	}
	if c.Settle == 0 {
		c.Settle = settle
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}
