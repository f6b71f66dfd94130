package rule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// newRule is New(c), failing the test on an error.
func newRule(t *testing.T, c Config) *Rule {
	t.Helper()
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// feed hands the pod n windows of p50, p99 (ms) after the windows it has,
// and returns the decisions.
func feed(p *Pod, n int, p50, p99 float64) []Decision {
	from := len(p.windows)
	var ds []Decision
	for _, w := range windowsOf(steady(from+n, p50, p99))[from:] {
		ds = append(ds, p.Window(w))
	}
	return ds
}

// windowsOf is windows of 100 requests.
func windowsOf(p50s, p99s []float64) []Window { return windows(p50s, p99s, 100) }

func stableWindows(r *Rule, n int, p50, p99 float64) {
	for _, w := range windowsOf(steady(n, p50, p99)) {
		r.Stable(w)
	}
}

// A pod flat on its own plateau: keep loading until it has two blocks,
// warm at MinStop.
func TestRuleWarmOnItsOwnPlateau(t *testing.T) {
	r := newRule(t, defaults())
	ds := feed(r.NewPod(false), 10, 3, 20)
	if d := ds[0]; d.Kind != KeepLoading || d.Reason != "1 of 6 windows" || d.String() != "keep loading: 1 of 6 windows" {
		t.Errorf("first window: %v (%+v), want keep loading: 1 of 6 windows", d, d)
	}
	at := slices.IndexFunc(ds, func(d Decision) bool { return d.Kind == Warm })
	if at < 0 || int64(100*(at+1)) != r.MinStop() || ds[at].String() != "warm: on its own plateau: not improving at its last 1 window(s) in a row (at least flatShare 0.05 of its 6; it never got faster)" {
		t.Fatalf("decisions %v: want warm at MinStop %d", ds, r.MinStop())
	}
}

// Next to stable, a pod as fast as stable is warm; one settled far above
// it is rejected as a slower version, with both figures.
func TestRuleNextToStable(t *testing.T) {
	c := defaults()
	c.Reject = true
	r := newRule(t, c)
	stableWindows(r, 5, 3, 20)
	if ds := feed(r.NewPod(false), 6, 3, 20); ds[5].Kind != Warm || !strings.HasPrefix(ds[5].Reason, "as fast as stable: p50 3.00ms within tolerance 0.1 of stable's 3.00ms and p99 20.0ms within stableRatio 1.2 × stable's 20.0ms") {
		t.Errorf("as fast as stable: %v, want warm at window 6, saying by which rule", ds)
	}

	r = newRule(t, c)
	stableWindows(r, 5, 1, 5)
	ds := feed(r.NewPod(false), 40, 3, 20)
	at := slices.IndexFunc(ds, func(d Decision) bool { return d.Kind == RejectedSlower })
	if at < 0 {
		t.Fatalf("p99 4× stable's: %v, want rejected", ds[len(ds)-1])
	}
	if d := ds[at]; !strings.Contains(d.Reason, "p99 settled at 20.0ms") || !strings.Contains(d.Reason, "windows in a row") ||
		!strings.HasPrefix(d.String(), "rejected as a slower version: ") || !d.Final() {
		t.Errorf("rejection: %v", d)
	}
	if slices.ContainsFunc(ds[:at], func(d Decision) bool { return d.Final() }) {
		t.Errorf("a decision before the rejection ended the warm-up: %v", ds[:at])
	}
}

// At a bound, a pod not yet warm but near stable is accepted; without
// acceptNearStable (or without stable) it failed, with its latest look.
func TestRuleAtBound(t *testing.T) {
	c := defaults()
	c.Reject = true
	r := newRule(t, c)
	stableWindows(r, 5, 3, 10)
	pod := r.NewPod(false)
	ds := feed(pod, 8, 3.2, 14)
	if last := ds[len(ds)-1]; last.Kind != KeepLoading || !strings.Contains(last.Look, "its own latency has stopped improving") {
		t.Fatalf("settled short of stable after 8 windows: %v, want keep loading", last)
	}
	if d := pod.AtBound(); d.Kind != AcceptedNearStable || !strings.HasPrefix(d.Reason, "p99 14.0ms (still not improving) within 20.0ms of stable's 10.0ms") {
		t.Errorf("at the bound: %v, want accepted near stable", d)
	}

	c.AcceptNearStable = false
	r = newRule(t, c)
	stableWindows(r, 5, 3, 10)
	pod = r.NewPod(false)
	ds = feed(pod, 8, 3.2, 14)
	if d := pod.AtBound(); d.Kind != Failed || d.Reason != ds[len(ds)-1].Look || !strings.HasPrefix(d.String(), "not warm at the bound: p50 3.20ms") {
		t.Errorf("acceptNearStable off: %v, want failed with its latest look %q", d, ds[len(ds)-1].Look)
	}
	if d := newRule(t, defaults()).NewPod(false).AtBound(); d.Kind != Failed || d.Reason != "no complete window yet" {
		t.Errorf("no window, no stable: %v", d)
	}
}

// A pod whose JIT still compiles is not warm, however flat its latency;
// the rule says how often it held the stop back.
func TestRuleJITHoldsTheStop(t *testing.T) {
	r := newRule(t, defaults())
	pod := r.NewPod(true)
	var ds []Decision
	for i, w := range windowsOf(steady(10, 3, 20)) {
		pod.Reading(Reading{Requests: int64(100 * i), MS: 5000 + 500*float64(i)})
		ds = append(ds, pod.Window(w))
	}
	if slices.ContainsFunc(ds, func(d Decision) bool { return d.Kind == Warm }) {
		t.Fatalf("warm while the JIT compiles 5 ms per request: %v", ds)
	}
	if last := ds[len(ds)-1]; !strings.HasPrefix(last.Reason, "latency converged but the JIT is still compiling") {
		t.Errorf("latest decision %v: want held by the JIT", last)
	}
	if notes := pod.JIT(); !strings.Contains(notes, "it held the stop back at 5 window(s)") {
		t.Errorf("JIT notes %q", notes)
	}
	if notes := r.NewPod(false).JIT(); notes != "" {
		t.Errorf("a pod judged on latency alone has JIT notes %q", notes)
	}
}

// Every warm decision says which rule made it, with its thresholds: a pod
// settled a little short of stable (p50 within stableRatio, p99 above it)
// is warm once that lasted half its warm-up, and says so and where it
// settled; a pod whose JIT went quiet says since when.
func TestWarmSaysWhichRule(t *testing.T) {
	c := defaults()
	c.Reject = true
	r := newRule(t, c)
	stableWindows(r, 5, 3, 10)
	ds := feed(r.NewPod(false), 40, 3.2, 14)
	at := slices.IndexFunc(ds, func(d Decision) bool { return d.Kind == Warm })
	if at < 0 {
		t.Fatalf("settled within stableRatio of stable for 40 windows: %v, want warm", ds[len(ds)-1])
	}
	if d := ds[at]; !strings.HasPrefix(d.Reason, "settled near stable: p50 within stableRatio 1.2 × stable's and not improving in ") ||
		!strings.Contains(d.Reason, "short of as fast as stable: p50 3.20ms, p99 14.0ms") || d.Settled == "" {
		t.Errorf("settled near stable: %q (settled %q)", d.Reason, d.Settled)
	}

	pod := newRule(t, defaults()).NewPod(true)
	var warm *Decision
	for i, w := range windowsOf(steady(20, 3, 20)) {
		pod.Reading(Reading{Requests: int64(100 * i), MS: 5000})
		if d := pod.Window(w); d.Kind == Warm && warm == nil {
			warm = &d
		}
	}
	if warm == nil || !strings.HasPrefix(warm.Reason, "on its own plateau: ") || !strings.Contains(warm.Reason, "; the JIT quiet since request ") {
		t.Errorf("a flat pod with a quiet JIT: %v, want warm on its own plateau, the JIT quiet", warm)
	}
}

// New refuses a config the rule cannot work with, saying why.
func TestNewRefusesAnUnusableConfig(t *testing.T) {
	_, err := New(Config{})
	if err == nil || !strings.Contains(err.Error(), "stopping rule: window 0: must be at least 1") {
		t.Errorf("New(Config{}) = %v", err)
	}
}

func TestKindsPrintThemselves(t *testing.T) {
	for k, want := range map[Kind]string{KeepLoading: "keep loading", Warm: "warm", AcceptedNearStable: "accepted near stable",
		RejectedSlower: "rejected as a slower version", Failed: "not warm at the bound", Kind(99): "unknown decision"} {
		if k.String() != want {
			t.Errorf("Kind %d prints %q, want %q", k, k, want)
		}
	}
}

// The rule is pure: its package imports no network, Kubernetes or OS
// package, and its code starts no goroutine and reads no clock.
func TestRuleIsPure(t *testing.T) {
	allowed := []string{"errors", "fmt", "math", "math/bits", "slices", "sort", "strings", "time", "github.com/danki-dev/danki/pkg/latency"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); !slices.Contains(allowed, path) {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a goroutine at %s", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && !slices.Contains([]string{"Duration", "Millisecond", "Microsecond", "Second", "Nanosecond"}, n.Sel.Name) {
					t.Errorf("%s: time.%s at %s", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
}
