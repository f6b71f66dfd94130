package rule

import (
	"errors"
	"fmt"
	"time"
)

// Config is what the stopping rule is told once, before a run: the
// user's knobs (from a validated warm-up config) and how this run judges
// its pods. The rule reads it and never changes it.
type Config struct {
	// Window is the requests per window; StableWindows the windows a
	// verdict needs in a row (and the least a block holds).
	Window, StableWindows int
	// MinRequests is the fewest requests before a pod can be warm;
	// MaxRequests the bound a pod that never converges reaches (named in
	// the failure's reason).
	MinRequests, MaxRequests int64
	// Tolerance is the relative change that counts as improving (and
	// "as fast as stable" for p50); AbsoluteTolerance the least absolute
	// one.
	Tolerance         float64
	AbsoluteTolerance time.Duration
	// MaxErrorRatio is the most errors per request a window of a warm pod
	// may have.
	MaxErrorRatio float64
	// StableRatio: a warm pod's p99 is within this many times stable's.
	StableRatio float64
	// RejectRatio and RejectFloor draw the reject line: a plateau this
	// many times stable's p99, and this far above it.
	RejectRatio float64
	RejectFloor time.Duration
	// CompareToStable holds every pod to stable's latency (no own plateau,
	// no settled short of it).
	CompareToStable bool
	// AcceptNearStable: a pod not converged at a bound but near stable is
	// accepted (Pod.AtBound).
	AcceptNearStable bool

	// Reject: a pod settled far above stable is a slower version
	// (rejectSlowerVersion, with stable pods to compare with).
	Reject bool
	// JudgeAgainstStable: stable is the warm answer but rejects nothing
	// (the warm gate's Ready neighbours).
	JudgeAgainstStable bool
}

// check says what the rule cannot work with; Validate of the warm-up's
// config has refused these already, so it only guards the rule's own
// arithmetic (divisions by Window, slices of StableWindows).
func (c Config) check() error {
	var errs []error
	if c.Window < 1 {
		errs = append(errs, fmt.Errorf("window %d: must be at least 1", c.Window))
	}
	if c.StableWindows < 1 {
		errs = append(errs, fmt.Errorf("stableWindows %d: must be at least 1", c.StableWindows))
	}
	if c.Tolerance < 0 || c.MaxErrorRatio < 0 || c.StableRatio <= 0 || c.RejectRatio <= 0 {
		errs = append(errs, fmt.Errorf("tolerance %g, maxErrorRatio %g, stableRatio %g, rejectRatio %g: want ratios ≥ 0 (stableRatio, rejectRatio > 0)", c.Tolerance, c.MaxErrorRatio, c.StableRatio, c.RejectRatio))
	}
	return errors.Join(errs...)
}

// minBlockWindows is minBlockRequests in windows, rounded up.
func (c *Config) minBlockWindows() int { return (minBlockRequests + c.Window - 1) / c.Window }

// MinStop is the fewest requests per target after which the stopping rule
// can call a pod warm: MinRequests, and two blocks of windows.
func (c *Config) MinStop() int64 {
	return max(c.MinRequests, int64(2*max(c.StableWindows, c.minBlockWindows())*c.Window))
}

// compareWindows is stableCompareRequests in windows.
func (c *Config) compareWindows() int {
	return max(c.StableWindows, (stableCompareRequests+c.Window-1)/c.Window)
}

// neighboursOnly says whether stable is the warm gate's neighbours: a
// reference for warm, never for rejection (JudgeAgainstStable).
func (c *Config) neighboursOnly() bool {
	return c.JudgeAgainstStable && !c.Reject && !c.CompareToStable
}
