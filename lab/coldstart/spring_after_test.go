package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/latency"
	"github.com/danki-dev/danki/pkg/warmup"
)

// springAfterRuns names the environment variable that asks for
// TestSpringAfterTheStop and how many runs it makes.
const springAfterRuns = "DANKI_SPRING_RUNS"

// TestSpringAfterTheStop measures issue 37's goal on the real Spring Boot
// sample rather than on the zoo's model of it: the 1,000 requests right
// after danki's warm-up called a cold JVM warm should have a p50 within 10 %
// and a p99 within 20 % of a warm stable JVM's, the two loaded side by side
// at the same pace (20 a second each). Each run starts three fresh JVMs in
// the canary's place, one after the other:
//
//   - control: no danki, warmed as stable was (25,000 requests one at a
//     time): the floor, what two equally warm JVMs measure side by side on
//     this machine;
//   - danki against stable: the lab's Spring step (qps 60 on 4 connections,
//     GET /?seed=…, no stopping-rule settings: stable loaded side by side
//     at the default stableQPS);
//   - danki on its own plateau: the same without stable (a first deploy, the
//     gate's first pod).
//
// Stable and the canary are pinned to a CPU each, as the lab's pods are
// limited to one. It prints one row per JVM. Where the control meets the
// goal in ≥ 90 % of runs, danki against stable must too; where it does not
// (the floor misses the goal on this machine), danki against stable ÷ the
// control, the median over the runs, must be ≤ 1.1× (p50) and ≤ 1.2× (p99):
// its canary as close to stable as a JVM warmed as long as stable was. A
// warm-up that does not converge fails it. danki on its own plateau is
// reported, not judged (a known miss: docs/stopping-rule.md, "The real JVM
// after the stop"). ~5.5 min a run on 2 cores: only with
// DANKI_SPRING_RUNS=N, not in make test.
func TestSpringAfterTheStop(t *testing.T) {
	runs, err := strconv.Atoi(os.Getenv(springAfterRuns))
	if err != nil || runs < 1 {
		t.Skipf("measures cold Spring JVMs after danki's warm-up (~5.5 min a run): set %s=N to run it", springAfterRuns)
	}
	jar := springAppJar(t)
	if runtime.NumCPU() < 2 {
		t.Skip("pins stable and the canary to a CPU each: needs 2")
	}
	// Past every step the sample's p50 took in the runs measured one at a
	// time (the last one by request ~9,000: docs/stopping-rule.md), and past the
	// further ~25 % its p50 still fell over requests 15,000–21,000 in a
	// trial of this test.
	const warmedBy = 25000
	warm := func(a *app) {
		if _, err := measure(a.URL, seeds(0), warmedBy, 0, nil); err != nil {
			t.Fatalf("warm %s: %v", a.URL, err)
		}
	}
	stable := startJVM(t, jar, "0", "VERSION=stable")
	defer stable.stop()
	warm(stable)

	var rows []afterTheStop
	for run := 1; run <= runs; run++ {
		for _, against := range []string{springControl, "stable", "own plateau"} {
			canary := startJVM(t, jar, "1", "VERSION=canary")
			var r afterTheStop
			var err error
			if against == springControl {
				warm(canary)
				r, err = measureAfter(canary, stable)
				r.stop = warmedBy
			} else {
				r, err = warmThenMeasure(canary, stable, against == "stable")
			}
			canary.stop()
			if err != nil {
				t.Fatalf("run %d, %s: %v", run, against, err)
			}
			r.run, r.against = run, against
			rows = append(rows, r)
			t.Logf("run %d, %s: %d requests before (%s); the next 1,000: p50 %s vs stable's %s, p99 %s vs %s",
				run, against, r.stop, r.jit, latency.Format(r.p50), latency.Format(r.sp50), latency.Format(r.p99), latency.Format(r.sp99))
		}
	}

	var b strings.Builder
	fmt.Fprintln(&b, "| run | in the canary's place | requests before | after: p50 | stable's | ÷ | p99 | stable's | ÷ | within 10 % / 20 % |")
	fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
	good := map[string]int{}
	for _, r := range rows {
		q50, q99 := float64(r.p50)/float64(r.sp50), float64(r.p99)/float64(r.sp99)
		ok := q50 <= 1.1 && q99 <= 1.2
		if ok {
			good[r.against]++
		}
		what := r.against
		if r.against != springControl {
			what = "danki, " + r.against
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %.2f× | %s | %s | %.2f× | %s |\n", r.run, what, r.stop,
			latency.Format(r.p50), latency.Format(r.sp50), q50, latency.Format(r.p99), latency.Format(r.sp99), q99, map[bool]string{true: "yes", false: "no"}[ok])
	}
	t.Log("\n" + b.String())
	need := int(math.Ceil(0.9 * float64(runs)))
	for _, against := range []string{springControl, "stable", "own plateau"} {
		t.Logf("%s: within the goal in %d of %d runs (the goal: ≥ %d)", against, good[against], runs, need)
	}
	if good[springControl] >= need {
		if good["stable"] < need {
			t.Errorf("danki against stable: the 1,000 requests after the stop were within 10 %% (p50) and 20 %% (p99) of stable's in %d of %d runs, want ≥ %d", good["stable"], runs, need)
		}
		return
	}
	// The floor misses the goal: two equally warm JVMs side by side differ
	// by more than it allows, and danki is judged against that floor
	// instead (danki ÷ control, run by run): its canary must be as close to
	// stable as a JVM warmed as long as stable was.
	control := map[int]afterTheStop{}
	var q50, q99 []float64
	for _, r := range rows {
		switch r.against {
		case springControl:
			control[r.run] = r
		case "stable":
			c := control[r.run] // measured first in every run
			q50 = append(q50, float64(r.p50)/float64(r.sp50)/(float64(c.p50)/float64(c.sp50)))
			q99 = append(q99, float64(r.p99)/float64(r.sp99)/(float64(c.p99)/float64(c.sp99)))
		}
	}
	m50, m99 := p50(q50), p50(q99) // the upper median
	t.Logf("the control (a second warm JVM) missed the goal in %d of %d runs: the floor misses it on this machine; danki against stable ÷ control, median of the runs: p50 %.2f×, p99 %.2f× (each run: p50 %.2f, p99 %.2f)", runs-good[springControl], runs, m50, m99, q50, q99)
	if m50 > 1.1 || m99 > 1.2 {
		t.Errorf("danki against stable ÷ the control: p50 %.2f×, p99 %.2f× (median of %d runs), want ≤ 1.1× and ≤ 1.2×: the canary after the stop is further from stable than a warm JVM is", m50, m99, runs)
	}
}

// springControl is TestSpringAfterTheStop's floor: a JVM warmed as stable
// was, with no danki, in the canary's place.
const springControl = "control: warmed as stable"

// afterTheStop is one warm-up of TestSpringAfterTheStop: where it stopped,
// what it said of the JIT, and the p50 and p99 of the canary's and
// stable's next 1,000 requests each.
type afterTheStop struct {
	run                  int
	against              string
	stop                 int64
	jit                  string
	p50, p99, sp50, sp99 time.Duration
}

// warmThenMeasure warms canary with the lab's Spring step (against stable
// when withStable), then measures it and stable (measureAfter).
func warmThenMeasure(canary, stable *app, withStable bool) (afterTheStop, error) {
	cfg := springLoad(60)
	cfg.MaxRequests, cfg.Deadline = 20000, config.Duration(6*time.Minute)
	var opts warmup.Options
	if withStable {
		opts.Stable = []warmup.Target{springTarget(stable, "stable")}
	}
	res, err := warmup.Run(context.Background(), cfg, []warmup.Target{springTarget(canary, "canary")}, opts)
	if err != nil {
		return afterTheStop{}, fmt.Errorf("warm-up: %w", err)
	}
	after, err := measureAfter(canary, stable)
	after.stop, after.jit = res.Targets[0].ConvergedAfter, res.Targets[0].JIT
	return after, err
}

// measureAfter sends canary and stable 1,000 requests each, side by side at
// 20 a second each (GET /?seed=…), and returns their p50s and p99s.
func measureAfter(canary, stable *app) (afterTheStop, error) {
	cfg := springLoad(20)
	cfg.UntilConverged, cfg.MaxRequests, cfg.MinRequests = new(bool), 1000, 1
	res, err := warmup.Run(context.Background(), cfg, []warmup.Target{springTarget(canary, "canary"), springTarget(stable, "stable")}, warmup.Options{KeepLatencies: true})
	if err != nil {
		return afterTheStop{}, fmt.Errorf("the 1,000 requests after: %w", err)
	}
	p50p99 := func(tr warmup.TargetResult) (time.Duration, time.Duration) {
		s := latency.Summarize(tr.Latencies(), 0)
		return s.P50, s.P99
	}
	var r afterTheStop
	r.p50, r.p99 = p50p99(res.Targets[0])
	r.sp50, r.sp99 = p50p99(res.Targets[1])
	return r, nil
}

// springLoad is the lab's Spring step's load (lab/manifests/spring): qps
// per target on 4 connections, GET /?seed=… (a different catalogue each
// request), health on /healthz.
func springLoad(qps float64) warmup.Config {
	return warmup.Config{
		QPS:         qps,
		Connections: 4,
		HealthPath:  "/healthz",
		Requests:    []warmup.RequestSpec{{Path: "/?seed={{randInt 1 100000}}"}},
	}
}

// springTarget is a started JVM as a warm-up target.
func springTarget(a *app, name string) warmup.Target {
	return warmup.Target{Name: name, URL: strings.TrimSuffix(a.URL, "/")}
}

// startJVM starts the jar pinned to cpus with env; stop it with stop.
func startJVM(t *testing.T, jar, cpus string, env ...string) *app {
	t.Helper()
	a, err := startApp(context.Background(), jar, filepath.Join(t.TempDir(), "app.log"), env, springReady, cpus)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
