package shift

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/danki-dev/danki/pkg/config"
)

// RouterConfig is the danki/istio traffic router's configuration (JSON or
// YAML): which VirtualService and routes it manages, host- or subset-level
// routing, the ramp and its latency gate. docs/istio-router.md documents
// every field. Bind decodes and validates it.
type RouterConfig struct {
	VirtualService VirtualServiceConfig `json:"virtualService"`
	// DestinationRule selects subset-level routing; without it routing is
	// host-level, between the front end's stable and canary Services.
	DestinationRule *DestinationRuleConfig `json:"destinationRule,omitempty"`
	Ramp            RampConfig             `json:"ramp"`
	// Gate is a danki/latency configuration (pkg/analysis); none: the ramp
	// moves on time alone. It is parsed only once a ramp needs it, so a bad
	// gate never blocks an abort.
	Gate json.RawMessage `json:"gate,omitempty"`
}

// VirtualServiceConfig names the VirtualService and the routes to manage
// (none: every route holding both the stable and the canary destination).
type VirtualServiceConfig struct {
	Name string `json:"name"`
	// Namespace defaults to the rollout's.
	Namespace string             `json:"namespace,omitempty"`
	Routes    []string           `json:"routes,omitempty"`
	TLSRoutes []TLSRouteSelector `json:"tlsRoutes,omitempty"`
	TCPRoutes []TCPRouteSelector `json:"tcpRoutes,omitempty"`
}

// DestinationRuleConfig is subset-level routing: one host, a stable and a
// canary subset of the DestinationRule (in the rollout's namespace).
type DestinationRuleConfig struct {
	Name             string `json:"name"`
	CanarySubsetName string `json:"canarySubsetName"`
	StableSubsetName string `json:"stableSubsetName"`
}

// RampConfig is the Plan as written in a configuration; zero fields mean
// the defaults.
type RampConfig struct {
	Step    int   `json:"step,omitempty"`
	Weights []int `json:"weights,omitempty"`
	// Interval unset means DefaultInterval; "0s" is valid (move as soon as
	// the gate passes).
	Interval    *config.Duration `json:"interval,omitempty"`
	MaxBreaches int              `json:"maxBreaches,omitempty"`
	MaxHold     config.Duration  `json:"maxHold,omitempty"`
}

// Plan is the ramp's Plan as configured (zero fields: defaults, not yet
// filled in).
func (c RampConfig) Plan() Plan {
	p := Plan{Step: c.Step, Weights: c.Weights, Interval: DefaultInterval, MaxBreaches: c.MaxBreaches, MaxHold: c.MaxHold.D()}
	if c.Interval != nil {
		p.Interval = c.Interval.D()
	}
	return p
}

// Scope is what the front end knows about a rollout beyond its router
// configuration, and how to name its fields in errors.
type Scope struct {
	// Namespace is the rollout's: the VirtualService's unless the
	// configuration names another, and the DestinationRule's.
	Namespace string
	// StableHost and CanaryHost are the stable and canary Services, used
	// for host-level routing.
	StableHost, CanaryHost string
	// ManagedRoutes are the header and mirror routes danki may add, in
	// precedence order.
	ManagedRoutes []string
	// ConfigField is where the configuration sits (prefixes its fields in
	// errors); HostsField is where StableHost and CanaryHost come from.
	ConfigField, HostsField string
	// OtherNamespaces are the namespaces besides the rollout's where the
	// configuration may name its VirtualService (the operator's
	// --allow-virtualservice-namespace, e.g. a shared gateway namespace).
	// None: the rollout's own only — a Rollout must not shift the weights
	// of another team's VirtualService.
	OtherNamespaces []string
}

// Binding is a router configuration resolved for one rollout.
type Binding struct {
	Target Target
	// Plan has its defaults filled in.
	Plan Plan
	// Gate is the configuration's raw "gate" (see RouterConfig.Gate).
	Gate json.RawMessage
	// gateField names the gate in errors.
	gateField string
}

// Bind decodes raw strictly (JSON or YAML), resolves it against the scope
// and validates the result in full. Every error names the field to fix; an
// empty raw is "missing".
func Bind(raw []byte, s Scope) (Binding, error) {
	var (
		cfg  RouterConfig
		errs config.Errors
	)
	if len(bytes.TrimSpace(raw)) == 0 {
		errs.Addf(s.ConfigField, "missing: configure at least virtualService.name")
		return Binding{}, errs.Err()
	}
	if err := config.Decode(raw, &cfg); err != nil {
		errs.Add(s.ConfigField, err)
		return Binding{}, errs.Err()
	}
	vs := cfg.VirtualService
	if vs.Name == "" {
		errs.Addf(s.ConfigField+".virtualService.name", "required")
	}
	t := Target{Namespace: vs.Namespace, VirtualService: vs.Name, HTTPRoutes: vs.Routes, TLSRoutes: vs.TLSRoutes,
		TCPRoutes: vs.TCPRoutes, ManagedRoutes: s.ManagedRoutes}
	if t.Namespace == "" {
		t.Namespace = s.Namespace
	}
	if t.Namespace != s.Namespace && !slices.Contains(s.OtherNamespaces, t.Namespace) {
		errs.Addf(s.ConfigField+".virtualService.namespace", "%q is not the Rollout's namespace %q: a Rollout may only shift the VirtualServices of its own namespace (leave the field out), unless the operator allows that namespace with --allow-virtualservice-namespace (docs/security.md)", t.Namespace, s.Namespace)
	}
	if dr := cfg.DestinationRule; dr != nil {
		if dr.Name == "" || dr.CanarySubsetName == "" || dr.StableSubsetName == "" {
			errs.Addf(s.ConfigField+".destinationRule", "name, canarySubsetName and stableSubsetName are all required for subset-level routing (or drop destinationRule for host-level routing)")
		}
		t.Subsets = &Subsets{DestinationRule: dr.Name, Namespace: s.Namespace, StableSubset: dr.StableSubsetName, CanarySubset: dr.CanarySubsetName}
	} else {
		if s.StableHost == "" || s.CanaryHost == "" {
			errs.Addf(s.HostsField, "both required for host-level routing (or configure destinationRule for subset-level routing)")
		}
		t.StableHost, t.CanaryHost = s.StableHost, s.CanaryHost
	}
	plan := cfg.Ramp.Plan()
	errs.Add(s.ConfigField+".ramp", plan.Validate())
	if err := errs.Err(); err != nil {
		return Binding{}, err
	}
	if err := t.Validate(); err != nil {
		return Binding{}, fmt.Errorf("%s: %w", s.ConfigField, err)
	}
	return Binding{Target: t, Plan: plan.WithDefaults(), Gate: cfg.Gate, gateField: s.ConfigField + ".gate"}, nil
}

// Extra is an additional destination (an Argo experiment's) named by its
// Service: with subset-level routing it is the subset of that name on the
// DestinationRule's host (as UpdateHashes creates it), else the Service.
func (b Binding) Extra(service string, weight int) Extra {
	if b.Target.Subsets != nil {
		return Extra{Subset: service, Weight: weight}
	}
	return Extra{Host: service, Weight: weight}
}
