package analysis

import (
	"fmt"
	"maps"
	"slices"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/prometheus/common/model"
)

// Defaults of the envoy block: the labels of Istio's stats tags.
const (
	DefaultResponseCode = "response_code"
	DefaultClusterLabel = "cluster_name"
)

// EnvoyConfig selects canary and stable series in Envoy's cluster metrics
// (envoy_cluster_upstream_rq_time_bucket, envoy_cluster_upstream_rq): by
// cluster (a gateway's or a caller's outbound cluster per Service), or by
// one cluster both sides share and labels per side (each pod sidecar's
// inbound cluster, told apart by the pods' labels).
type EnvoyConfig struct {
	// CanaryCluster and StableCluster are cluster names, e.g.
	// outbound|8080||app-canary.default.svc.cluster.local.
	CanaryCluster string `json:"canaryCluster"`
	StableCluster string `json:"stableCluster,omitempty"`
	// Cluster is one cluster name for both sides, e.g. inbound|8080||, the
	// inbound cluster every sidecar has for port 8080; CanaryLabels and
	// StableLabels tell the sides apart. Not with CanaryCluster or
	// StableCluster.
	Cluster string `json:"cluster,omitempty"`
	// CanaryLabels and StableLabels are equality matchers for one side,
	// e.g. rollouts_pod_template_hash: "{{args.canary-hash}}" (Argo's
	// podTemplateHashValue: Latest / Stable). StableLabels alone makes a
	// stable side.
	CanaryLabels map[string]string `json:"canaryLabels,omitempty"`
	StableLabels map[string]string `json:"stableLabels,omitempty"`
	// ClusterLabel names the label holding the cluster name: "cluster_name"
	// with Istio's stats tags (default), "envoy_cluster_name" with plain
	// Envoy's.
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// ResponseCodeLabel names the response-code label of
	// envoy_cluster_upstream_rq: "response_code" with Istio's stats tags
	// (default), "envoy_response_code" with Envoy's own.
	ResponseCodeLabel string `json:"responseCodeLabel,omitempty"`
	// Labels are extra equality matchers for both sides (e.g. job).
	Labels map[string]string `json:"labels,omitempty"`
}

// withDefaults returns the block with its default labels.
func (ec EnvoyConfig) withDefaults() EnvoyConfig {
	if ec.ResponseCodeLabel == "" {
		ec.ResponseCodeLabel = DefaultResponseCode
	}
	if ec.ClusterLabel == "" {
		ec.ClusterLabel = DefaultClusterLabel
	}
	return ec
}

// hasStable reports whether the block selects a stable side.
func (ec EnvoyConfig) hasStable() bool { return ec.StableCluster != "" || len(ec.StableLabels) > 0 }

// sides are the canary's and stable's cluster names.
func (ec EnvoyConfig) sides() (canary, stable string) {
	if ec.Cluster != "" {
		return ec.Cluster, ec.Cluster
	}
	return ec.CanaryCluster, ec.StableCluster
}

// compile checks a defaulted envoy block; problems are added under "envoy.".
func (ec EnvoyConfig) compile(p *config.Errors) {
	const perPod = `for each pod's server-side latency, set cluster: "inbound|8080||" (every sidecar's inbound cluster for port 8080) with canaryLabels and stableLabels`
	switch {
	case ec.Cluster != "" && (ec.CanaryCluster != "" || ec.StableCluster != ""):
		p.Addf("envoy.cluster", "set together with canaryCluster/stableCluster; use cluster for one cluster both sides share (a sidecar's inbound|8080||, sides told apart by canaryLabels and stableLabels), or canaryCluster and stableCluster for one cluster each")
	case ec.Cluster != "":
		if len(ec.CanaryLabels) == 0 {
			p.Addf("envoy.canaryLabels", "missing; with envoy.cluster, which both sides share, the canary's series are told apart by labels, e.g. rollouts_pod_template_hash: \"{{args.canary-hash}}\" (podTemplateHashValue: Latest)")
		}
	case ec.CanaryCluster == "":
		p.Addf("envoy.canaryCluster", "missing; set the canary's cluster name, e.g. outbound|8080||app-canary.default.svc.cluster.local; or, %s", perPod)
	case len(ec.StableLabels) > 0 && ec.StableCluster == "":
		p.Addf("envoy.stableLabels", "set without a cluster for stable; set envoy.stableCluster, or, %s", perPod)
	}
	for field, label := range map[string]string{"envoy.responseCodeLabel": ec.ResponseCodeLabel, "envoy.clusterLabel": ec.ClusterLabel} {
		if !model.LegacyValidation.IsValidLabelName(label) {
			p.Addf(field, "%q is not a Prometheus label name", label)
		}
	}
	compileLabels(p, "envoy.labels", ec.Labels)
	for _, side := range []struct {
		field  string
		labels map[string]string
	}{{"envoy.canaryLabels", ec.CanaryLabels}, {"envoy.stableLabels", ec.StableLabels}} {
		compileLabels(p, side.field, side.labels)
		for _, k := range slices.Sorted(maps.Keys(side.labels)) {
			switch {
			case side.labels[k] == "":
				// Prometheus' l="" matches the series WITHOUT l: an arg
				// Argo resolved to nothing would select every pod.
				p.Addf(side.field, "%s is empty, which would select every series without %s; give the value (e.g. Argo's podTemplateHashValue arg)", k, k)
			case k == ec.ClusterLabel:
				p.Addf(side.field, "%s is the cluster label; set the cluster with envoy.cluster, canaryCluster or stableCluster", k)
			case hasKey(ec.Labels, k):
				p.Addf(side.field, "%s is also in envoy.labels; keep it in one place", k)
			}
		}
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// Envoy's built-in queries, like Istio's (istio.go).
const (
	envoyHistogram = `sum by (le) (increase(envoy_cluster_upstream_rq_time_bucket{<<.Selector>>}[<<.Window>>]))`
	// envoy_cluster_upstream_rq holds every request twice under one name
	// when Istio's stats tags are used: once per response_code and once per
	// response_code_class (upstream_rq_2xx …). Only the series that carry
	// the response-code label count each request once. %s is that label.
	envoyRequests = `sum(increase(envoy_cluster_upstream_rq{<<.Selector>>,%s!=""}[<<.Window>>]))`
	envoyErrors   = `sum(increase(envoy_cluster_upstream_rq{<<.Selector>>,%s=~"` + defaultErrorCodeRegex + `"}[<<.Window>>]))`
)

// queries is the Prometheus query set of a defaulted envoy block.
func (ec EnvoyConfig) queries() promQueries {
	canary, stable := ec.sides()
	q := promQueries{canary: envoyMatchers(ec.ClusterLabel, canary, ec.Labels, ec.CanaryLabels), leScale: 1,
		histogram: envoyHistogram,
		requests:  fmt.Sprintf(envoyRequests, ec.ResponseCodeLabel),
		errors:    fmt.Sprintf(envoyErrors, ec.ResponseCodeLabel)}
	if ec.hasStable() {
		q.stable, q.hasStable = envoyMatchers(ec.ClusterLabel, stable, ec.Labels, ec.StableLabels), true
	}
	return q
}

func envoyMatchers(clusterLabel, cluster string, both, side map[string]string) string {
	labels := map[string]string{clusterLabel: cluster}
	for _, m := range []map[string]string{both, side} {
		for k, v := range m {
			labels[k] = v
		}
	}
	return matchers(labels)
}
