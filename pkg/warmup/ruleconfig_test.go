package warmup

import (
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/warmup/rule"
)

// The stopping rule's config from a config left at its defaults: the
// rule package's tests assume these figures (rule's defaults()).
func TestRuleConfigOfDefaults(t *testing.T) {
	cfg := Config{}.WithDefaults()
	want := rule.Config{
		Window: 100, StableWindows: 3, MinRequests: 300, MaxRequests: 20000,
		Tolerance: 0.1, AbsoluteTolerance: time.Millisecond, MaxErrorRatio: 0.01,
		StableRatio: 1.2, RejectRatio: 2, RejectFloor: 5 * time.Millisecond,
		AcceptNearStable: true,
	}
	if got := cfg.ruleConfig(false, false); got != want {
		t.Errorf("rule config of the defaults:\n got %+v\nwant %+v", got, want)
	}
	got := cfg.ruleConfig(true, true)
	if !got.Reject || !got.JudgeAgainstStable {
		t.Errorf("the run's judgement is not passed on: %+v", got)
	}
	if cfg.MinStop() != 600 {
		t.Errorf("MinStop %d, want 600", cfg.MinStop())
	}
}
