package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// analyzeFlags holds the flag values; apply copies the ones set into a Config.
type analyzeFlags struct {
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
	urls, stableURLs, paths          []string
	service, stableService, selector string
	hash, stableHash, port           string
	healthPath, duration, reqTimeout string
	count, connections               int
	qps, stableQPS                   float64
	warmUp                           bool
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
'/items/<<randInt 1 5000>>'); a full request mix goes in --config.

Exit status: 0 only when every SLO holds (Pass); non-zero on Fail,
Inconclusive (not enough data — never a pass) and Error. See docs/latency.md.`,
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
	return cmd
}

func runAnalyze(cmd *cobra.Command, f *analyzeFlags) error {
	if f.output != "table" && f.output != "json" {
		return fmt.Errorf("--output %q: use table or json", f.output)
	}
	cfg, err := f.config(cmd.Flags())
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	ctx := cmd.Context()
	// The command line's user is the operator: its files and any address.
	opts := []analysis.Option{analysis.WithPolicy(policy.Local())}
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
			return fmt.Errorf("prometheus.bearerTokenSecret: kubeconfig namespace: %w (give -n)", err)
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
	switch v.Phase {
	case analysis.Pass:
		return nil
	case analysis.Error:
		return fmt.Errorf("could not measure: %s", v.Error)
	}
	return fmt.Errorf("verdict %s", v.Phase)
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
	if c.Source != analysis.SourceFortio && c.Source != analysis.SourceLoad && (set("prometheus") || set("bearer-token") || set("bearer-token-file") || set("ca-file") || set("insecure-skip-verify")) {
		if c.Prometheus == nil {
			c.Prometheus = &analysis.PrometheusConfig{}
		}
		p := c.Prometheus
		analyzeAssign(set("prometheus"), &p.Address, f.prometheus)
		analyzeAssign(set("bearer-token"), &p.BearerToken, f.bearerToken)
		analyzeAssign(set("bearer-token-file"), &p.BearerTokenFile, f.bearerTokenFile)
		analyzeAssign(set("ca-file"), &p.CAFile, f.caFile)
		if set("insecure-skip-verify") {
			p.InsecureSkipVerify = f.insecureSkipVerify
		}
	}

	switch c.Source {
	case analysis.SourceIstio:
		if c.Istio == nil {
			c.Istio = &analysis.IstioConfig{}
		}
		ic := c.Istio
		analyzeAssign(set("reporter"), &ic.Reporter, f.reporter)
		analyzeAssign(set("canary"), &ic.Canary.Service, f.canary)
		analyzeAssign(set("canary-workload"), &ic.Canary.Workload, f.canaryWorkload)
		analyzeAssign(set("canary-version"), &ic.Canary.Version, f.canaryVersion)
		analyzeAssign(set("workload-namespace"), &ic.Canary.Namespace, f.workloadNamespace)
		if f.stable != "" || f.stableWorkload != "" || f.stableVersion != "" {
			if ic.Stable == nil {
				ic.Stable = &analysis.IstioSelector{}
			}
			analyzeAssign(set("stable"), &ic.Stable.Service, f.stable)
			analyzeAssign(set("stable-workload"), &ic.Stable.Workload, f.stableWorkload)
			analyzeAssign(set("stable-version"), &ic.Stable.Version, f.stableVersion)
			analyzeAssign(set("workload-namespace"), &ic.Stable.Namespace, f.workloadNamespace)
		}
	case analysis.SourceEnvoy:
		if c.Envoy == nil {
			c.Envoy = &analysis.EnvoyConfig{}
		}
		analyzeAssign(set("canary"), &c.Envoy.CanaryCluster, f.canary)
		analyzeAssign(set("stable"), &c.Envoy.StableCluster, f.stable)
		analyzeAssign(set("response-code-label"), &c.Envoy.ResponseCodeLabel, f.responseCodeLabel)
	case analysis.SourcePromQL:
		if c.PromQL == nil {
			c.PromQL = &analysis.PromQLConfig{}
		}
		pc := c.PromQL
		analyzeAssign(set("canary"), &pc.Canary, f.canary)
		analyzeAssign(set("stable"), &pc.Stable, f.stable)
		analyzeAssign(set("histogram-query"), &pc.Histogram, f.histogram)
		analyzeAssign(set("requests-query"), &pc.Requests, f.requests)
		analyzeAssign(set("errors-query"), &pc.Errors, f.errorsQuery)
		analyzeAssign(set("unit"), &pc.Unit, f.unit)
	case analysis.SourceFortio:
		if c.Fortio == nil {
			c.Fortio = &analysis.FortioConfig{}
		}
		analyzeAssign(set("canary"), &c.Fortio.Canary, f.canary)
		analyzeAssign(set("stable"), &c.Fortio.Stable, f.stable)
	case analysis.SourceLoad:
		if err := f.loadConfig(fl, &c); err != nil {
			return c, err
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

// loadConfig fills c.Load from the load flags that were set (all of them
// without --config), with the namespace from -n or the kubeconfig context
// when pods are looked up.
func (f *analyzeFlags) loadConfig(fl *pflag.FlagSet, c *analysis.Config) error {
	if c.Load == nil {
		c.Load = &analysis.LoadConfig{}
	}
	l := c.Load
	changed := func(name string) bool { return fl.Changed(name) }
	if changed("url") {
		l.URLs = f.urls
	}
	if changed("stable-url") {
		l.StableURLs = f.stableURLs
	}
	analyzeAssign(changed("service"), &l.Service, f.service)
	analyzeAssign(changed("stable-service"), &l.StableService, f.stableService)
	analyzeAssign(changed("selector"), &l.Selector, f.selector)
	analyzeAssign(changed("pod-template-hash"), &l.PodTemplateHash, f.hash)
	analyzeAssign(changed("stable-pod-template-hash"), &l.StablePodTemplateHash, f.stableHash)
	analyzeAssign(changed("health-path"), &l.HealthPath, f.healthPath)
	if changed("port") {
		l.Port = intstr.Parse(f.port)
	}
	if changed("path") {
		l.Requests = nil
		for _, p := range f.paths {
			l.Requests = append(l.Requests, warmup.RequestSpec{Path: p})
		}
	}
	if changed("count") {
		l.Count = analyzeNumber(float64(f.count))
	}
	if changed("qps") {
		l.QPS = analyzeNumber(f.qps)
	}
	if changed("connections") {
		l.Connections = analyzeNumber(float64(f.connections))
	}
	if changed("stable-qps") {
		l.StableQPS = analyzeNumber(f.stableQPS)
	}
	if changed("warm-up") {
		l.WarmUp = &f.warmUp
	}
	for name, dst := range map[string]*config.Duration{"duration": &l.Duration, "request-timeout": &l.RequestTimeout} {
		v := map[string]string{"duration": f.duration, "request-timeout": f.reqTimeout}[name]
		if changed(name) {
			d, err := config.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("--%s: %w", name, err)
			}
			*dst = config.Duration(d)
		}
	}
	if l.Namespace == "" && len(l.URLs) == 0 {
		ns, err := f.kube.namespace()
		if err != nil {
			return fmt.Errorf("kubeconfig namespace: %w (give -n, or --url)", err)
		}
		l.Namespace = ns
	}
	return nil
}

func analyzeNumber(v float64) *config.Number {
	n := config.Number(v)
	return &n
}

func analyzeAssign(ok bool, dst *string, v string) {
	if ok && v != "" {
		*dst = v
	}
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
)

func analyzeFlagError(err error) error { return errors.New(analyzeFlagNames.Replace(err.Error())) }
