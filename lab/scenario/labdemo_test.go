package scenario

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/lab/traffic"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"k8s.io/apimachinery/pkg/api/equality"
)

// A pod whose latency decays from 200 ms to 4 ms over its first 1,500
// requests and then stays there (with noise and a rare outlier): the oracle
// puts "warm" at the 1,500-request window boundary, not before, and not far
// after.
func TestFindPlateau(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var samples []traffic.Sample
	for i := range 5000 {
		ms := 4.0 + rng.Float64()
		if i < 1500 {
			ms += 196 * float64(1500-i) / 1500
		}
		if rng.IntN(500) == 0 {
			ms = 30 // a rare slow request, also when warm
		}
		if i >= 4900 && i < 5000 {
			ms *= 3 // a GC-heavy last window: noise, not a cold pod
		}
		samples = append(samples, traffic.Sample{Start: start.Add(time.Duration(i) * 10 * time.Millisecond), Latency: time.Duration(ms * float64(time.Millisecond)), Code: 200})
	}
	o := findPlateau(samples, 100, 0.2)
	if o.WarmAfter < 1300 || o.WarmAfter > 1600 {
		t.Fatalf("warm after %d requests, want about 1,500 (plateau p50 %s, p99 %s)", o.WarmAfter, o.PlateauP50, o.PlateauP99)
	}
	if o.PlateauP50 < 4*time.Millisecond || o.PlateauP50 > 5*time.Millisecond {
		t.Fatalf("plateau p50 %s, want 4–5 ms", o.PlateauP50)
	}
	if len(o.Curve) == 0 || o.Curve[0].Max < 190*time.Millisecond {
		t.Fatalf("warm-up curve %+v: want the cold first request in it", o.Curve)
	}
	// A pod that is warm from the start is warm after 0 requests.
	for i := range samples {
		samples[i].Latency = 4 * time.Millisecond
	}
	if o := findPlateau(samples, 100, 0.2); o.WarmAfter != 0 {
		t.Fatalf("an always-warm pod is warm after %d requests, want 0", o.WarmAfter)
	}
}

func TestRatios(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	phases := func(before, during, after latency.Summary) []traffic.PhaseStats {
		return []traffic.PhaseStats{{Name: "before", Summary: before}, {Name: "during", Summary: during}, {Name: "after", Summary: after}}
	}
	res := &Result{
		// danki is not second here: the ratios find scenarios by name.
		Scenarios: []traffic.Scenario{
			{Name: Baseline, RolloutDuration: 60 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5), Max: ms(9)}, latency.Summary{Count: 100, P99: ms(400), P999: ms(900), Max: ms(1200)}, latency.Summary{Count: 100, P999: ms(60), Max: ms(200)})},
			{Name: SlowStart, RolloutDuration: 63 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5), Max: ms(9)}, latency.Summary{Count: 100, P99: ms(200), P999: ms(800), Max: ms(900)}, latency.Summary{Count: 100, P999: ms(20), Max: ms(50)})},
			{Name: Fixed100, RolloutDuration: 66 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5), Max: ms(9)}, latency.Summary{Count: 100, P99: ms(16), P999: ms(100), Max: ms(150)}, latency.Summary{Count: 100, P999: ms(15), Max: ms(30)})},
			{Name: Danki, RolloutDuration: 150 * time.Second, Phases: phases(latency.Summary{Count: 100, P99: ms(5), Max: ms(10)}, latency.Summary{Count: 100, P99: ms(8), P999: ms(20), Max: ms(30)}, latency.Summary{Count: 100, P999: ms(10), Max: ms(10)})},
		},
		Runs:    []Run{{Scenario: Baseline}, {Scenario: SlowStart, Envoy: "ROUND_ROBIN, round_robin_lb_config.slow_start_config {\"slow_start_window\":\"60s\"}"}, {Scenario: Fixed100, WarmupRequests: 100}, {Scenario: Danki, WarmupRequests: 2000}},
		Oracle:  &Oracle{WarmAfter: 1600},
		Traffic: traffic.Result{AskedQPS: 80, AchievedQPS: 78},
	}
	got := map[string]float64{}
	for _, r := range ratios(res) {
		got[r.Name] = r.Value
	}
	want := map[string]float64{
		"danki p99 during rollout ÷ warm steady state":    1.6,
		"danki max during rollout ÷ warm steady state":    3,
		"baseline ÷ danki, p99 during rollout":            50,
		"baseline ÷ danki, p99.9 during rollout":          45,
		"baseline ÷ danki, max during rollout":            40,
		"baseline ÷ danki, p99.9 after rollout":           6,
		"baseline ÷ danki, max after rollout":             20,
		"baseline ÷ danki, rollout time":                  0.4,
		"Istio slow start ÷ danki, p99 during rollout":    25,
		"Istio slow start ÷ danki, p99.9 during rollout":  40,
		"Istio slow start ÷ danki, max during rollout":    30,
		"Istio slow start ÷ danki, p99.9 after rollout":   2,
		"Istio slow start ÷ danki, max after rollout":     5,
		"Istio slow start ÷ danki, rollout time":          0.42,
		"fixed warm-up 100 ÷ danki, p99 during rollout":   2,
		"fixed warm-up 100 ÷ danki, p99.9 during rollout": 5,
		"fixed warm-up 100 ÷ danki, max during rollout":   5,
		"fixed warm-up 100 ÷ danki, p99.9 after rollout":  1.5,
		"fixed warm-up 100 ÷ danki, max after rollout":    3,
		"fixed warm-up 100 ÷ danki, rollout time":         0.44,
		"danki warm-up length ÷ oracle":                   1.25,
		"fixed warm-up 100 warm-up length ÷ oracle":       0.0625,
		"user traffic achieved ÷ asked QPS":               0.975,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %t), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d ratios, want %d: %v", len(got), len(want), got)
	}
	res.Ratios = ratios(res)
	var b strings.Builder
	if err := WriteReport(&b, traffic.Markdown, res); err != nil {
		t.Fatal(err)
	}
	report := b.String()
	// bench.sh copies the ratio lines into summary.md by this pattern.
	summary := regexp.MustCompile(`(?m)^- .* ÷ .*$`).FindAllString(report, -1)
	if len(summary) != len(want) {
		t.Errorf("report has %d ratio lines bench.sh would pick up, want %d:\n%s", len(summary), len(want), strings.Join(summary, "\n"))
	}
	for _, line := range []string{
		"| fixed warm-up 100 | 1m6s | – | 5.00ms | 0.000ms | 16.0ms | 100ms | 150ms | 0.000ms | 0.000ms | 15.0ms | 30.0ms |",
		"Envoy's load balancing (config_dump): ROUND_ROBIN, round_robin_lb_config.slow_start_config",
	} {
		if !strings.Contains(report, line) {
			t.Errorf("report lacks %q:\n%s", line, report)
		}
	}
	if strings.Contains(report, "bad version") {
		t.Errorf("report of a run without the bad version mentions it:\n%s", report)
	}

	// make demo (baseline, danki, bad version): the old ratios and no
	// contender table.
	demoRes := &Result{Scenarios: []traffic.Scenario{res.Scenarios[0], res.Scenarios[3]}, Runs: []Run{res.Runs[0], res.Runs[3]},
		Bad: &BadVersion{Version: "v3", Slowness: "5% of requests +1000ms", Aborted: true}}
	for _, r := range ratios(demoRes) {
		if strings.Contains(r.Name, SlowStart) || strings.Contains(r.Name, Fixed100) {
			t.Errorf("demo without contenders has ratio %q", r.Name)
		}
	}
	b.Reset()
	if err := WriteReport(&b, traffic.Text, demoRes); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "bad version v3 (5% of requests +1000ms): aborted true before any user weight") || strings.Contains(b.String(), "during p50") {
		t.Errorf("demo report: want the bad version and no contender table:\n%s", b.String())
	}
}

// The bench rolls out the contenders between baseline and danki; the demo
// only baseline and danki. danki stays last: the bad version needs its
// Rollout.
func TestScenarios(t *testing.T) {
	names := func(c Config) []string {
		var out []string
		for _, s := range c.scenarios() {
			out = append(out, s.name+"="+s.dir)
		}
		return out
	}
	if got, want := names(Config{}), []string{"baseline=baseline", "danki=danki"}; !slices.Equal(got, want) {
		t.Errorf("demo scenarios %v, want %v", got, want)
	}
	want := []string{"baseline=baseline", "Istio slow start=slowstart", "fixed warm-up 100=fixed100", "danki=danki"}
	if got := names(Config{Contenders: true}); !slices.Equal(got, want) {
		t.Errorf("bench scenarios %v, want %v", got, want)
	}
	// The mirror warm-up goes next to danki, after the other contenders.
	if got, want := names(Config{Mirror: true}), []string{"baseline=baseline", "danki (mirror)=mirror", "danki=danki"}; !slices.Equal(got, want) {
		t.Errorf("mirror scenarios %v, want %v", got, want)
	}
	want = []string{"baseline=baseline", "Istio slow start=slowstart", "fixed warm-up 100=fixed100", "danki (mirror)=mirror", "danki=danki"}
	if got := names(Config{Contenders: true, Mirror: true}); !slices.Equal(got, want) {
		t.Errorf("bench scenarios with the mirror %v, want %v", got, want)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range (Config{Contenders: true, Mirror: true}).scenarios() {
		for _, f := range append([]string{filepath.Join(s.dir, "30-rollout.yaml")}, s.with...) {
			if _, err := os.Stat(filepath.Join(root, "lab", "manifests", f)); err != nil {
				t.Errorf("scenario %s: %v", s.name, err)
			}
		}
	}
}

// A fixed count (untilConverged: false) succeeds with no pod converged; its
// requests per pod still count.
func TestWarmupSummary(t *testing.T) {
	ro := func(status string) *v1alpha1.Rollout {
		return &v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{CurrentPodHash: "abc", Canary: v1alpha1.CanaryStatus{
			StepPluginStatuses: []v1alpha1.StepPluginStatus{{Name: "danki/warmup", Operation: v1alpha1.StepPluginOperationRun,
				Phase: v1alpha1.StepPluginPhaseSuccessful, Message: "warm-up done", Status: json.RawMessage(status)}},
		}}}
	}
	for _, c := range []struct {
		status string
		want   int
	}{
		{`{"runID":"r","canaryHash":"abc","converged":0,"requests":201,"pods":[{"name":"a"},{"name":"b"}]}`, 100},
		{`{"runID":"r","canaryHash":"abc","converged":2,"requests":3200,"pods":[{"name":"a"},{"name":"b"}]}`, 1600},
		{`{"runID":"r","canaryHash":"abc","converged":2,"requests":3200}`, 1600},
		{`{"runID":"r","canaryHash":"old","converged":2,"requests":3200}`, 0}, // the previous rollout's
		{`{"runID":"r","canaryHash":"abc","requests":0}`, 0},
	} {
		w := warmupSummary(ro(c.status))
		msg, n := w.message, w.perPod
		if n != c.want || (c.want > 0) != (msg != "") {
			t.Errorf("status %s: %q, %d requests per pod; want %d", c.status, msg, n, c.want)
		}
	}
}

// The contenders are the baseline plus one thing each: lab/manifests/slowstart
// has the baseline's Rollout (its DestinationRules are the difference), and
// lab/manifests/fixed100 adds only a warm-up that is what its name says:
// danki/warmup accepts the config, sends a fixed count (no convergence, no
// stable comparison) of exactly 100 requests per pod, before the first
// setWeight. This also keeps them in step with the baseline's resources.
func TestContenderExamples(t *testing.T) {
	read := func(dir string) v1alpha1.Rollout { return readExample(t, dir) }
	base := read("baseline")
	if ro := read("slowstart"); !equality.Semantic.DeepEqual(ro.Spec, base.Spec) {
		t.Errorf("slowstart's Rollout differs from the baseline's:\n%+v\n%+v", ro.Spec, base.Spec)
	}
	ro := read("fixed100")
	steps := ro.Spec.Strategy.Canary.Steps
	warm := slices.IndexFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.Plugin != nil && s.Plugin.Name == "danki/warmup" })
	weight := slices.IndexFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.SetWeight != nil })
	if warm < 0 || weight < warm {
		t.Fatalf("steps %+v: want danki/warmup before the first setWeight", steps)
	}
	c, err := warmupstep.ParseStepConfig(steps[warm].Plugin.Config, policy.Local())
	if err != nil {
		t.Fatalf("danki/warmup refuses the config: %v", err)
	}
	if want, _ := c.WantsStable(); c.Converging() || c.MaxRequests != 100 || want {
		t.Errorf("converging %t, maxRequests %d, loads stable %t; want a fixed count of 100 and no stable load", c.Converging(), c.MaxRequests, want)
	}
	// Everything but the warm-up (and its setCanaryScale) is the baseline's.
	ro.Spec.Strategy.Canary.Steps = slices.DeleteFunc(steps, func(s v1alpha1.CanaryStep) bool { return s.Plugin != nil || s.SetCanaryScale != nil })
	if !equality.Semantic.DeepEqual(ro.Spec, base.Spec) {
		t.Errorf("fixed100 differs from the baseline beyond the warm-up:\n%+v\n%+v", ro.Spec, base.Spec)
	}
}

// The lab reads each of its Rollouts' danki/warmup configs as the plugin
// does (strictly, under the plugin's policy): every lab Rollout's step
// config is accepted, its pace is the config's, and a config the plugin
// would refuse (an unknown field) is not read as if it were accepted.
func TestLabReadsTheStepConfigAsThePluginDoes(t *testing.T) {
	read := 0
	for _, dir := range []string{"danki", "fixed100", "spring", "spring-danki", "spring-fixed100", "grpc", "mirror"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "lab", "manifests", dir, "30-rollout.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), "danki/warmup") || !strings.Contains(string(raw), "kind: Rollout") {
			continue
		}
		read++
		ro := readExample(t, dir)
		c, ok := warmupStepConfig(&ro)
		if !ok {
			t.Errorf("%s: the plugin's parser refuses the lab's own danki/warmup config", dir)
			continue
		}
		if qps, conns := warmupConfigPace(&ro); qps != c.QPS || conns != c.Connections || qps <= 0 || conns <= 0 {
			t.Errorf("%s: pace %g qps × %d connections, want the step's %g × %d", dir, qps, conns, c.QPS, c.Connections)
		}
	}
	if read < 6 {
		t.Errorf("read %d lab Rollouts with a danki/warmup step, want 6 or more", read)
	}
	ro := readExample(t, "danki")
	for i, s := range ro.Spec.Strategy.Canary.Steps {
		if s.Plugin != nil && s.Plugin.Name == "danki/warmup" {
			ro.Spec.Strategy.Canary.Steps[i].Plugin.Config = []byte(`{"qps": 7, "qsp": 9}`)
		}
	}
	if c, ok := warmupStepConfig(&ro); ok {
		t.Errorf("a misspelt field (qsp) was read as accepted: %+v", c.Config)
	}
	if qps, _ := warmupConfigPace(&ro); qps == 7 {
		t.Errorf("pace %g qps from a config the plugin refuses; want the defaults", qps)
	}
}
