package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/warmup"
)

// warmupFlags are the `danki warmup` flags that do not map 1:1 onto
// warmup.Config; those that do parse straight into cfg (warmupConfigFlags).
type warmupFlags struct {
	urls, stableURLs              []string
	kube                          kubeFlags
	mesh                          meshFlags
	caps                          capFlags
	service, selector, hash, port string
	stableService, stableHash     string
	minPods                       int
	rejectSlower, rejectSlowerSet bool
	cpuBudget                     cpuBudgetFlag
	paths, headers                []string
	method, body, requestFile     string
	grpcMethods, grpcMetadata     []string
	grpcMessage                   string
	jsonOut                       string
	cfg                           warmup.Config
	progressEvery                 time.Duration
	stderrIsTerminal              func() bool
	newKube                       func(k *kubeFlags) (kubernetes.Interface, string, error)
}

func newWarmupCmd() *cobra.Command {
	cmd, _ := warmupCmd()
	return cmd
}

// warmupCmd is `danki warmup` and the flags it parses into.
func warmupCmd() (*cobra.Command, *warmupFlags) {
	f := &warmupFlags{
		progressEvery: time.Second,
		stderrIsTerminal: func() bool {
			return term.IsTerminal(int(os.Stderr.Fd()))
		},
		newKube: warmupKubeClient,
	}
	cmd := &cobra.Command{
		Use:   "warmup",
		Short: "Warm pods with synthetic load until their latency converges",
		Long: `Send synthetic fortio load straight at pods (or URLs) until their latency has
converged: a target is warm once its latency stopped improving, or, with
stable pods (--stable-url, --stable-service or --stable-hash) loaded side by
side, once it is as fast as theirs (or, short of that, settled within
--stable-ratio of theirs for half its warm-up); a target that settles far
slower than stable is rejected (a slower version). The result names the rule
that called each target warm, with its thresholds. What warm means, the knobs
worth turning and how to read the result: docs/warmup.md. The stopping rule
itself, once: docs/stopping-rule.md.
Fails (exit code 1) at --deadline or --max-requests without convergence, with
the latency trend; a target failing 20 requests in a row fails at once, with
its last error (exit code 3).
Each target's pace starts at --start-qps (default --qps / 8) and doubles while
the pod keeps up, up to --qps, within --cpu-budget cores if set; with stable
pods it is halved while their latency rises (--neighbour-guard), and each
back-off is printed. Where a pod exposes its JIT's compile time
(--jit-metrics-path), a pod whose JIT still compiles is not called warm.
Every request carries the marker header X-Danki-Warmup: 1; only GET, HEAD and
OPTIONS are sent unless --allow-side-effects.

gRPC services: --grpc-method package.Service/Method (with --grpc-message, a
JSON template of the request message) or --request-file entries with grpc:
calls unary methods over plaintext HTTP/2 straight to each pod (--url
http://host:port), --connections channels per pod, with the marker metadata
x-danki-warmup: 1. Message types come from the server's reflection service,
or from --grpc-descriptor-set. A method is only called when its .proto marks
it option idempotency_level = NO_SIDE_EFFECTS, it is listed with
--grpc-safe-method, or --allow-side-effects is set. The health wait then uses
the gRPC health protocol (grpc.health.v1.Health/Check until SERVING; see
--health-protocol); non-OK status codes count as errors.

Targets: --url (repeatable), or pods in Kubernetes: the ready endpoints of
--service, or the Running+Ready pods matching --selector, optionally only those
with rollouts-pod-template-hash=--hash. Each pod is loaded directly at its pod
IP (reach the pod network, e.g. from inside the cluster).

A live progress line goes to stderr; the table of windows (requests, p50, p90,
p99, max, errors) goes to stdout at the end. --json writes fortio's result JSON.
With --until-converged=false every target gets exactly --max-requests requests
(a fixed warm-up count, any number) and the table shows how latency fell (a
measurement, not a gate: exit code 0 whatever the latency did).

Exit status:
  0  warm (converged, or accepted near stable); with --until-converged=false,
     the fixed load was sent
  1  not warm: no convergence by --deadline or --max-requests, or rejected as
     a slower version (the reason on stderr)
  3  error: bad flags, no targets, targets unhealthy or failing every
     request, Ctrl-C ("Error: …" on stderr)

"danki warmup mirror" warms a canary on a mirrored share of the users' own
requests instead (Istio mirroring on the VirtualService, judged from
Prometheus histograms).

See docs/warmup.md.`,
		Example: `  danki warmup --url http://127.0.0.1:8080 --path /api/items --max-requests 2000
  danki warmup -n shop --service cart-canary --port http --request-file requests.yaml --json warmup.json
  danki warmup -n shop --selector app=cart --hash 6d4f9c7b8 --compare-to-stable --stable-hash 5c8d7f6a9
  danki warmup --url http://127.0.0.1:9090 --grpc-method shop.Catalog/GetItem --grpc-message '{"id": "{{randInt 1 5000}}"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd)
		},
	}
	cmd.AddCommand(newWarmupMirrorCmd(func() bool { return f.stderrIsTerminal() }))
	fl := cmd.Flags()
	fl.StringArrayVar(&f.urls, "url", nil, "target base URL http://host:port (repeatable)")
	f.kube.addFlags(fl, "namespace of the pods")
	f.mesh.addFlags(fl)
	fl.StringVar(&f.service, "service", "", "warm the ready endpoints of this Service")
	fl.StringVar(&f.selector, "selector", "", "warm the Running+Ready pods matching this label selector")
	fl.StringVar(&f.hash, "hash", "", "only pods with this rollouts-pod-template-hash (the canary ReplicaSet)")
	fl.StringVar(&f.port, "port", "", "pod port, name or number (default: the pods' only port)")
	fl.IntVar(&f.minPods, "min-pods", 1, "wait (up to --health-timeout) until this many pods are ready")

	// The flags that set a config field as they are: flagtable.go.
	warmupConfigFlags.register(fl, &f.cfg)
	fl.Var(&f.cpuBudget, "cpu-budget", "cores the warm-up's requests may keep busy per target (rate × mean latency): cores as in a pod's resources (0.25, 250m), or a share of each pod's CPU request (50%: half of it; pods only); 0: none")

	fl.StringArrayVar(&f.paths, "path", nil, "request path (and query) to send, a template; repeatable, equal weights (default /)")
	fl.StringVar(&f.method, "method", "GET", "method for --path requests")
	fl.StringArrayVar(&f.headers, "header", nil, `header "Name: value" for --path requests (repeatable; value is a template)`)
	fl.StringVar(&f.body, "body", "", "body template for --path requests")
	fl.StringVar(&f.requestFile, "request-file", "", "YAML/JSON list of requests {method, path, headers, body, weight} or {grpc: {method, message, metadata}, weight} (see docs/warmup.md)")
	fl.StringArrayVar(&f.grpcMethods, "grpc-method", nil, "gRPC method package.Service/Method to call instead of HTTP paths; repeatable, equal weights")
	fl.StringVar(&f.grpcMessage, "grpc-message", "", `request message for --grpc-method, protobuf JSON, a template (default "{}")`)
	fl.StringArrayVar(&f.grpcMetadata, "grpc-metadata", nil, `metadata "key: value" for --grpc-method calls (repeatable; value is a template)`)

	fl.StringArrayVar(&f.stableURLs, "stable-url", nil, "stable base URL (repeatable)")
	fl.StringVar(&f.stableService, "stable-service", "", "stable pods: ready endpoints of this Service")
	fl.StringVar(&f.stableHash, "stable-hash", "", "stable pods: --selector plus this rollouts-pod-template-hash")
	fl.BoolVar(&f.rejectSlower, "reject-slower-version", true, "fail when a converged target stays above --reject-ratio × the stable pods' p99 (needs stable pods; on by default when they are given)")
	fl.StringVar(&f.jsonOut, "json", "", "write fortio's result JSON (all targets merged) to this file")
	return withCaps(cmd, &f.caps), f
}

// warmupPositiveFlags are the `danki warmup` flags whose zero the warm-up
// would silently take as "the default": set to 0 (or below) they are an
// error instead.
var warmupPositiveFlags = append(warmupConfigFlags.positive(), "min-pods")

// refuseZeroFlags refuses the named flags when they were set to 0 or less:
// their config field would take its default at zero, so --connections 0
// would silently mean 4 connections. field names a flag's config field.
func refuseZeroFlags(fl *pflag.FlagSet, field func(flag string) string, names ...string) error {
	var errs []error
	for _, name := range names {
		f := fl.Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		var positive bool
		switch v := f.Value.String(); f.Value.Type() {
		case "duration":
			d, err := time.ParseDuration(v)
			positive = err == nil && d > 0
		default:
			x, err := strconv.ParseFloat(v, 64)
			positive = err == nil && x > 0
		}
		if !positive {
			errs = append(errs, fmt.Errorf("--%s %s (%s): must be > 0 (0 is not \"the default\": leave the flag out for its default, %s)", name, f.Value, field(name), f.DefValue))
		}
	}
	return errors.Join(errs...)
}

// flagField is the config field a flag sets when the config names its
// fields after the flags, as validation errors name them: --start-qps is
// startQPS, --p99-ratio p99Ratio. The warm-up's fields: warmupConfigFlags.
func flagField(name string) string {
	parts := strings.Split(name, "-")
	for i, p := range parts[1:] {
		if p == "qps" {
			parts[i+1] = "QPS"
		} else {
			parts[i+1] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

func (f *warmupFlags) run(cmd *cobra.Command) error {
	f.rejectSlowerSet = cmd.Flags().Changed("reject-slower-version")
	if err := refuseZeroFlags(cmd.Flags(), warmupConfigFlags.field, warmupPositiveFlags...); err != nil {
		return err
	}
	if err := errors.Join(checkURLFlag("url", f.urls), checkURLFlag("stable-url", f.stableURLs)); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if err := checkOutputFile("json", f.jsonOut); err != nil {
		return err
	}
	pol, closeMesh, err := f.mesh.localPolicy(&f.kube, f.caps.local())
	if err != nil {
		return err
	}
	defer closeMesh()
	cfg.Policy = &pol
	ctx := cmd.Context() // cancelled by Ctrl-C or SIGTERM (main)
	stderr := cmd.ErrOrStderr()

	targets, stable, err := f.targets(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	progress := newWarmupProgressLine(stderr, f.stderrIsTerminal(), f.progressEvery)
	res, err := warmup.Run(ctx, cfg, targets, warmup.Options{
		Stable:     stable,
		OnProgress: progress.update,
	})
	progress.end()
	if res == nil {
		return warmupOutcome(cmd, err)
	}
	if werr := res.WriteTable(cmd.OutOrStdout()); werr != nil {
		return werr
	}
	if f.jsonOut != "" {
		if jerr := warmupWriteFile(f.jsonOut, res.WriteFortioJSON); jerr != nil {
			return errors.Join(err, fmt.Errorf("--json %s: %w", f.jsonOut, jerr))
		}
	}
	return warmupOutcome(cmd, err)
}

// config turns the flags into a warm-up config, validated.
func (f *warmupFlags) config() (warmup.Config, error) {
	cfg := f.cfg
	if b := f.cpuBudget.CPUBudget; b != (config.CPUBudget{}) {
		if b.Share != 0 && len(f.urls) > 0 {
			return cfg, fmt.Errorf("--cpu-budget %s: a share of the CPU request needs pods (--service, --selector, --hash) to read it from; with --url give cores, e.g. --cpu-budget 0.25", b)
		}
		cfg.CPUBudget = &b
	}
	if f.rejectSlowerSet {
		reject := f.rejectSlower
		cfg.RejectSlowerVersion = &reject
	}
	switch {
	case f.requestFile != "" && len(f.paths) > 0:
		return cfg, errors.New("--request-file and --path both give the requests: use one")
	case len(f.grpcMethods) > 0 && (f.requestFile != "" || len(f.paths) > 0):
		return cfg, errors.New("--grpc-method and --path/--request-file both give the requests: use one")
	case len(f.grpcMethods) == 0 && (f.grpcMessage != "" || len(f.grpcMetadata) > 0):
		return cfg, errors.New("--grpc-message and --grpc-metadata need --grpc-method")
	case len(f.grpcMethods) > 0:
		md := map[string]string{}
		for _, h := range f.grpcMetadata {
			name, value, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return cfg, fmt.Errorf("--grpc-metadata %q: write \"key: value\"", h)
			}
			md[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		for _, m := range f.grpcMethods {
			cfg.Requests = append(cfg.Requests, warmup.RequestSpec{GRPC: &warmup.GRPCRequest{Method: m, Message: f.grpcMessage, Metadata: md}})
		}
	case f.requestFile != "":
		reqs, err := readWarmupRequestFile(f.requestFile)
		if err != nil {
			return cfg, err
		}
		cfg.Requests = reqs
	default:
		paths := f.paths
		if len(paths) == 0 {
			paths = []string{"/"}
		}
		headers := map[string]string{}
		for _, h := range f.headers {
			name, value, ok := strings.Cut(h, ":")
			if !ok || strings.TrimSpace(name) == "" {
				return cfg, fmt.Errorf("--header %q: write \"Name: value\"", h)
			}
			headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		for _, p := range paths {
			cfg.Requests = append(cfg.Requests, warmup.RequestSpec{Method: f.method, Path: p, Headers: headers, Body: f.body})
		}
	}
	local := f.caps.local()
	cfg.Policy = &local
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, &flagNamedError{err: err,
			msg: "invalid warm-up settings (fields as in the step plugin config, see docs/warmup.md): " + warmupConfigFlags.nameFlags(err)}
	}
	return cfg, checkRoomToConverge(cfg)
}

// warmupOutcome is the warm-up's error as the command returns it: not
// converged or rejected as a slower version is a verdict (exit 1, the
// reason on stderr); anything else an error (exit 3), its config fields
// named by their flags.
func warmupOutcome(cmd *cobra.Command, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, warmup.ErrNotConverged), errors.Is(err, warmup.ErrSlowerVersion):
		return verdict(cmd, exitVerdict, err, true)
	}
	if msg := warmupConfigFlags.nameFlags(err); msg != err.Error() {
		return &flagNamedError{msg: msg, err: err}
	}
	return err
}

// readWarmupRequestFile reads a YAML or JSON list of requests, or an object
// with a "requests" list, strictly (unknown fields are errors that name
// their path).
func readWarmupRequestFile(path string) ([]warmup.RequestSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--request-file: %w", err)
	}
	// A bare list is the requests field of the step config.
	if js, err := yaml.YAMLToJSONStrict(data); err == nil && bytes.HasPrefix(bytes.TrimSpace(js), []byte("[")) {
		data = append(append([]byte(`{"requests":`), js...), '}')
	}
	var file struct {
		Requests []warmup.RequestSpec `json:"requests"`
	}
	if err := config.Decode(data, &file); err != nil {
		return nil, fmt.Errorf("--request-file %s: %w", path, err)
	}
	if len(file.Requests) == 0 {
		return nil, fmt.Errorf("--request-file %s: no requests in it", path)
	}
	return file.Requests, nil
}

// targets finds the targets the flags name, the way the step plugin does
// (warmup.FindTargets).
func (f *warmupFlags) targets(ctx context.Context, cfg warmup.Config, stderr io.Writer) (canary, stable []warmup.Target, err error) {
	canaryPods := f.service != "" || f.selector != "" || f.hash != ""
	stablePods := f.stableService != "" || f.stableHash != ""
	switch {
	case len(f.urls) > 0 && canaryPods:
		return nil, nil, errors.New("give either --url or pods (--service / --selector / --hash), not both")
	case len(f.urls) == 0 && !canaryPods:
		return nil, nil, errors.New("nothing to warm: give --url http://host:port, or pods with --service, --selector and/or --hash")
	}
	// Stable pods are needed for --compare-to-stable and an explicit
	// --reject-slower-version; by default the rejection uses them when
	// they are given.
	_, required := cfg.WantsStable()
	if required && len(f.stableURLs) == 0 && !stablePods {
		return nil, nil, errors.New("--compare-to-stable and --reject-slower-version need the stable pods: --stable-url, --stable-service, or --selector with --stable-hash")
	}
	lookStable := len(f.stableURLs) > 0 || stablePods
	port := intstr.IntOrString{}
	if f.port != "" {
		port = intstr.Parse(f.port)
	}
	q := warmup.TargetQuery{
		Canary: warmup.TargetSource{URLs: f.urls, URLsField: "--url",
			Pods: warmup.KubeTargets{Service: f.service, Selector: f.selector, PodTemplateHash: f.hash, Port: port}},
		Stable: warmup.TargetSource{URLs: f.stableURLs, URLsField: "--stable-url",
			Pods: warmup.KubeTargets{Service: f.stableService, Selector: f.selector, PodTemplateHash: f.stableHash, Port: port}},
		CompareToStable: lookStable,
		MinPods:         f.minPods,
		Timeout:         cfg.HealthTimeout.D(),
		OnLookup:        func(k warmup.KubeTargets) { fmt.Fprintf(stderr, "finding %s …\n", k) },
	}
	if canaryPods || (lookStable && len(f.stableURLs) == 0) {
		kube, ns, err := f.newKube(&f.kube)
		if err != nil {
			return nil, nil, err
		}
		q.Canary.Pods.Namespace = ns
		q.Stable.Pods.Namespace = q.Canary.Pods.Namespace
		q.Kube = func() (kubernetes.Interface, error) { return kube, nil }
	}
	canary, stable, err = warmup.FindTargets(ctx, q)
	for _, t := range append(slices.Clone(canary), stable...) {
		fmt.Fprintf(stderr, "  %s\n", t)
	}
	return canary, stable, err
}

// warmupKubeClient builds a client from the kube flags (kubectl's rules:
// --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster) and returns the
// namespace: --namespace, else the context's.
func warmupKubeClient(k *kubeFlags) (kubernetes.Interface, string, error) {
	rc, err := k.restConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%w; or warm --url targets", err)
	}
	ns, err := k.namespace()
	if err != nil {
		return nil, "", fmt.Errorf("the namespace: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return kube, ns, nil
}

func warmupWriteFile(path string, write func(io.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// warmupProgressLine shows warm-up progress on stderr: one line rewritten in place
// on a terminal, else a line at most every `every`.
type warmupProgressLine struct {
	w        io.Writer
	terminal bool
	every    time.Duration
	last     time.Time
	shown    bool
}

func newWarmupProgressLine(w io.Writer, terminal bool, every time.Duration) *warmupProgressLine {
	return &warmupProgressLine{w: w, terminal: terminal, every: every}
}

func (p *warmupProgressLine) update(pr warmup.Progress) {
	var line string
	switch {
	case pr.Phase == warmup.PhaseHealth:
		line = fmt.Sprintf("waiting for %d target(s) to answer the health check …", pr.Targets)
	case pr.Neighbours != "":
		// A back-off (or recovery) of the neighbour guard: a line of its own.
		if p.terminal && p.shown {
			fmt.Fprint(p.w, "\r\033[K")
		}
		fmt.Fprintf(p.w, "%5.1fs  neighbour guard: %s\n", pr.Elapsed.Seconds(), pr.Neighbours)
		return
	case pr.Phase == warmup.PhaseDone || pr.Target == "" || pr.Stable:
		return
	default:
		line = fmt.Sprintf("%5.1fs  %d/%d warm  %d requests  %s window %d: p50 %s p99 %s max %s",
			pr.Elapsed.Seconds(), pr.ConvergedTargets, pr.Targets, pr.Requests, pr.Target, pr.Window.Index,
			latency.Format(pr.Window.P50), latency.Format(pr.Window.P99), latency.Format(pr.Window.Max))
		if pr.Window.Errors > 0 {
			line += fmt.Sprintf(" errors %d", pr.Window.Errors)
		}
		if pr.Pace > 0 {
			line += fmt.Sprintf("  pace %s qps", strconv.FormatFloat(math.Round(pr.Pace*10)/10, 'f', -1, 64))
			if pr.PaceCap > 0 {
				line += " (neighbour guard)"
			}
		}
		if pr.StableP99 > 0 {
			line += " (stable p99 " + latency.Format(pr.StableP99) + ")"
		}
		if pr.TargetConverged && pr.Warm != "" {
			line += "  warm " + pr.Warm
		} else if pr.TargetConverged {
			line += "  converged"
		} else if pr.Waiting != "" {
			line += "  [" + pr.Waiting + "]"
		}
	}
	p.show(line, pr.TargetConverged || pr.Phase == warmup.PhaseHealth)
}

// show rewrites the line on a terminal; elsewhere it prints it when forced
// or at most every p.every.
func (p *warmupProgressLine) show(line string, force bool) {
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if now := time.Now(); force || now.Sub(p.last) >= p.every {
		p.last = now
		fmt.Fprintln(p.w, line)
	}
}

func (p *warmupProgressLine) end() {
	if p.terminal && p.shown {
		fmt.Fprintln(p.w)
	}
}

// cpuBudgetFlag is --cpu-budget: the cpuBudget field's forms, cores ("0.25",
// "250m") or a share of each pod's CPU request ("50%").
type cpuBudgetFlag struct{ config.CPUBudget }

func (f *cpuBudgetFlag) Set(s string) error {
	var b config.CPUBudget
	if err := b.UnmarshalJSON([]byte(strconv.Quote(s))); err != nil {
		return errors.New("want cores as in a pod's resources (0.25, 250m) or a share of each pod's CPU request (50%)")
	}
	f.CPUBudget = b
	return nil
}

func (f *cpuBudgetFlag) Type() string { return "cores|share" }
