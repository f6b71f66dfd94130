package gate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// Condition reasons.
const (
	ReasonWaiting       = "WaitingForContainers" // containers not ready yet
	ReasonQueued        = "Queued"               // waiting for a free warm-up slot
	ReasonWarming       = "Warming"              // load running
	ReasonWarm          = "Warm"                 // converged: True
	ReasonRetrying      = "WarmUpFailedRetrying" // an attempt failed, another follows
	ReasonFailed        = "WarmUpFailed"         // gave up, fail closed: False
	ReasonFailedOpen    = "WarmUpFailedOpen"     // gave up, fail open: True
	ReasonInvalidConfig = "InvalidConfig"        // the annotation does not parse
)

// Event reasons of the CPU request's resize (Config.YieldCPU).
const (
	ReasonYieldRefused   = "CPUYieldRefused"       // the request could not be lowered: warming at full weight
	ReasonRestoreFailed  = "CPURestoreFailed"      // the request could not be put back
	ReasonRestorePending = "CPURestoreNotActuated" // put back in the spec, not yet applied by the kubelet
)

// Failure policies (Config.OnFailure).
const (
	StayUnready = "stayUnready" // fail closed (default)
	BecomeReady = "becomeReady" // fail open
)

// Defaults of a pod's Config beyond the warm-up's own.
const (
	DefaultRetries      = 3
	DefaultRetryBackoff = 30 * time.Second
)

// Config is a pod's warm-up configuration, from wellknown.WarmUpAnnotation: the
// warm-up's fields (requests, qps, deadline, the stopping rule …) plus the
// gate's own.
type Config struct {
	warmup.Config
	// Port to warm, by name or number. Default: the pod's only container
	// port.
	Port intstr.IntOrString `json:"port,omitempty"`
	// OnFailure: stayUnready (default: the pod stays out of load balancing,
	// fail closed) or becomeReady (fail open) once every attempt failed.
	OnFailure string `json:"onFailure,omitempty"`
	// Retries is how many attempts a pod gets. Default 3.
	Retries int `json:"retries,omitempty"`
	// RetryBackoff is the wait before the second attempt, doubled before
	// each further one. Default 30s.
	RetryBackoff config.Duration `json:"retryBackoff,omitempty"`
	// YieldCPU lowers a Burstable pod's CPU request in place (pods/resize,
	// Kubernetes ≥ 1.33) to YieldCPURequest and puts it back before the pod
	// becomes Ready: its CPU weight drops to the kernel's least, so the cold
	// JVM runs on the node's idle CPU and the users' pods beside it keep
	// theirs. YieldWarmUp (default; true) while the gate warms it,
	// YieldFromStart from the moment it is scheduled (its JVM's start too),
	// YieldOff (false) never.
	YieldCPU YieldMode `json:"yieldCPU,omitempty"`
}

// YieldMode is when a pod's CPU request is lowered (Config.YieldCPU).
type YieldMode string

// The YieldMode values.
const (
	YieldWarmUp    YieldMode = "warmUp"
	YieldFromStart YieldMode = "fromStart"
	YieldOff       YieldMode = "off"
)

// UnmarshalJSON takes a mode's name, or true (YieldWarmUp) and false
// (YieldOff).
func (m *YieldMode) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*m = YieldWarmUp
	case "false":
		*m = YieldOff
	default:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("yieldCPU: want %q, %q, %q, true or false (got %s)", YieldWarmUp, YieldFromStart, YieldOff, b)
		}
		*m = YieldMode(s)
	}
	return nil
}

// OptedIn reports whether the annotation asks for the gate.
func OptedIn(annotations map[string]string) bool {
	v, ok := annotations[wellknown.WarmUpAnnotation]
	return ok && strings.TrimSpace(v) != "false"
}

// ParseConfig reads a pod's annotation (strictly; errors name the field),
// with the defaults applied, under the operator's policy p: a pod's
// annotation is a tenant's config, bound by the caps (retries by
// Limits.Retries too) and the network policy, which the returned Config
// keeps (Config.Policy) for the connections the warm-up opens.
func ParseConfig(annotation string, p policy.Policy) (Config, error) {
	var c Config
	if v := strings.TrimSpace(annotation); v != "" && v != "true" {
		if err := config.Decode([]byte(v), &c); err != nil {
			return c, fmt.Errorf("annotation %s: %w", wellknown.WarmUpAnnotation, err)
		}
	}
	c.Config.Policy = &p
	if c.CPUBudget == nil {
		// The gate's own default: the pod's CPU request (docs/gate.md,
		// "Choosing the CPU budget"); the warm-up's is none.
		c.CPUBudget = &config.CPUBudget{Share: 1}
	}
	c.Config = c.Config.WithDefaults()
	c.OnFailure = cmp.Or(c.OnFailure, StayUnready)
	c.Retries = cmp.Or(c.Retries, min(DefaultRetries, p.Limits.WithDefaults().Retries))
	c.RetryBackoff = cmp.Or(c.RetryBackoff, config.Duration(DefaultRetryBackoff))
	c.YieldCPU = cmp.Or(c.YieldCPU, YieldWarmUp)
	var errs config.Errors
	errs.Add("", c.Config.Validate())
	if c.OnFailure != StayUnready && c.OnFailure != BecomeReady {
		errs.Addf("onFailure", "%q is not a policy; use %s (fail closed) or %s (fail open)", c.OnFailure, StayUnready, BecomeReady)
	}
	if c.Retries < 1 {
		errs.Addf("retries", "must be at least 1 (got %d)", c.Retries)
	} else if why := policy.Over(c.Retries, p.Limits.WithDefaults().Retries, "--max-retries"); why != "" {
		errs.Addf("retries", "%s", why)
	}
	if c.YieldCPU != YieldWarmUp && c.YieldCPU != YieldFromStart && c.YieldCPU != YieldOff {
		errs.Addf("yieldCPU", "%q is not a mode; use %s (while it warms, the default), %s (from its start) or %s", c.YieldCPU, YieldWarmUp, YieldFromStart, YieldOff)
	}
	if c.RetryBackoff < 0 {
		errs.Addf("retryBackoff", "must not be negative (got %s)", c.RetryBackoff)
	}
	if c.CompareToStable || (c.RejectSlowerVersion != nil && *c.RejectSlowerVersion) {
		errs.Addf("compareToStable", "the gate warms one pod on its own; there is no stable version to compare with (use the danki/warmup step in a rollout)")
	}
	if err := errs.Err(); err != nil {
		return c, fmt.Errorf("annotation %s: %w", wellknown.WarmUpAnnotation, err)
	}
	return c, nil
}
