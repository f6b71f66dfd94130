package analysis

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/internal/testutil"
)

// checkDashboardUserRows runs the users' rows of the shipped Grafana
// dashboard (deploy/grafana/danki-dashboard.json: Istio's standard metrics,
// and the sidecars' Envoy stats) for rollout "app" in namespace default
// against a real Prometheus holding TestRealPrometheusSidecarInboundPerPod's
// pods: 1,200 requests on two canary pods 2× slower than 3,000 on three
// stable pods. Each panel must show the two pod templates apart: the canary
// slower at p50 and p99, its share of requests 1,200 of 4,200, and each
// side's error share. (The lab has no istio-proxy, so no istio_* series:
// test/e2e runs the Istio row for its syntax only, and this test with data.)
func checkDashboardUserRows(t *testing.T, ctx context.Context, api promv1.API, canaryHash, stableHash string, canaryErrors, stableErrors float64) {
	queries, err := testutil.DashboardQueries("../../deploy/grafana/danki-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$namespace", "default", "$rollout", "app")
	checked := 0
	for _, q := range queries {
		row, title := q.Row, q.Panel
		if !strings.HasPrefix(row, "Users of $rollout") || strings.HasPrefix(title, "Rollout ") {
			continue // the Argo controller's panel: no controller here
		}
		expr := vars.Replace(q.Expr)
		res, _, _, err := api.Query(ctx, expr, time.Now())
		if err != nil {
			t.Errorf("%s: %v\n%s", title, err, expr)
			continue
		}
		bySide := map[string]float64{}
		for _, s := range res.(model.Vector) {
			bySide[string(s.Metric["rollouts_pod_template_hash"])] = float64(s.Value)
		}
		canary, stable := bySide[canaryHash], bySide[stableHash]
		near := func(got, want, tolerance float64) bool { return math.Abs(got-want) <= tolerance*want }
		var ok bool
		switch {
		case strings.Contains(title, "p50"), strings.Contains(title, "p99"):
			ok = canary > 1.5*stable && stable > 0 // 2× slower
		case strings.Contains(title, "Share"):
			// Each pod's rate is extrapolated on its own (maxOver).
			ok = near(canary, 1200.0/4200, 0.15) && near(stable, 3000.0/4200, 0.15) && near(canary+stable, 1, 1e-9)
		case strings.Contains(title, "errors"):
			ok = near(canary, canaryErrors, 0.1) && near(stable, stableErrors, 0.1)
		default:
			t.Errorf("panel %q: this test does not know what it should show", title)
			continue
		}
		if len(bySide) != 2 || !ok {
			t.Errorf("%s / %s: canary %.4g, stable %.4g (series %v)\n%s", row, title, canary, stable, res, expr)
		}
		checked++
	}
	if checked < 7 {
		t.Errorf("checked %d queries of the dashboard's users' rows, want the 7 (Istio p50, p99, share, errors; Envoy p50, p99, share)", checked)
	}
	t.Logf("dashboard: %d queries of the users' rows show canary and stable apart", checked)
}
