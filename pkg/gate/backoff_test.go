package gate

import (
	"math"
	"testing"
	"time"
)

func TestRetryBackoffDoublesUpToTheCap(t *testing.T) {
	base := 30 * time.Second
	for _, tc := range []struct {
		failed int
		want   time.Duration
	}{
		{1, 30 * time.Second},
		{2, time.Minute},
		{3, 2 * time.Minute},
		{5, 8 * time.Minute},
		{6, MaxRetryBackoff}, // 16 min, capped
		{7, MaxRetryBackoff},
		{30, MaxRetryBackoff}, // 30s << 29 is 1.6e19 ns: past int64
		{34, MaxRetryBackoff}, // the old shift wrapped to a negative wait here
		{64, MaxRetryBackoff}, // a shift of 63: the old one gave 0
		{65, MaxRetryBackoff}, // a shift past the width
		{1 << 20, MaxRetryBackoff},
		{math.MaxInt, MaxRetryBackoff},
	} {
		if got := retryBackoff(base, tc.failed); got != tc.want {
			t.Errorf("retryBackoff(%s, %d) = %s; want %s", base, tc.failed, got, tc.want)
		}
	}
}

func TestRetryBackoffEdges(t *testing.T) {
	// A base above the cap is the operator's choice: kept, not doubled.
	if got := retryBackoff(time.Hour, 1); got != time.Hour {
		t.Errorf("first back-off of 1h: %s", got)
	}
	if got := retryBackoff(time.Hour, math.MaxInt); got != time.Hour {
		t.Errorf("back-off of 1h after MaxInt failures: %s; want 1h", got)
	}
	// The largest base a config can hold still cannot overflow.
	if got := retryBackoff(time.Duration(math.MaxInt64), 3); got != time.Duration(math.MaxInt64) {
		t.Errorf("back-off of MaxInt64 ns: %s", got)
	}
	if got := retryBackoff(0, 50); got != 0 {
		t.Errorf("zero base: %s", got)
	}
	if got := retryBackoff(time.Nanosecond, math.MaxInt); got != MaxRetryBackoff {
		t.Errorf("1ns base, MaxInt failures: %s; want the cap", got)
	}
	// Never negative, never above the cap, never shrinking as failures grow.
	prev := time.Duration(0)
	for n := 1; n < 200; n++ {
		got := retryBackoff(7*time.Second, n)
		if got <= 0 || got > MaxRetryBackoff || got < prev {
			t.Fatalf("retryBackoff(7s, %d) = %s after %s", n, got, prev)
		}
		prev = got
	}
}
