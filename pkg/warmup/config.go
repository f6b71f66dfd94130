package warmup

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/mtls"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultHealthPath        = "/" // when the pod has no httpGet readinessProbe
	DefaultHealthTimeout     = 2 * time.Minute
	DefaultQPS               = 20.0
	DefaultConnections       = 4
	DefaultTimeout           = 10 * time.Second
	DefaultDeadline          = 10 * time.Minute
	DefaultWindow            = 100
	DefaultStableWindows     = 3
	DefaultMinRequests       = 300
	DefaultMaxRequests       = 20000
	DefaultTolerance         = 0.1
	DefaultAbsoluteTolerance = time.Millisecond
	DefaultMaxErrorRatio     = 0.01
	DefaultStableRatio       = 1.2
	DefaultStableQPS         = 10.0
	DefaultRejectRatio       = 2.0
	DefaultRejectFloor       = 5 * time.Millisecond
	// DefaultStartQPSFraction: the pace ramp starts at qps × this (at
	// least 1 request per second, at most qps) unless startQPS is set.
	DefaultStartQPSFraction = 1.0 / 8
	DefaultNeighbourRatio   = 1.5
	DefaultNeighbourFloor   = 3 * time.Millisecond
	DefaultNeighbourWindow  = 30 * time.Second
)

// Sizes a config may not exceed, whatever the operator's caps: one `danki
// plugin` process serves every tenant's rollouts, and each of these sizes
// is turned into memory the plugin holds (per target, per connection) or
// work it repeats on every request.
const (
	// MaxRequestMix is the most entries requests may have: each
	// connection keeps its own copy of every entry's templates.
	MaxRequestMix = 64
	// MaxRequestHeaders is the most headers an HTTP request (or metadata
	// keys a gRPC call) of the mix may set.
	MaxRequestHeaders = 32
)

// Config is what to send and when to stop. The JSON (or YAML) form is the
// config of the danki/warmup step plugin (see docs/warmup.md): decode it with
// config.Decode, then WithDefaults, then Validate. Zero values take the
// defaults above.
type Config struct {
	// Requests is the weighted request mix. Default: one GET of "/".
	Requests []RequestSpec `json:"requests,omitempty"`
	// AllowSideEffects permits methods other than GET, HEAD and OPTIONS.
	// Only set it when the application honours MarkerHeader (for example by
	// rolling back the transaction of a marked request).
	AllowSideEffects bool `json:"allowSideEffects,omitempty"`
	// MarkerHeader names the header set to "1" on every warm-up and health
	// request. Default X-Danki-Warmup.
	MarkerHeader string `json:"markerHeader,omitempty"`
	// MarkerHeaderConfirm must repeat MarkerHeader when it is not the
	// default and AllowSideEffects is set: the application keeps writes
	// free of side effects by checking that header, so a typo or a header
	// it does not check would send real writes. Stated twice, it is meant.
	MarkerHeaderConfirm string `json:"markerHeaderConfirm,omitempty"`

	// HealthPath is requested (GET) on every target until it answers 200,
	// before any load. Default: each pod's readinessProbe (an httpGet probe
	// on http: its port and path), else "/".
	HealthPath string `json:"healthPath,omitempty"`
	// HealthTimeout bounds the wait for targets to appear and turn healthy.
	// Default 2m.
	HealthTimeout config.Duration `json:"healthTimeout,omitempty"`
	// HealthProtocol is how the health wait asks: http (GET HealthPath
	// until 200) or grpc (the standard grpc.health.v1.Health/Check until
	// SERVING). Default: grpc when the pods' port is named grpc or grpc-*
	// or has appProtocol grpc, or when the requests are gRPC calls; else
	// http.
	HealthProtocol string `json:"healthProtocol,omitempty"`
	// HealthService is the service name asked in the gRPC health check.
	// Default "": the server as a whole.
	HealthService string `json:"healthService,omitempty"`

	// GRPCDescriptorSet is a FileDescriptorSet file (protoc
	// --descriptor_set_out --include_imports, buf build -o) holding the
	// gRPC requests' services and messages. Default: ask the server's
	// reflection service.
	GRPCDescriptorSet string `json:"grpcDescriptorSet,omitempty"`
	// GRPCSafeMethods are gRPC methods ("package.Service/Method") known to
	// be read-only: the warm-up may call them without AllowSideEffects.
	// Methods declaring option idempotency_level = NO_SIDE_EFFECTS need no
	// listing.
	GRPCSafeMethods []string `json:"grpcSafeMethods,omitempty"`

	// QPS is the request rate per target (pod). Default 20.
	QPS float64 `json:"qps,omitempty"`
	// Connections is the number of concurrent connections per target, each
	// sending one request at a time. Default 4.
	Connections int `json:"connections,omitempty"`
	// Timeout is the per-request timeout. Default 10s.
	Timeout config.Duration `json:"timeout,omitempty"`
	// Deadline bounds the whole warm-up (health wait included). Default 10m.
	Deadline config.Duration `json:"deadline,omitempty"`
	// UntilConverged: true (the default) stops each target when its latency
	// converged and fails the warm-up when it does not. false sends exactly
	// MaxRequests to every target (a fixed warm-up count, like the field
	// reports' "100 warm-up requests", or a measurement run), never fails
	// on convergence and only reports it.
	UntilConverged *bool `json:"untilConverged,omitempty"`
	// MinRequests per target before it may count as converged. Default 300.
	// The stopping rule's own minimum is two blocks (MinStop: 600
	// requests with the defaults).
	MinRequests int64 `json:"minRequests,omitempty"`
	// MaxRequests per target; reaching it without convergence fails the
	// warm-up (with untilConverged false: the fixed count per target). A
	// hard cap: no request is started past it, however many connections
	// there are. Default 20000 (at most the operator's --max-requests).
	MaxRequests int64 `json:"maxRequests,omitempty"`

	// Window is the number of requests per latency window, per target.
	// Percentiles are exact over the window (nearest rank: with fewer than
	// 100 requests, p99 is the window's maximum). Default 100.
	Window int `json:"window,omitempty"`
	// StableWindows is the smallest block of windows the stopping rule
	// compares (blocks also hold at least 300 requests and a quarter of the
	// windows so far, a fifth for the tail), and how many latest windows
	// MaxErrorRatio applies to. Default 3.
	StableWindows int `json:"stableWindows,omitempty"`
	// Tolerance: next to stable (stable pods loaded side by side), a pod is
	// warm once the p50 of its latest ~500 requests is within this of
	// stable's (and its p99 within StableRatio). Without stable, a pod is
	// still improving (warming) while its latest block of windows is faster
	// than the block before by more than this, in its pooled p50, its
	// median window p99 or its share of slow requests (over 2× p50 and
	// AbsoluteTolerance above it). One-sided: a block that got slower
	// never holds the warm-up back.
	// Default 0.1 (10 %).
	Tolerance float64 `json:"tolerance,omitempty"`
	// AbsoluteTolerance is an improvement (of p50 or p99) too small to count,
	// however large relative to the latency, and a request less than this
	// above its block's p50 is not slow: it keeps sub-millisecond services
	// from warming forever on scheduler noise. Default 1ms.
	AbsoluteTolerance config.Duration `json:"absoluteTolerance,omitempty"`
	// MaxErrorRatio is the share of failed requests (socket errors, HTTP
	// status < 200 or >= 400, a gRPC status other than OK) a window may
	// have and still count towards convergence. Default 0.01; set 0 to
	// require error-free windows.
	MaxErrorRatio *float64 `json:"maxErrorRatio,omitempty"`

	// CompareToStable also loads the stable pods, at StableQPS, with the same
	// request mix, and holds convergence back until each target is as fast
	// as stable: the p50 of its latest ~500 requests within Tolerance of
	// the stable pods', its p99 at most StableRatio × theirs. (Stable pods
	// loaded for RejectSlowerVersion are the same reference, but there a
	// pod whose own latency settled within StableRatio of stable's p50 for
	// half its warm-up converges too.)
	CompareToStable bool `json:"compareToStable,omitempty"`
	// StableRatio: the most a warm pod's p99 may be above stable's, and its
	// p50 for a pod settled short of stable (see CompareToStable). Default
	// 1.2.
	StableRatio float64 `json:"stableRatio,omitempty"`
	// StableQPS is the total rate sent to the stable pods (spread evenly),
	// kept low because they serve live traffic. Default 10.
	StableQPS float64 `json:"stableQPS,omitempty"`

	// RejectSlowerVersion: load the stable pods side by side (at StableQPS
	// with the same request mix) and judge each pod against them: it is
	// warm once as fast as stable (see Tolerance, StableRatio; a pod that
	// gets faster in steps, a JIT's tiers, is not taken for warm between
	// two), and a slower version once its own latency has settled (its p99
	// and its share of requests above the reject line no longer improve):
	// the warm-up fails — before any user request reaches the new version —
	// when its p99 stays above RejectRatio × stable's and more than
	// RejectFloor above it for
	// StableWindows windows in a row and for at least half of its windows
	// so far (a plateau as long as the warm-up before it, not a pause in a
	// pod still warming). Default: on whenever stable pods are known (the
	// step: the Rollout has a stable ReplicaSet apart from the canary) and
	// CompareToStable is off; set false to let a slower version through
	// to the gate.
	RejectSlowerVersion *bool `json:"rejectSlowerVersion,omitempty"`
	// RejectRatio: see RejectSlowerVersion. Default 2.
	RejectRatio float64 `json:"rejectRatio,omitempty"`
	// RejectFloor: see RejectSlowerVersion; it keeps sub-millisecond
	// services from being rejected over scheduler noise. Default 5ms.
	RejectFloor config.Duration `json:"rejectFloor,omitempty"`

	// StartQPS is the pace per target at which the warm-up starts: a cold
	// pod is not hit at full pace. The pace doubles after every few
	// requests while the pod keeps up — its latency is not getting worse
	// and rate × latency stays below Connections, so requests do not queue
	// — up to QPS, and halves when the latency jumps on the way (a pod
	// overloaded by its own warm-up slows its neighbours too); at QPS it
	// holds. Never below StartQPS. Set it to QPS to start at full pace.
	// Default: QPS / 8, at least 1 (at most QPS).
	StartQPS float64 `json:"startQPS,omitempty"`
	// CPUBudget bounds the cores a target's warm-up requests keep busy: at
	// every step of the pace ramp, rate × mean latency (Little's law: the
	// requests in flight) stays within it, so the pace comes down while
	// the pod is cold and slow and goes up as it gets fast — even below
	// StartQPS (not below one request per 10 s) and at full pace. A cold
	// JVM's requests (interpreted code, class loading) keep a core busy
	// for about their latency, and its JIT compiles in proportion to the
	// requests it serves: without a budget a warm-up runs the pod at its
	// CPU limit, and the pod's neighbours on the node (the users' pods)
	// wait for CPU. A quantity in cores, as in a pod's resources ("250m",
	// "0.5", 1), or a share of the CPU request of the pod's container that
	// serves the port ("50%": half of it; none for a container with no
	// request); "0" for none. Default: none. The warm gate's default is
	// that CPU request ("100%", gate.ParseConfig): the request is what the
	// scheduler promised the pod; on a small node it is a large share of
	// the cores the users' pods run on, and a lower share trades time to
	// Ready for the users' tail (docs/gate.md has the figures).
	CPUBudget *config.CPUBudget `json:"cpuBudget,omitempty"`
	// NeighbourGuard: while warming, watch the users' latency on stable —
	// the stable pods loaded side by side (rejectSlowerVersion,
	// compareToStable, or any stable pods given) — and lower the warm-up's
	// pace when it rises: when the p90 of the latest 20 stable requests is
	// above NeighbourRatio × its baseline (the median of the three lowest
	// such p90s among its first ten looks, then held: the probe starts with
	// the warm-up, so its quietest
	// moments are the closest to the users' steady state) and more than
	// NeighbourFloor above it, every target's
	// pace is halved (not below StartQPS) and held; once stable is back
	// under that line for two looks in a row, the cap doubles again. Each
	// back-off is reported in the progress and the step's status. With a
	// source of the users' own latency (the step: the Rollout's danki/istio
	// gate, when it reads a stable series from Prometheus), that is watched
	// too, every 2 s over the last NeighbourWindow, with its own baseline;
	// either one backs off. Default true; without stable pods or such a
	// source it has nothing to watch.
	NeighbourGuard *bool `json:"neighbourGuard,omitempty"`
	// NeighbourRatio: see NeighbourGuard. Default 1.5.
	NeighbourRatio float64 `json:"neighbourRatio,omitempty"`
	// NeighbourFloor: see NeighbourGuard; a rise this small never backs
	// off, so scheduler noise on a fast service does not slow the warm-up.
	// Default 3ms.
	NeighbourFloor config.Duration `json:"neighbourFloor,omitempty"`
	// NeighbourWindow is how far back the users' latency on stable is read
	// from the gate's metrics (see NeighbourGuard): at least twice
	// Prometheus' scrape interval; shorter reacts sooner. Default 30s.
	NeighbourWindow config.Duration `json:"neighbourWindow,omitempty"`

	// AcceptNearStable: when the deadline or maxRequests ends the warm-up
	// before a pod converged, the pod still counts as warm if its latest
	// block of windows is as close to stable's p99 as a converged pod must
	// be (StableRatio with CompareToStable, else RejectRatio and
	// RejectFloor), its p50 no longer improves and its errors are within
	// MaxErrorRatio: a tail that keeps improving slowly for thousands of
	// requests then fails no good version. Needs stable windows; without
	// them the bound fails the warm-up as before. Default true.
	AcceptNearStable *bool `json:"acceptNearStable,omitempty"`

	// JITMetrics is where the pod exposes its JIT's cumulative compile
	// time (jit.go): the warm-up reads it at every window, from the pod's
	// own address only, and holds the stop back while the JIT is still
	// compiling (a latency plateau between two of its tiers is no end).
	// Read where present, never required: a pod without it (404, no such
	// metric, a page that does not parse) is judged on latency alone, and
	// the result says which (TargetResult.JIT). Default: on, at
	// /actuator/prometheus on the target port, Micrometer's
	// jvm_compilation_time_ms_total or the Prometheus Java client's
	// jvm_compilation_time_seconds_total, else the actuator's JSON at
	// /actuator/metrics/jvm.compilation.time; {"enabled": false} turns it
	// off.
	JITMetrics JITMetrics `json:"jitMetrics,omitzero"`

	// MTLS says when the warm-up dials a pod with Istio mTLS, as a sidecar
	// would (mesh.go): auto (pods with a sidecar: the label
	// security.istio.io/tlsMode=istio, or an istio-proxy container), istio
	// (every pod; explicit URLs are refused, having no pod to verify) or
	// off (plaintext). Default: the operator's (--mesh-mode; off when the
	// operator gave danki no mesh). It chooses only how to talk to the
	// pods the warm-up may reach anyway: the addresses are checked as
	// for plaintext.
	MTLS mtls.Mode `json:"mtls,omitempty"`

	// Seed seeds the random fields of request templates; 0 picks a random
	// seed. Fix it for reproducible request streams.
	Seed int64 `json:"seed,omitempty"`

	// TemplateDelims are the request templates' delimiters (default {{ }});
	// set by embedders whose configuration language claims {{ }} itself.
	TemplateDelims Delims `json:"-"`

	// Policy is the operator's policy the config is bound by: its caps
	// (Validate), the files and URLs a config may name, and the addresses
	// every connection may go to (checked when it is dialled). Nil means
	// policy.Local(), the command line's (library use); the parsers of
	// tenant configs (ParseStepConfig, the gate's annotation, the load
	// source) always set it.
	Policy *policy.Policy `json:"-"`
	// Guard, if set, is asked about every address the warm-up connects to,
	// after the policy's own check (the step refuses addresses that are no
	// longer the rollout's own pods). Nil: no check beyond the policy's.
	Guard func(netip.Addr) error `json:"-"`
}

// WithDefaults returns a copy with zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if len(c.Requests) == 0 {
		c.Requests = []RequestSpec{{Method: http.MethodGet, Path: "/"}}
	} else {
		c.Requests = append([]RequestSpec(nil), c.Requests...)
	}
	for i := range c.Requests {
		if c.Requests[i].Weight == 0 {
			c.Requests[i].Weight = 1
		}
		if c.Requests[i].GRPC != nil {
			continue // no HTTP method
		}
		if c.Requests[i].Method == "" {
			c.Requests[i].Method = http.MethodGet
		}
		c.Requests[i].Method = strings.ToUpper(c.Requests[i].Method)
	}
	setDefault(&c.MarkerHeader, wellknown.MarkerHeader)
	// Defaults never exceed the operator's caps: only values a config
	// states are refused for them.
	l := c.limits()
	setDefault(&c.HealthTimeout, capDefault(config.Duration(DefaultHealthTimeout), config.Duration(l.HealthTimeout)))
	setDefault(&c.QPS, capDefault(DefaultQPS, l.QPS))
	setDefault(&c.Connections, capDefault(DefaultConnections, l.Connections))
	setDefault(&c.Timeout, capDefault(config.Duration(DefaultTimeout), config.Duration(l.Timeout)))
	setDefault(&c.Deadline, capDefault(config.Duration(DefaultDeadline), config.Duration(l.Deadline)))
	setDefault(&c.Window, DefaultWindow)
	setDefault(&c.StableWindows, DefaultStableWindows)
	setDefault(&c.MinRequests, capDefault(DefaultMinRequests, l.Requests))
	setDefault(&c.MaxRequests, capDefault(DefaultMaxRequests, l.Requests))
	setDefault(&c.Tolerance, DefaultTolerance)
	setDefault(&c.AbsoluteTolerance, config.Duration(DefaultAbsoluteTolerance))
	if c.MaxErrorRatio == nil {
		r := DefaultMaxErrorRatio
		c.MaxErrorRatio = &r
	}
	if c.UntilConverged == nil {
		t := true
		c.UntilConverged = &t
	}
	setDefault(&c.StableRatio, DefaultStableRatio)
	setDefault(&c.StableQPS, capDefault(DefaultStableQPS, l.QPS))
	setDefault(&c.RejectRatio, DefaultRejectRatio)
	setDefault(&c.RejectFloor, config.Duration(DefaultRejectFloor))
	setDefault(&c.StartQPS, min(c.QPS, max(1, c.QPS*DefaultStartQPSFraction)))
	if c.AcceptNearStable == nil {
		t := true
		c.AcceptNearStable = &t
	}
	if c.NeighbourGuard == nil {
		t := true
		c.NeighbourGuard = &t
	}
	setDefault(&c.NeighbourRatio, DefaultNeighbourRatio)
	setDefault(&c.NeighbourFloor, config.Duration(DefaultNeighbourFloor))
	setDefault(&c.NeighbourWindow, config.Duration(DefaultNeighbourWindow))
	c.JITMetrics = c.JITMetrics.withDefaults()
	return c
}

// WantsStable says whether the warm-up needs stable pods: required
// (compareToStable, or rejectSlowerVersion set true) or only used when
// there are some (rejectSlowerVersion left unset).
func (c Config) WantsStable() (want, required bool) {
	explicit := c.RejectSlowerVersion != nil && *c.RejectSlowerVersion
	required = c.CompareToStable || (explicit && c.Converging())
	return required || (c.RejectSlowerVersion == nil && c.Converging()), required
}

// rejecting says whether a converged but slower version is rejected, with
// stable pods known or not.
func (c Config) rejecting(haveStable bool) bool {
	if !c.Converging() {
		return false
	}
	if c.RejectSlowerVersion == nil {
		// compareToStable already holds a slower pod back, warming it up to
		// maxRequests: the choice for a pod that plateaus before a late
		// step down (a cache that fills slowly).
		return haveStable && !c.CompareToStable
	}
	return *c.RejectSlowerVersion
}

// Converging reports whether the warm-up stops at convergence (untilConverged,
// the default) rather than after a fixed count of MaxRequests.
func (c Config) Converging() bool { return c.UntilConverged == nil || *c.UntilConverged }

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// safeMethods never change data on a well-behaved server (RFC 9110 §9.2.1).
var safeMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true}

// Validate checks a defaulted Config and changes nothing. Every problem is
// reported, each naming its JSON field path and the fix.
func (c Config) Validate() error {
	var errs config.Errors
	c.validateSizes(&errs)
	c.validateRequests(&errs)
	c.validateLoad(&errs)
	c.validateStop(&errs)
	c.validateNeighbours(&errs)
	c.JITMetrics.validate(&errs)
	return errs.Err()
}

// validateRequests checks what is sent: the request mix, its gRPC methods,
// the operator's caps, the marker header, mTLS and the health path.
func (c Config) validateRequests(errs *config.Errors) {
	if len(c.Requests) <= MaxRequestMix { // past it, one error says so: no entry is compiled
		for i, r := range c.Requests {
			errs.Add(fmt.Sprintf("requests[%d]", i), r.validate(c.AllowSideEffects, c.TemplateDelims))
		}
	}
	c.validateGRPC(errs)
	c.validateCaps(errs)
	if !httpguts.ValidHeaderFieldName(c.MarkerHeader) {
		errs.Addf("markerHeader", "%q is not a valid HTTP header name", c.MarkerHeader)
	} else {
		c.checkMarker(errs)
	}
	if _, err := mtls.ParseMode(string(c.MTLS)); err != nil {
		errs.Add("mtls", err)
	}
	if c.HealthPath != "" && !strings.HasPrefix(c.HealthPath, "/") {
		errs.Addf("healthPath", "%q must start with /", c.HealthPath)
	}
}

// validateLoad checks how hard and how long: durations, pace, connections
// and the CPU budget.
func (c Config) validateLoad(errs *config.Errors) {
	positive := func(field string, d config.Duration) {
		if d <= 0 {
			errs.Addf(field, "must be a positive duration such as \"30s\" (got %s)", d)
		}
	}
	positive("healthTimeout", c.HealthTimeout)
	positive("timeout", c.Timeout)
	positive("deadline", c.Deadline)
	if c.QPS <= 0 {
		errs.Addf("qps", "must be > 0 requests per second per target (got %g)", c.QPS)
	}
	if c.Connections < 1 {
		errs.Addf("connections", "must be at least 1 (got %d)", c.Connections)
	}
	if c.CPUBudget != nil && (c.CPUBudget.Cores < 0 || c.CPUBudget.Share < 0) {
		errs.Addf("cpuBudget", "must not be negative: cores like \"250m\" or 0.5, a share of the pod's CPU request like \"50%%\", 0 for none (got %s)", c.CPUBudget)
	}
	if c.QPS > 0 && (c.StartQPS <= 0 || c.StartQPS > c.QPS) {
		errs.Addf("startQPS", "must be > 0 and at most qps %g: the pace the warm-up starts at (got %g)", c.QPS, c.StartQPS)
	}
}

// validateStop checks the stopping rule's knobs and the bounds.
func (c Config) validateStop(errs *config.Errors) {
	if c.Window < 10 {
		errs.Addf("window", "must be at least 10 requests so percentiles mean something (got %d)", c.Window)
	}
	if c.StableWindows < 2 {
		errs.Addf("stableWindows", "must be at least 2: the stopping rule compares blocks of at least this many windows (got %d)", c.StableWindows)
	}
	if c.MinRequests < 0 {
		errs.Addf("minRequests", "must not be negative (got %d)", c.MinRequests)
	}
	if c.MaxRequests < 1 {
		errs.Addf("maxRequests", "must be at least 1 (got %d)", c.MaxRequests)
	} else if c.Converging() && c.Window > 0 && c.sizesWithin() && !c.roomToConverge() {
		// Beyond sizesWithin, window and stableWindows are refused on their
		// own (validateSizes); within it, their product is no overflow.
		need := max(c.MinRequests, int64(c.Window)*int64(c.StableWindows))
		errs.Addf("maxRequests", "%d leaves no room to converge: raise it to at least %d (minRequests, and window × stableWindows = %d × %d)",
			c.MaxRequests, need, c.Window, c.StableWindows)
	}
	if c.Tolerance <= 0 {
		errs.Addf("tolerance", "must be > 0, a relative spread such as 0.2 for 20 %% (got %g)", c.Tolerance)
	}
	if c.AbsoluteTolerance < 0 {
		errs.Addf("absoluteTolerance", "must not be negative (got %s)", c.AbsoluteTolerance)
	}
	if c.MaxErrorRatio != nil && (*c.MaxErrorRatio < 0 || *c.MaxErrorRatio > 1) {
		errs.Addf("maxErrorRatio", "must be between 0 and 1 (got %g)", *c.MaxErrorRatio)
	}
	if c.RejectRatio < 1 {
		errs.Addf("rejectRatio", "must be >= 1: a version as fast as stable must pass (got %g)", c.RejectRatio)
	}
	if c.RejectFloor < 0 {
		errs.Addf("rejectFloor", "must not be negative (got %s)", c.RejectFloor)
	}
}

// validateNeighbours checks the neighbour guard's knobs.
func (c Config) validateNeighbours(errs *config.Errors) {
	if c.NeighbourRatio < 1 {
		errs.Addf("neighbourRatio", "must be >= 1: a ratio of stable's latency to its baseline (got %g)", c.NeighbourRatio)
	}
	if c.NeighbourWindow < config.Duration(time.Second) {
		errs.Addf("neighbourWindow", "must be at least 1s, e.g. \"30s\" (twice Prometheus' scrape interval; got %s)", c.NeighbourWindow)
	}
	if c.NeighbourFloor < 0 {
		errs.Addf("neighbourFloor", "must not be negative (got %s)", c.NeighbourFloor)
	}
	if c.CompareToStable {
		if c.StableRatio < 1 {
			errs.Addf("stableRatio", "must be >= 1: the canary may not be required to beat stable (got %g)", c.StableRatio)
		}
		if c.StableQPS <= 0 {
			errs.Addf("stableQPS", "must be > 0 (got %g)", c.StableQPS)
		}
	}
}

// roomToConverge says whether maxRequests holds minRequests and one block
// of stableWindows windows, computed without overflow for any sizes.
func (c Config) roomToConverge() bool {
	return c.MaxRequests >= c.MinRequests && int64(c.Window) <= c.MaxRequests && int64(c.StableWindows) <= c.MaxRequests/int64(c.Window)
}

// sizesWithin says whether window and stableWindows are within what
// validateSizes allows.
func (c Config) sizesWithin() bool {
	return int64(c.Window) <= max(c.MaxRequests, DefaultWindow) && int64(c.StableWindows) <= max(c.MaxRequests, DefaultStableWindows)
}

// validateSizes refuses the sizes the warm-up turns into memory before a
// request is sent. A window's buffer is allocated whole (make(…, window))
// for every target, and untilConverged: false skips the check that ties
// window to maxRequests, so window and stableWindows are capped by
// maxRequests (itself capped by the operator) in every mode — or by their
// defaults, which a fixed count below them (maxRequests 50) keeps. The
// request mix and its headers are copied per connection (MaxRequestMix,
// MaxRequestHeaders).
func (c Config) validateSizes(errs *config.Errors) {
	if int64(c.Window) > max(c.MaxRequests, DefaultWindow) {
		errs.Addf("window", "%d is above maxRequests %d: a window holds at most every request a target gets; lower window (or raise maxRequests within the operator's cap)", c.Window, c.MaxRequests)
	}
	if int64(c.StableWindows) > max(c.MaxRequests, DefaultStableWindows) {
		errs.Addf("stableWindows", "%d is above maxRequests %d: a block of windows holds at most every request a target gets; lower stableWindows", c.StableWindows, c.MaxRequests)
	}
	if n := len(c.Requests); n > MaxRequestMix {
		errs.Addf("requests", "%d entries is above danki's limit of %d: every connection keeps a copy of the mix; merge entries (a template such as {{pick \"a\" \"b\"}} varies one request) or leave the rarest out", n, MaxRequestMix)
		return
	}
	for i, r := range c.Requests {
		if n := len(r.Headers); n > MaxRequestHeaders {
			errs.Addf(fmt.Sprintf("requests[%d].headers", i), "%d headers is above danki's limit of %d per request; leave the ones the server does not need out", n, MaxRequestHeaders)
		}
		if r.GRPC != nil {
			if n := len(r.GRPC.Metadata); n > MaxRequestHeaders {
				errs.Addf(fmt.Sprintf("requests[%d].grpc.metadata", i), "%d keys is above danki's limit of %d per call; leave the ones the server does not need out", n, MaxRequestHeaders)
			}
		}
	}
}

// cpuBudget is a target's CPU budget in cores (CPUBudget, a share of the
// target pod's CPU request or cores), 0 for none (the default).
func (c *Config) cpuBudget(t Target) float64 {
	if c.CPUBudget != nil {
		return c.CPUBudget.Of(t.CPURequest)
	}
	return 0
}
