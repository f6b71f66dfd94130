package testutil

import (
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// StepClock is a fake clock whose timers fire at once: each NewTimer moves
// it on by the timer's duration, so code that waits on it (a poll loop, a
// ramp's interval) runs through without sleeping. OnTimer, if set, sees
// each timer's number (1, 2, …) first; when it returns false the clock
// stays where it is and that timer never fires (say, OnTimer cancelled the
// run's context, and the run must see that rather than its timer).
type StepClock struct {
	*testingclock.FakeClock
	OnTimer func(n int) (step bool)
	timers  int
}

// NewStepClock returns a StepClock at t.
func NewStepClock(t time.Time) *StepClock {
	return &StepClock{FakeClock: testingclock.NewFakeClock(t)}
}

// NewTimer implements clock.WithTicker.
func (c *StepClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers++
	if c.OnTimer == nil || c.OnTimer(c.timers) {
		c.Step(d)
	}
	return t
}
