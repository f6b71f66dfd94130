package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
)

// Failed requests are told apart by where they fell: a rollout's measured
// phases, the lab's reinstall of the app between scenarios, elsewhere.
func TestUserFailuresSplitByWhereTheyFell(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	measured := [][]traffic.Phase{
		{{Name: "before", From: at(0), To: at(10)}, {Name: "during", From: at(10), To: at(20)}},
		{{Name: "during", From: at(50), To: at(60)}},
	}
	reinstalls := []traffic.Phase{{Name: "app", From: at(30), To: at(40)}}
	samples := []traffic.Sample{
		{Start: at(1), Code: 200},  // ok: not counted
		{Start: at(15), Code: 503}, // during scenario 1
		{Start: at(55), Code: -1},  // during scenario 2
		{Start: at(30), Code: 503}, // the reinstall's first second
		{Start: at(39), Code: 503},
		{Start: at(40), Code: 503}, // just after it: elsewhere
		{Start: at(45), Code: 500},
		{Start: at(35), Code: 200},
	}
	got := userFailuresOf(samples, measured, reinstalls)
	if want := (UserFailures{Measured: 2, Reinstalls: 2, Elsewhere: 2}); *got != want {
		t.Fatalf("userFailuresOf = %+v, want %+v", *got, want)
	}

	var b strings.Builder
	res := &Result{Traffic: traffic.Result{URL: DefaultGatewayURL, Requests: 8, Errors: 6, AskedQPS: 80, AchievedQPS: 80}, UserFailures: got}
	if err := WriteReport(&b, traffic.Markdown, res); err != nil {
		t.Fatal(err)
	}
	want := "users: 8 requests at 80.0 of 80 qps asked (6 failed: 2 in the measured phases, 2 while the lab reinstalled the app between scenarios (no pod serving), 2 elsewhere), through "
	if !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

// The lab notes each reinstall by its Rollout, so the sample app's and the
// Spring app's users are each judged by their own app's.
func TestReinstallsOfOneApp(t *testing.T) {
	l := &lab{reinstalls: []traffic.Phase{{Name: mainApp.rollout}, {Name: springApp.rollout}, {Name: mainApp.rollout}}}
	if got := l.reinstallsOf(mainApp); len(got) != 2 {
		t.Errorf("reinstallsOf(mainApp) = %d, want 2", len(got))
	}
	if got := l.reinstallsOf(springApp); len(got) != 1 || got[0].Name != springApp.rollout {
		t.Errorf("reinstallsOf(springApp) = %+v", got)
	}
}
