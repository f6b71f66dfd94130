package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// analyzeFlags holds the flag values; apply copies the ones set into a Config.
type analyzeFlags struct {
	caps       capFlags
	configFile string
	output     string

	prometheus, bearerToken, bearerTokenFile, caFile string
	insecureSkipVerify                               bool

	source                   string
	canary, stable           string
	workloadNamespace        string
	reporter                 string
	canaryWorkload           string
	stableWorkload           string
	canaryVersion            string
	stableVersion            string
	responseCodeLabel        string
	histogram, requests      string
	errorsQuery, unit        string
	window, timeout          string
	minSamples, minTailCount int

	latency      map[string]*time.Duration // p50 … p999, max
	ratio        map[string]*float64       // p50 … p999
	maxErrorRate string

	tailTest                      bool
	confidence, tailQuantile, mrg float64

	// source load
	kube                             kubeFlags
	mesh                             meshFlags
	urls, stableURLs, paths          []string
	service, stableService, selector string
	hash, stableHash, port           string
	healthPath, duration, reqTimeout string
	count, connections               int
	qps, stableQPS                   float64
	warmUp, allowSideEffects         bool
}

var analyzePercentiles = []string{"p50", "p90", "p95", "p99", "p999"}

func newAnalyzeCmd() *cobra.Command {
	f := &analyzeFlags{latency: map[string]*time.Duration{}, ratio: map[string]*float64{}}
	cmd := &cobra.Command{
		Use:   "analyze",
		Short: "Judge a canary's tail latency against SLOs, absolute and relative to stable",
		Long: `Fetch canary and stable latency histograms over the same window (from Prometheus:
Istio standard metrics, Envoy cluster metrics or custom PromQL; or from fortio
result files), print canary vs stable per percentile, and judge the SLOs — the
same analysis the danki/latency metric plugin runs in an AnalysisTemplate.

--canary and --stable select the versions; what they mean depends on --source:
  istio   destination_service (e.g. app-canary.default.svc.cluster.local);
          (as the gateway reports it: reporter source); add --canary-workload /
          --canary-version / --workload-namespace to narrow it
  envoy   cluster_name (e.g. "outbound|8080||app-canary.default.svc.cluster.local")
  promql  label matchers for <<.Selector>> (e.g. 'app="checkout",version="v2"')
  fortio  a fortio result JSON file or http(s) URL

--source load sends the load itself (no Prometheus): --count requests (or
--duration) at --qps per pod straight to the new pods (--url, or in Kubernetes
--service / --selector / --pod-template-hash), and at the same pace, capped by
--stable-qps, to the stable pods (--stable-url / --stable-service); cold pods
are warmed until converged first (--warm-up). Every request carries the marker
header X-Danki-Warmup: 1; --path sets GET paths (templates use << >>, e.g.
'/items/<<randInt 1 5000>>'); a full request mix goes in --config (methods other
than GET, HEAD and OPTIONS only with --allow-side-effects).

The verdict (Pass, Fail or Inconclusive, with the checks) goes to stdout.
Exit status:
  0  Pass: every SLO holds
  1  Fail: an SLO is breached (a verdict, not an error)
  2  Inconclusive: not enough data to judge (never a pass)
  3  error: bad flags or config, or the latency could not be measured
     (Prometheus or the pods unreachable), with "Error: …" on stderr
See docs/latency.md.`,
		Example: `  danki analyze --prometheus http://127.0.0.1:9090 --source istio \
    --canary app-canary.default.svc.cluster.local --stable app-stable.default.svc.cluster.local \
    --window 10m --p99 250ms --p999 1s --p99-ratio 1.2 --max-error-rate 1% --tail-test

  danki analyze --source fortio --canary canary.json --stable stable.json --p99 50ms --max 500ms

  danki analyze --source load -n shop --service checkout-preview --stable-service checkout-active \
    --count 2000 --qps 50 --p99 150ms --p99-ratio 1.5 --max-error-rate 1%`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAnalyze(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.configFile, "config", "", "danki/latency config file, JSON or YAML (the plugin's format); flags given override its fields")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")

	fl.StringVar(&f.prometheus, "prometheus", "", "Prometheus URL, e.g. http://prometheus.istio-system:9090")
	fl.StringVar(&f.bearerToken, "bearer-token", "", "bearer token for Prometheus")
	fl.StringVar(&f.bearerTokenFile, "bearer-token-file", "", "file holding the bearer token for Prometheus (re-read per request)")
	fl.StringVar(&f.caFile, "ca-file", "", "CA certificate file to verify an https Prometheus")
	fl.BoolVar(&f.insecureSkipVerify, "insecure-skip-verify", false, "do not verify Prometheus' TLS certificate")

	fl.StringVar(&f.source, "source", "istio", "latency source: istio, envoy, promql, fortio or load")
	fl.StringVar(&f.canary, "canary", "", "the canary: service (istio), cluster_name (envoy), label matchers (promql) or result file/URL (fortio)")
	fl.StringVar(&f.stable, "stable", "", "the stable version, in the same form as --canary")
	fl.StringVar(&f.workloadNamespace, "workload-namespace", "", "istio: destination_workload_namespace of both versions")
	fl.StringVar(&f.reporter, "reporter", "", "istio: reporter label, source (default: the gateway's or client's view) or destination")
	fl.StringVar(&f.canaryWorkload, "canary-workload", "", "istio: destination_workload of the canary")
	fl.StringVar(&f.stableWorkload, "stable-workload", "", "istio: destination_workload of stable")
	fl.StringVar(&f.canaryVersion, "canary-version", "", "istio: destination_version of the canary")
	fl.StringVar(&f.stableVersion, "stable-version", "", "istio: destination_version of stable")
	fl.StringVar(&f.responseCodeLabel, "response-code-label", "", "envoy: response-code label of envoy_cluster_upstream_rq (default response_code)")
	fl.StringVar(&f.histogram, "histogram-query", "", "promql: histogram query template, e.g. 'sum by (le) (increase(http_server_requests_seconds_bucket{<<.Selector>>}[<<.Window>>]))'")
	fl.StringVar(&f.requests, "requests-query", "", "promql: request-count query template")
	fl.StringVar(&f.errorsQuery, "errors-query", "", "promql: failed-request-count query template")
	fl.StringVar(&f.unit, "unit", "", "promql: unit of the histogram's le label, s (default) or ms")

	fl.StringVar(&f.window, "window", "5m", "how far back every query looks, e.g. 5m (the CLI has no analysis start, so no \"cumulative\")")
	fl.StringVar(&f.timeout, "timeout", "", "timeout for the whole analysis (default 30s)")
	fl.IntVar(&f.minSamples, "min-samples", 0, "requests each side needs before any check can pass (default 100)")
	fl.IntVar(&f.minTailCount, "min-tail-count", 0, "a check on quantile q needs min-tail-count/(1-q) requests (default 5)")

	for _, key := range analyzePercentiles {
		label := strings.Replace(key, "p999", "p99.9", 1)
		f.latency[key] = fl.Duration(key, 0, "SLO: canary "+label+" at most this, e.g. 250ms")
		f.ratio[key] = fl.Float64(key+"-ratio", 0, "SLO: canary "+label+" at most this many times stable's, e.g. 1.2")
	}
	f.latency["max"] = fl.Duration("max", 0, "SLO: canary maximum latency at most this (fortio only: Prometheus keeps no raw maximum)")
	fl.StringVar(&f.maxErrorRate, "max-error-rate", "", "SLO: canary error rate (5xx) at most this, a fraction (0.01) or percentage (1%)")

	fl.BoolVar(&f.tailTest, "tail-test", false, "run the sequential tail test: does the canary exceed stable's p99 bucket bound more often than stable?")
	fl.Float64Var(&f.confidence, "confidence", 0, "tail test: confidence of a Fail (default 0.95)")
	fl.Float64Var(&f.tailQuantile, "tail-quantile", 0, "tail test: quantile whose stable bucket bound is the threshold (default 0.99)")
	fl.Float64Var(&f.mrg, "margin", 0, "tail test: how much more often (a fraction) the canary may exceed the threshold")

	f.kube.addFlags(fl, "load: namespace of the pods")
	f.mesh.addFlags(fl)
	fl.StringSliceVar(&f.urls, "url", nil, "load: base URL of a new pod, e.g. http://10.0.0.5:8080 (repeatable)")
	fl.StringSliceVar(&f.stableURLs, "stable-url", nil, "load: base URL of a stable pod (repeatable)")
	fl.StringVar(&f.service, "service", "", "load: Service whose ready endpoints are the new pods (BlueGreen: the preview Service)")
	fl.StringVar(&f.stableService, "stable-service", "", "load: Service whose ready endpoints are the stable pods (BlueGreen: the active Service)")
	fl.StringVar(&f.selector, "selector", "", "load: label selector of the new pods (without --service)")
	fl.StringVar(&f.hash, "pod-template-hash", "", "load: keep only new pods of this ReplicaSet (and wait for all its replicas)")
	fl.StringVar(&f.stableHash, "stable-pod-template-hash", "", "load: the stable pods' ReplicaSet hash")
	fl.StringVar(&f.port, "port", "", "load: pod port, by name or number (default: the only one)")
	fl.StringSliceVar(&f.paths, "path", nil, "load: GET path, a template with << >> (repeatable; default /)")
	fl.StringVar(&f.healthPath, "health-path", "", "load: health path requested until 200 first (default: the pod's readinessProbe, else /)")
	fl.IntVar(&f.count, "count", 0, "load: measured requests, over all new pods (default 1000 without --duration)")
	fl.StringVar(&f.duration, "duration", "", "load: bound on the measured load in time, e.g. 60s")
	fl.Float64Var(&f.qps, "qps", 0, "load: requests per second per new pod (default 20)")
	fl.IntVar(&f.connections, "connections", 0, "load: connections per new pod (default 4)")
	fl.StringVar(&f.reqTimeout, "request-timeout", "", "load: per-request timeout (default 10s)")
	fl.Float64Var(&f.stableQPS, "stable-qps", 0, "load: cap on the total rate to the stable pods (default 10)")
	fl.BoolVar(&f.warmUp, "warm-up", true, "load: warm cold new pods until their latency converged before measuring")
	fl.BoolVar(&f.allowSideEffects, "allow-side-effects", false, "load: allow --config's requests other than GET, HEAD and OPTIONS (only if the app keeps requests with the marker header free of side effects)")
	return withCaps(cmd, &f.caps)
}

func runAnalyze(cmd *cobra.Command, f *analyzeFlags) error {
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("--output %q: use table or json", f.output)
	}
	if err := errors.Join(checkURLFlag("url", f.urls), checkURLFlag("stable-url", f.stableURLs)); err != nil {
		return err
	}
	cfg, err := f.config(cmd.Flags())
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	ctx := cmd.Context()
	// The command line's user is the operator: its files and any address;
	// source: load dials pods with danki's mesh identity as the flags say.
	pol, closeMesh, err := f.mesh.localPolicy(&f.kube, f.caps.local())
	if err != nil {
		return err
	}
	defer closeMesh()
	opts := []analysis.Option{analysis.WithPolicy(pol)}
	switch cfg.Source {
	case analysis.SourceLoad:
		opts = append(opts, analysis.WithKube(func() (kubernetes.Interface, error) {
			kube, _, err := warmupKubeClient(&f.kube)
			return kube, err
		}))
		ctx = analysis.WithProgress(ctx, func(p string) { fmt.Fprintf(stderr, "  %s\n", p) })
	}
	if cfg.Prometheus != nil && cfg.Prometheus.BearerTokenSecret != nil {
		// The Secret is read from -n (or the kubeconfig's namespace), as
		// the plugin reads it from the AnalysisRun's.
		ns, err := f.kube.namespace()
		if err != nil {
			return fmt.Errorf("prometheus.bearerTokenSecret: the namespace: %w (or give -n)", err)
		}
		ctx = analysis.ForNamespace(ctx, ns)
		opts = append(opts, analysis.WithKube(func() (kubernetes.Interface, error) {
			kube, _, err := warmupKubeClient(&f.kube)
			return kube, err
		}))
	}
	a, err := analysis.NewAnalyzer(cfg, opts...)
	if err != nil {
		return analyzeFlagError(err)
	}
	switch cfg.Source {
	case analysis.SourceLoad:
		fmt.Fprintf(stderr, "load test: %s …\n", strings.Join(a.Queries(), "; "))
	case analysis.SourceFortio:
	default:
		fmt.Fprintf(stderr, "querying %s (%s, window %s)…\n", cfg.Prometheus.Address, cfg.Source, a.Window())
	}
	v := a.Analyze(ctx, time.Now())

	out := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else if err := v.WriteTable(out, cfg.Source); err != nil {
		return err
	}
	// Fail and Inconclusive are verdicts, printed above: their own exit
	// codes, no "Error:" line.
	switch v.Phase {
	case analysis.Pass:
		return nil
	case analysis.Fail:
		return verdict(cmd, exitVerdict, fmt.Errorf("verdict %s", v.Phase), false)
	case analysis.Inconclusive:
		return verdict(cmd, exitInconclusive, fmt.Errorf("verdict %s", v.Phase), false)
	}
	return fmt.Errorf("could not measure: %s", v.Error)
}

// config builds the Config from --config and the flags that were set.
func (f *analyzeFlags) config(fl *pflag.FlagSet) (analysis.Config, error) {
	var c analysis.Config
	if f.configFile != "" {
		if err := config.DecodeFile(f.configFile, &c); err != nil {
			return c, fmt.Errorf("--config: %w", err)
		}
	}
	set := func(name string) bool { return f.configFile == "" || fl.Changed(name) }

	if set("source") {
		c.Source = f.source
	}
	if c.Source != analysis.SourceFortio && c.Source != analysis.SourceLoad && slices.ContainsFunc(analyzePrometheusFlags, func(fd analyzeField) bool { return set(fd.flag) }) {
		if c.Prometheus == nil {
			c.Prometheus = &analysis.PrometheusConfig{}
		}
		if err := f.apply(fl, &c, analyzePrometheusFlags, set); err != nil {
			return c, err
		}
	}
	if src, ok := analyzeSources[c.Source]; ok {
		src.block(&c)
		setField := set
		if src.changedOnly {
			setField = fl.Changed
		}
		if err := f.apply(fl, &c, src.fields, setField); err != nil {
			return c, err
		}
		if src.finish != nil {
			if err := src.finish(f, fl, &c, setField); err != nil {
				return c, err
			}
		}
	}

	if c.Source == analysis.SourceLoad {
		c.Window = analysis.Window{} // each measurement judges its own load
	} else if set("window") || c.Window.IsZero() || c.Window.Cumulative {
		if f.window == analysis.WindowCumulative {
			return c, errors.New(`--window cumulative needs an analysis start, which the CLI does not have; give a duration such as --window 10m`)
		}
		d, err := config.ParseDuration(f.window)
		if err != nil {
			return c, fmt.Errorf("--window: %w", err)
		}
		c.Window = analysis.FixedWindow(d)
	}
	if set("timeout") && f.timeout != "" {
		d, err := config.ParseDuration(f.timeout)
		if err != nil {
			return c, fmt.Errorf("--timeout: %w", err)
		}
		c.Timeout = config.Duration(d)
	}
	if fl.Changed("min-samples") {
		c.MinSamples = analyzeNumber(float64(f.minSamples))
	}
	if fl.Changed("min-tail-count") {
		c.MinTailCount = analyzeNumber(float64(f.minTailCount))
	}

	latency := map[string]**config.Duration{"p50": &c.SLO.P50, "p90": &c.SLO.P90, "p95": &c.SLO.P95, "p99": &c.SLO.P99, "p999": &c.SLO.P999, "max": &c.SLO.Max}
	for key, d := range f.latency {
		if fl.Changed(key) {
			if *d <= 0 {
				return c, fmt.Errorf("--%s %s: give a positive latency, e.g. 250ms", key, *d)
			}
			v := config.Duration(*d)
			*latency[key] = &v
		}
	}
	ratio := map[string]**config.Number{"p50": &c.SLO.Ratio.P50, "p90": &c.SLO.Ratio.P90, "p95": &c.SLO.Ratio.P95, "p99": &c.SLO.Ratio.P99, "p999": &c.SLO.Ratio.P999}
	for key, r := range f.ratio {
		if fl.Changed(key + "-ratio") {
			*ratio[key] = analyzeNumber(*r)
		}
	}
	if fl.Changed("max-error-rate") {
		// The plugin's own parsing: a fraction (0.01) or a percentage (1%).
		var n config.Number
		if err := json.Unmarshal([]byte(strconv.Quote(f.maxErrorRate)), &n); err != nil {
			return c, fmt.Errorf("--max-error-rate (slo.maxErrorRate): %q is not a number; write a fraction (0.01) or a percentage (1%%)", f.maxErrorRate)
		}
		c.SLO.MaxErrorRate = &n
	}
	if f.tailTest || fl.Changed("confidence") || fl.Changed("tail-quantile") || fl.Changed("margin") {
		if c.TailTest == nil {
			c.TailTest = &analysis.TailTestConfig{}
		}
		num := func(name string, v float64, dst **config.Number) {
			if fl.Changed(name) {
				*dst = analyzeNumber(v)
			}
		}
		num("confidence", f.confidence, &c.TailTest.Confidence)
		num("tail-quantile", f.tailQuantile, &c.TailTest.Quantile)
		num("margin", f.mrg, &c.TailTest.Margin)
	}
	return c, nil
}

// analyzeField is one flag that sets one field of the config: a string
// field (str: set to the flag's value when that is not empty), or any
// other (set).
type analyzeField struct {
	flag string
	str  func(c *analysis.Config) *string
	set  func(f *analyzeFlags, c *analysis.Config) error
}

// analyzeSource is how the flags fill one source's block.
type analyzeSource struct {
	// block creates the source's block when --config has none.
	block func(c *analysis.Config)
	// changedOnly: a field is set only by a flag given on the command line,
	// even without --config (the load flags' defaults are not the block's).
	changedOnly bool
	fields      []analyzeField
	// finish sets what is more than one flag to one field.
	finish func(f *analyzeFlags, fl *pflag.FlagSet, c *analysis.Config, set func(string) bool) error
}

// apply sets the fields whose flags set reports.
func (f *analyzeFlags) apply(fl *pflag.FlagSet, c *analysis.Config, fields []analyzeField, set func(string) bool) error {
	for _, fd := range fields {
		if !set(fd.flag) {
			continue
		}
		if fd.str != nil {
			if v := fl.Lookup(fd.flag).Value.String(); v != "" {
				*fd.str(c) = v
			}
			continue
		}
		if err := fd.set(f, c); err != nil {
			return err
		}
	}
	return nil
}

// analyzePrometheusFlags set the prometheus block of the sources that read
// Prometheus.
var analyzePrometheusFlags = []analyzeField{
	{flag: "prometheus", str: func(c *analysis.Config) *string { return &c.Prometheus.Address }},
	{flag: "bearer-token", str: func(c *analysis.Config) *string { return &c.Prometheus.BearerToken }},
	{flag: "bearer-token-file", str: func(c *analysis.Config) *string { return &c.Prometheus.BearerTokenFile }},
	{flag: "ca-file", str: func(c *analysis.Config) *string { return &c.Prometheus.CAFile }},
	{flag: "insecure-skip-verify", set: func(f *analyzeFlags, c *analysis.Config) error {
		c.Prometheus.InsecureSkipVerify = f.insecureSkipVerify
		return nil
	}},
}

// analyzeSources are, per source, the flags that set its block's fields.
var analyzeSources = map[string]analyzeSource{
	analysis.SourceIstio: {
		block: func(c *analysis.Config) {
			if c.Istio == nil {
				c.Istio = &analysis.IstioConfig{}
			}
		},
		fields: []analyzeField{
			{flag: "reporter", str: func(c *analysis.Config) *string { return &c.Istio.Reporter }},
			{flag: "canary", str: func(c *analysis.Config) *string { return &c.Istio.Canary.Service }},
			{flag: "canary-workload", str: func(c *analysis.Config) *string { return &c.Istio.Canary.Workload }},
			{flag: "canary-version", str: func(c *analysis.Config) *string { return &c.Istio.Canary.Version }},
			{flag: "workload-namespace", str: func(c *analysis.Config) *string { return &c.Istio.Canary.Namespace }},
		},
		finish: analyzeIstioStable,
	},
	analysis.SourceEnvoy: {
		block: func(c *analysis.Config) {
			if c.Envoy == nil {
				c.Envoy = &analysis.EnvoyConfig{}
			}
		},
		fields: []analyzeField{
			{flag: "canary", str: func(c *analysis.Config) *string { return &c.Envoy.CanaryCluster }},
			{flag: "stable", str: func(c *analysis.Config) *string { return &c.Envoy.StableCluster }},
			{flag: "response-code-label", str: func(c *analysis.Config) *string { return &c.Envoy.ResponseCodeLabel }},
		},
	},
	analysis.SourcePromQL: {
		block: func(c *analysis.Config) {
			if c.PromQL == nil {
				c.PromQL = &analysis.PromQLConfig{}
			}
		},
		fields: []analyzeField{
			{flag: "canary", str: func(c *analysis.Config) *string { return &c.PromQL.Canary }},
			{flag: "stable", str: func(c *analysis.Config) *string { return &c.PromQL.Stable }},
			{flag: "histogram-query", str: func(c *analysis.Config) *string { return &c.PromQL.Histogram }},
			{flag: "requests-query", str: func(c *analysis.Config) *string { return &c.PromQL.Requests }},
			{flag: "errors-query", str: func(c *analysis.Config) *string { return &c.PromQL.Errors }},
			{flag: "unit", str: func(c *analysis.Config) *string { return &c.PromQL.Unit }},
		},
	},
	analysis.SourceFortio: {
		block: func(c *analysis.Config) {
			if c.Fortio == nil {
				c.Fortio = &analysis.FortioConfig{}
			}
		},
		fields: []analyzeField{
			{flag: "canary", str: func(c *analysis.Config) *string { return &c.Fortio.Canary }},
			{flag: "stable", str: func(c *analysis.Config) *string { return &c.Fortio.Stable }},
		},
	},
	analysis.SourceLoad: {
		block: func(c *analysis.Config) {
			if c.Load == nil {
				c.Load = &analysis.LoadConfig{}
			}
		},
		changedOnly: true,
		fields: []analyzeField{
			{flag: "url", set: func(f *analyzeFlags, c *analysis.Config) error { c.Load.URLs = f.urls; return nil }},
			{flag: "stable-url", set: func(f *analyzeFlags, c *analysis.Config) error { c.Load.StableURLs = f.stableURLs; return nil }},
			{flag: "service", str: func(c *analysis.Config) *string { return &c.Load.Service }},
			{flag: "stable-service", str: func(c *analysis.Config) *string { return &c.Load.StableService }},
			{flag: "selector", str: func(c *analysis.Config) *string { return &c.Load.Selector }},
			{flag: "pod-template-hash", str: func(c *analysis.Config) *string { return &c.Load.PodTemplateHash }},
			{flag: "stable-pod-template-hash", str: func(c *analysis.Config) *string { return &c.Load.StablePodTemplateHash }},
			{flag: "health-path", str: func(c *analysis.Config) *string { return &c.Load.HealthPath }},
			{flag: "port", set: func(f *analyzeFlags, c *analysis.Config) error { c.Load.Port = intstr.Parse(f.port); return nil }},
			{flag: "path", set: func(f *analyzeFlags, c *analysis.Config) error {
				c.Load.Requests = nil
				for _, p := range f.paths {
					c.Load.Requests = append(c.Load.Requests, warmup.RequestSpec{Path: p})
				}
				return nil
			}},
			{flag: "count", set: func(f *analyzeFlags, c *analysis.Config) error {
				c.Load.Count = analyzeNumber(float64(f.count))
				return nil
			}},
			{flag: "qps", set: func(f *analyzeFlags, c *analysis.Config) error { c.Load.QPS = analyzeNumber(f.qps); return nil }},
			{flag: "connections", set: func(f *analyzeFlags, c *analysis.Config) error {
				c.Load.Connections = analyzeNumber(float64(f.connections))
				return nil
			}},
			{flag: "stable-qps", set: func(f *analyzeFlags, c *analysis.Config) error {
				c.Load.StableQPS = analyzeNumber(f.stableQPS)
				return nil
			}},
			{flag: "warm-up", set: func(f *analyzeFlags, c *analysis.Config) error { c.Load.WarmUp = &f.warmUp; return nil }},
			{flag: "allow-side-effects", set: func(f *analyzeFlags, c *analysis.Config) error {
				c.Load.AllowSideEffects = f.allowSideEffects
				return nil
			}},
			{flag: "duration", set: func(f *analyzeFlags, c *analysis.Config) error {
				return analyzeDuration("duration", f.duration, &c.Load.Duration)
			}},
			{flag: "request-timeout", set: func(f *analyzeFlags, c *analysis.Config) error {
				return analyzeDuration("request-timeout", f.reqTimeout, &c.Load.RequestTimeout)
			}},
		},
		finish: analyzeLoadNamespace,
	},
}

// analyzeIstioStableFlags set istio.stable: one flag, --workload-namespace,
// sets both sides' namespace.
var analyzeIstioStableFlags = []analyzeField{
	{flag: "stable", str: func(c *analysis.Config) *string { return &c.Istio.Stable.Service }},
	{flag: "stable-workload", str: func(c *analysis.Config) *string { return &c.Istio.Stable.Workload }},
	{flag: "stable-version", str: func(c *analysis.Config) *string { return &c.Istio.Stable.Version }},
	{flag: "workload-namespace", str: func(c *analysis.Config) *string { return &c.Istio.Stable.Namespace }},
}

// analyzeIstioStable fills istio.stable when a stable selector is given:
// without one there is no stable side, whatever --workload-namespace says.
func analyzeIstioStable(f *analyzeFlags, fl *pflag.FlagSet, c *analysis.Config, set func(string) bool) error {
	if f.stable == "" && f.stableWorkload == "" && f.stableVersion == "" {
		return nil
	}
	if c.Istio.Stable == nil {
		c.Istio.Stable = &analysis.IstioSelector{}
	}
	return f.apply(fl, c, analyzeIstioStableFlags, set)
}

// analyzeLoadNamespace sets load.namespace from -n or the kubeconfig
// context when pods are looked up.
func analyzeLoadNamespace(f *analyzeFlags, _ *pflag.FlagSet, c *analysis.Config, _ func(string) bool) error {
	if c.Load.Namespace == "" && len(c.Load.URLs) == 0 {
		ns, err := f.kube.namespace()
		if err != nil {
			return fmt.Errorf("the namespace: %w (or give -n, or --url)", err)
		}
		c.Load.Namespace = ns
	}
	return nil
}

// analyzeDuration parses the duration flag --name into dst.
func analyzeDuration(name, v string, dst *config.Duration) error {
	d, err := config.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	*dst = config.Duration(d)
	return nil
}

func analyzeNumber(v float64) *config.Number {
	n := config.Number(v)
	return &n
}

// analyzeFlagNames translates config field paths in validation errors into the
// flags that set them.
var analyzeFlagNames = strings.NewReplacer(
	"prometheus.address", "--prometheus (prometheus.address)",
	"prometheus.bearerTokenFile", "--bearer-token-file (prometheus.bearerTokenFile)",
	"prometheus.caFile", "--ca-file (prometheus.caFile)",
	"istio.canary:", "--canary (istio.canary):",
	"envoy.canaryCluster", "--canary (envoy.canaryCluster)",
	"promql.canary", "--canary (promql.canary)",
	"promql.histogram", "--histogram-query (promql.histogram)",
	"promql.requests", "--requests-query (promql.requests)",
	"fortio.canary", "--canary (fortio.canary)",
	"set istio.stable", "set --stable (istio.stable)",
	"set envoy.stableCluster", "set --stable (envoy.stableCluster)",
	"set promql.stable", "set --stable (promql.stable)",
	"set fortio.stable", "set --stable (fortio.stable)",
	"slo.maxErrorRate", "--max-error-rate (slo.maxErrorRate)",
	"slo.max:", "--max (slo.max):",
	"tailTest.confidence", "--confidence (tailTest.confidence)",
	"tailTest.quantile", "--tail-quantile (tailTest.quantile)",
	"tailTest.margin", "--margin (tailTest.margin)",
	"window:", "--window:",
	"source:", "--source:",
	// The warm-up's side-effect checks name its field, allowSideEffects
	// (longest first: the replacer tries them in this order).
	"load.allowSideEffects", "--allow-side-effects (load.allowSideEffects)",
	"allowSideEffects is true", "--allow-side-effects is given (load.allowSideEffects: true)",
	"allowSideEffects", "--allow-side-effects (load.allowSideEffects)",
)

func analyzeFlagError(err error) error { return errors.New(analyzeFlagNames.Replace(err.Error())) }
