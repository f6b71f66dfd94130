package shift

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The table danki shift get prints (cmd/danki's tests run it against a
// fake cluster; these pin the rows the fake does not produce).
func TestStatusWriteTable(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tgt := Target{Namespace: "shop", VirtualService: "reviews"}
	for _, tc := range []struct {
		name string
		st   Status
		want string
	}{
		{"unmanaged", Status{CanaryWeight: -1, Routes: []RouteStatus{
			{Kind: KindHTTP, Index: 0, Destinations: []DestinationStatus{{Host: "reviews", Weight: 100}}},
			{Kind: KindTCP, Index: 0},
		}}, "VirtualService shop/reviews\n" +
			"KIND  ROUTE  MANAGED  DESTINATION  ROLE  WEIGHT\n" +
			"http  [0]    -        reviews      -     100\n" +
			"tcp   [0]    -        -            -     -\n"},
		{"managed, ramp failed", Status{CanaryWeight: 10, Problem: "p", RampProblem: "r",
			Ramp: &State{Target: 60, Weight: 10, LastGood: 10, Increment: 5, Phase: PhaseFailed, Reason: "3 breaches", LastChange: t0},
			Routes: []RouteStatus{{Kind: KindHTTP, Index: 1, Name: "primary", Managed: "primary", Destinations: []DestinationStatus{
				{Host: "reviews", Subset: "stable", Port: 8080, Weight: 90, Role: "stable"},
				{Host: "reviews", Subset: "canary", Port: 8080, Weight: 10, Role: "canary"},
			}}}}, "VirtualService shop/reviews  canary weight 10%  ramp failed toward 60% (3 breaches)\n" +
			"problem: p\n" +
			"ramp state: r (--canary-weight 0 always works and clears it)\n" +
			"KIND  ROUTE        MANAGED  DESTINATION          ROLE    WEIGHT\n" +
			"http  [1] primary  primary  reviews/stable:8080  stable  90\n" +
			"http  [1] primary  primary  reviews/canary:8080  canary  10\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.st.WriteTable(&b, tgt); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
	// A ramp under way shows its progress in the header.
	st := Status{CanaryWeight: 20, Ramp: &State{Target: 60, Weight: 20, Increment: 10, Phase: PhaseRamping, LastChange: t0}}
	var b bytes.Buffer
	if err := st.WriteTable(&b, tgt); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(b.String(), "\n"); head != "VirtualService shop/reviews  canary weight 20%  "+st.Ramp.Progress(20) {
		t.Errorf("header %q", head)
	}
}
