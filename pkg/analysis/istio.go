package analysis

import "github.com/danki-dev/danki/pkg/config"

// DefaultIstioReporter is istio.reporter's default: the gateway's or the
// client sidecars' view of the Service they routed to.
const DefaultIstioReporter = "source"

// IstioConfig selects canary and stable traffic in Istio's standard metrics
// (istio_request_duration_milliseconds_bucket, istio_requests_total).
type IstioConfig struct {
	// Reporter label: "source" (the client side, e.g. an ingress gateway;
	// default) or "destination" (the server sidecar).
	Reporter string         `json:"reporter,omitempty"`
	Canary   IstioSelector  `json:"canary"`
	Stable   *IstioSelector `json:"stable,omitempty"`
}

// IstioSelector picks one version's series; every field set becomes an
// equality matcher.
type IstioSelector struct {
	Workload  string            `json:"workload,omitempty"`  // destination_workload
	Namespace string            `json:"namespace,omitempty"` // destination_workload_namespace
	Service   string            `json:"service,omitempty"`   // destination_service, e.g. app-canary.default.svc.cluster.local
	Version   string            `json:"version,omitempty"`   // destination_version
	Labels    map[string]string `json:"labels,omitempty"`    // any other label
}

// withDefaults returns the block with its default reporter.
func (ic IstioConfig) withDefaults() IstioConfig {
	if ic.Reporter == "" {
		ic.Reporter = DefaultIstioReporter
	}
	return ic
}

// compile checks a defaulted istio block; problems are added under "istio.".
func (ic IstioConfig) compile(p *config.Errors) {
	if ic.Reporter != "destination" && ic.Reporter != "source" {
		p.Addf("istio.reporter", "%q is not an Istio reporter; use source or destination", ic.Reporter)
	}
	compileIstioSelector(p, "istio.canary", ic.Reporter, &ic.Canary)
	if ic.Stable != nil {
		compileIstioSelector(p, "istio.stable", ic.Reporter, ic.Stable)
	}
}

func compileIstioSelector(p *config.Errors, field, reporter string, s *IstioSelector) {
	if s.Workload == "" && s.Service == "" && s.Version == "" && len(s.Labels) == 0 {
		p.Addf(field, "selects nothing; set at least one of workload, service, version or labels (e.g. service: app-canary.default.svc.cluster.local)")
	}
	if reporter == "destination" && s.Service != "" {
		// The server sidecar labels destination_service with one of the
		// Services its pod belongs to; Argo's canary pods belong to the
		// canary Service and the root Service (and after promotion stable's),
		// so that label cannot tell canary from stable.
		p.Addf(field+".service", "with istio.reporter destination, Istio labels destination_service with any one of the Services the pod belongs to, so it cannot tell Argo's canary from stable; use reporter: source (the default: the gateway's or client sidecars' view of the Service they routed to), or select by version or labels")
	}
	compileLabels(p, field+".labels", s.Labels)
}

// Istio's built-in queries. <<.Selector>> and <<.Window>> are filled per
// side and per check. Counts come from increase() of the *bucket* series so
// that the percentiles and the tail test see the same requests.
const (
	istioHistogram = `sum by (le) (increase(istio_request_duration_milliseconds_bucket{<<.Selector>>}[<<.Window>>]))`
	istioRequests  = `sum(increase(istio_requests_total{<<.Selector>>}[<<.Window>>]))`
	istioErrors    = `sum(increase(istio_requests_total{<<.Selector>>,response_code=~"` + defaultErrorCodeRegex + `"}[<<.Window>>]))`
)

// queries is the Prometheus query set of a defaulted istio block.
func (ic IstioConfig) queries() promQueries {
	q := promQueries{canary: istioMatchers(ic.Reporter, ic.Canary), leScale: 1,
		histogram: istioHistogram, requests: istioRequests, errors: istioErrors}
	if ic.Stable != nil {
		q.stable, q.hasStable = istioMatchers(ic.Reporter, *ic.Stable), true
	}
	return q
}

func istioMatchers(reporter string, s IstioSelector) string {
	labels := map[string]string{"reporter": reporter}
	for k, v := range s.Labels {
		labels[k] = v
	}
	set := func(k, v string) {
		if v != "" {
			labels[k] = v
		}
	}
	set("destination_workload", s.Workload)
	set("destination_workload_namespace", s.Namespace)
	set("destination_service", s.Service)
	set("destination_version", s.Version)
	return matchers(labels)
}
