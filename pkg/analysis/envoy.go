package analysis

import (
	"fmt"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/prometheus/common/model"
)

// Defaults of the envoy block: the labels of Istio's stats tags.
const (
	DefaultResponseCode = "response_code"
	DefaultClusterLabel = "cluster_name"
)

// EnvoyConfig selects canary and stable upstream clusters in Envoy's cluster
// metrics (envoy_cluster_upstream_rq_time_bucket, envoy_cluster_upstream_rq).
type EnvoyConfig struct {
	// CanaryCluster and StableCluster are cluster names, e.g.
	// outbound|8080||app-canary.default.svc.cluster.local.
	CanaryCluster string `json:"canaryCluster"`
	StableCluster string `json:"stableCluster,omitempty"`
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

// compile checks a defaulted envoy block; problems are added under "envoy.".
func (ec EnvoyConfig) compile(p *config.Errors) {
	if ec.CanaryCluster == "" {
		p.Addf("envoy.canaryCluster", "missing; set the canary's cluster name, e.g. outbound|8080||app-canary.default.svc.cluster.local")
	}
	for field, label := range map[string]string{"envoy.responseCodeLabel": ec.ResponseCodeLabel, "envoy.clusterLabel": ec.ClusterLabel} {
		if !model.LegacyValidation.IsValidLabelName(label) {
			p.Addf(field, "%q is not a Prometheus label name", label)
		}
	}
	compileLabels(p, "envoy.labels", ec.Labels)
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
	q := promQueries{canary: envoyMatchers(ec.ClusterLabel, ec.CanaryCluster, ec.Labels), leScale: 1,
		histogram: envoyHistogram,
		requests:  fmt.Sprintf(envoyRequests, ec.ResponseCodeLabel),
		errors:    fmt.Sprintf(envoyErrors, ec.ResponseCodeLabel)}
	if ec.StableCluster != "" {
		q.stable, q.hasStable = envoyMatchers(ec.ClusterLabel, ec.StableCluster, ec.Labels), true
	}
	return q
}

func envoyMatchers(clusterLabel, cluster string, extra map[string]string) string {
	labels := map[string]string{clusterLabel: cluster}
	for k, v := range extra {
		labels[k] = v
	}
	return matchers(labels)
}
