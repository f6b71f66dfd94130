package e2e

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/warmup"
)

// dashboardFile is the Grafana dashboard danki ships (docs/metrics.md).
const dashboardFile = "deploy/grafana/danki-dashboard.json"

// checkDashboard runs every query of the shipped dashboard against the
// lab's Prometheus as Grafana would, with the rollout's namespace and name
// and the time since since as the rate window: none may be refused, and
// every query of the rows whose title starts with one of rows must return
// series. The rows on Istio's standard metrics (istio_*) are run for their
// syntax only: the lab's sidecars are upstream Envoy, which has no Istio
// stats filter (lab/README.md).
func checkDashboard(t *testing.T, l *lab, namespace, rollout string, since time.Time, rows ...string) {
	t.Helper()
	api := labPrometheus(t)
	window := windowSince(since)
	vars := strings.NewReplacer("$__rate_interval", window, "$namespace", namespace, "$rollout", rollout)
	checked := 0
	queries, err := testutil.DashboardQueries(filepath.Join(l.root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		expr := vars.Replace(q.Expr)
		if strings.Contains(expr, "$") {
			t.Errorf("%s / %s: a variable the lab does not set: %s", q.Row, q.Panel, expr)
			continue
		}
		wanted := false
		for _, r := range rows {
			wanted = wanted || strings.HasPrefix(q.Row, r)
		}
		var last string
		ok := withinScrapes(10*time.Second, func() bool {
			v, _, _, err := api.Query(l.ctx, expr, time.Now())
			if err != nil {
				t.Errorf("%s / %s: Prometheus refused the query: %v\n%s", q.Row, q.Panel, err, expr)
				return true // reported: no point asking again
			}
			vec, _ := v.(model.Vector)
			last = fmt.Sprint(v)
			return !wanted || numbers(vec) > 0
		})
		if !ok {
			t.Errorf("%s / %s: no series with a value in the lab's Prometheus after the rollout (last: %s)\n%s", q.Row, q.Panel, last, expr)
		}
		if wanted {
			checked++
		}
	}
	t.Logf("dashboard: %d queries returned series in the lab's Prometheus (rows %q; window %s)", checked, rows, window)
}

// windowSince is a PromQL range covering the run since since, and two
// scrapes at least (the lab scrapes every second).
func windowSince(since time.Time) string {
	return fmt.Sprintf("%ds", max(int(time.Since(since).Seconds())+1, 10))
}

// withinScrapes reads until read says it saw what it wants, once a second
// for up to limit: what the test just saw happen reaches the lab's
// Prometheus at its next scrape (1 s). It reports whether read succeeded.
func withinScrapes(limit time.Duration, read func() bool) bool {
	deadline := time.Now().Add(limit)
	for !read() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Second)
	}
	return true
}

// numbers counts a vector's samples that are numbers (histogram_quantile
// of no requests is NaN).
func numbers(vec model.Vector) int {
	n := 0
	for _, s := range vec {
		if !math.IsNaN(float64(s.Value)) {
			n++
		}
	}
	return n
}

// counted is the highest value the counter series matching selector
// reached since since, summed over the lab's scrape targets (one per plugin
// process or gate). The highest, not increase(): the controller starts a
// plugin's process at its first use, which may count before the first
// scrape, and a killed plugin's restart resets its counters.
func counted(t *testing.T, l *lab, selector string, since time.Time) float64 {
	t.Helper()
	api := labPrometheus(t)
	q := fmt.Sprintf("sum(max_over_time(%s[%s]))", selector, windowSince(since))
	v, _, _, err := api.Query(l.ctx, q, time.Now())
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if vec, ok := v.(model.Vector); ok && len(vec) == 1 {
		return float64(vec[0].Value)
	}
	return 0
}

// metricsAfterGoodVersion: the plugin processes the controller started
// serve danki's metrics (lab plugin args --metrics-address), the lab's
// Prometheus scraped them, and they counted the good version's warm-up,
// ramp and analysis; every dashboard query returns series.
func (d *dankiLab) metricsAfterGoodVersion(t *testing.T) {
	defaults := warmup.Config{}.WithDefaults()
	wantCounted(t, d.lab, d.start, map[string]float64{
		`danki_plugin_warmups_total{outcome="warm"}`:               1,
		`danki_plugin_warmup_requests_total`:                       2 * float64(defaults.MinStop()),
		`danki_plugin_warmup_duration_seconds_count`:               1,
		`danki_plugin_ramp_decisions_total{action="move"}`:         1,
		`danki_plugin_ramp_decisions_total{action="done"}`:         1,
		`danki_plugin_analysis_verdicts_total{phase="successful"}`: 1,
		`danki_plugin_prometheus_queries_total`:                    1,
	})
	checkDashboard(t, d.lab, "default", "app", d.start,
		"Users of $rollout: canary vs stable (sidecars' Envoy stats)", "danki plugins")
}

// metricsAfterFailures: the failures the subtests provoked are counted.
func (d *dankiLab) metricsAfterFailures(t *testing.T) {
	wantCounted(t, d.lab, d.start, map[string]float64{
		`danki_plugin_ramp_decisions_total{action="abort"}`:    1, // abort mid-ramp
		`danki_plugin_ramp_decisions_total{action="back_off"}`: 1, // the gate breach
		`danki_plugin_ramp_breaches_total{cause="slo"}`:        1,
		`danki_plugin_ramp_aborts_total{result="aborted"}`:     1,
		`danki_plugin_warmups_total{outcome="rejected"}`:       1, // slower than stable
		`danki_plugin_warmups_total{outcome="stopped"}`:        1, // aborted during warm-up
		`danki_plugin_warmups_total{outcome="not_converged"}`:  1,
		`danki_plugin_analysis_verdicts_total{phase="failed"}`: 1,
		`danki_plugin_prometheus_query_errors_total`:           1, // Prometheus down mid-ramp
	})
}

// alertFires waits until the lab's Prometheus, which loads the Helm chart's
// alerts (hack/helm.sh rules), has the alert firing.
func alertFires(t *testing.T, l *lab, alert string, limit time.Duration) {
	t.Helper()
	api := labPrometheus(t)
	waitFor(t, l.ctx, limit, "the chart's alert "+alert+" firing in the lab's Prometheus", func() (bool, string) {
		res, err := api.Alerts(l.ctx)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, a := range res.Alerts {
			name := string(a.Labels["alertname"])
			seen = append(seen, name+" "+string(a.State))
			if name == alert && a.State == promv1.AlertStateFiring {
				return true, ""
			}
		}
		return false, "alerts: " + strings.Join(seen, ", ")
	})
}

// wantCounted fails for each counter that has not counted its minimum
// since since (see counted) within a few scrapes, and logs them all. A few
// scrapes: the gate counts a warm pod as it writes its condition, which the
// test may see before the lab's Prometheus scrapes the count (1 s).
func wantCounted(t *testing.T, l *lab, since time.Time, want map[string]float64) {
	t.Helper()
	var got []string
	for selector, least := range want {
		var n float64
		withinScrapes(15*time.Second, func() bool {
			n = counted(t, l, selector, since)
			return n >= least
		})
		got = append(got, fmt.Sprintf("%s %.0f", selector, n))
		if n < least {
			t.Errorf("%s counted %.0f in the last %s, want ≥ %.0f", selector, n, time.Since(since).Round(time.Second), least)
		}
	}
	slices.Sort(got)
	t.Logf("danki's metrics, counted in the last %s:\n%s", time.Since(since).Round(time.Second), strings.Join(got, "\n"))
}

// waitScraped waits until the lab's Prometheus has scraped job's targets
// (up == 1 for each).
func waitScraped(t *testing.T, l *lab, job string, targets int) {
	t.Helper()
	api := labPrometheus(t)
	q := fmt.Sprintf(`sum(up{job=%q})`, job)
	waitFor(t, l.ctx, 30*time.Second, "the lab's Prometheus scraping "+job, func() (bool, string) {
		v, _, _, err := api.Query(l.ctx, q, time.Now())
		if err != nil {
			return false, err.Error()
		}
		vec, _ := v.(model.Vector)
		return len(vec) == 1 && int(vec[0].Value) == targets, fmt.Sprintf("%s: %v", q, v)
	})
}

// labPrometheus is a client of the lab's Prometheus.
func labPrometheus(t *testing.T) promv1.API {
	t.Helper()
	prom, err := promapi.NewClient(promapi.Config{Address: prometheusURL})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(prom)
}
