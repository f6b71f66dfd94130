package analysis

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/danki-dev/danki/internal/testutil"
)

func TestPrometheusIstioQueriesAndPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	fake := testutil.NewPrometheus(t)
	canaryHist := healthyIstio(fake, rng, typical)
	v := analyze(t, istioConfig(fake.URL))
	if v.Phase != Pass {
		t.Fatalf("phase %s, want Pass: %s", v.Phase, v.Summary)
	}
	const c, s = `destination_service="app-canary.default.svc.cluster.local",reporter="source"`, `destination_service="app-stable.default.svc.cluster.local",reporter="source"`
	want := []string{
		`sum by (le) (increase(istio_request_duration_milliseconds_bucket{` + c + `}[5m]))`,
		`sum(increase(istio_requests_total{` + c + `}[5m]))`,
		`sum(increase(istio_requests_total{` + c + `,response_code=~"5.."}[5m]))`,
		`sum by (le) (increase(istio_request_duration_milliseconds_bucket{` + s + `}[5m]))`,
		`sum(increase(istio_requests_total{` + s + `}[5m]))`,
		`sum(increase(istio_requests_total{` + s + `,response_code=~"5.."}[5m]))`,
	}
	got := fake.Queries()
	for _, w := range want {
		if !containsString(got, w) {
			t.Errorf("query not sent: %s\nsent: %q", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("sent %d queries, want %d", len(got), len(want))
	}
	// The verdict carries the numbers: canary p99 is histogram_quantile's.
	cp99 := canaryHist.Quantile(0.99)
	if v.Canary.P99 == nil || *v.Canary.P99 != cp99 {
		t.Errorf("canary p99 %v, want %v", v.Canary.P99, cp99)
	}
	if v.Canary.ErrorRate == nil || math.Abs(*v.Canary.ErrorRate-4.0/2000) > 1e-12 {
		t.Errorf("canary error rate %v, want 0.002", v.Canary.ErrorRate)
	}
	if v.Tail == nil || v.Tail.ThresholdMs != 100 || v.Tail.Rejected {
		t.Errorf("tail test %+v, want threshold 100 ms, not rejected", v.Tail)
	}
	if !strings.HasPrefix(v.Summary, "Pass: all SLOs hold | canary p99") {
		t.Errorf("summary %q", v.Summary)
	}
}

// TestIstioDestinationReporterCannotSelectByService: with reporter
// destination, destination_service is any one of the pod's Services.
func TestIstioDestinationReporterCannotSelectByService(t *testing.T) {
	_, err := ParseConfig([]byte(`{"source":"istio","prometheus":{"address":"http://p:9090"},"istio":{"reporter":"destination","canary":{"service":"app-canary.default.svc.cluster.local"}},"slo":{"p99":"1s"}}`))
	if err == nil || !strings.Contains(err.Error(), "istio.canary.service: with istio.reporter destination") || !strings.Contains(err.Error(), "reporter: source") {
		t.Fatalf("err %v, want one naming istio.canary.service and the fix", err)
	}
	c, err := ParseConfig([]byte(`{"source":"istio","prometheus":{"address":"http://p:9090"},"istio":{"reporter":"destination","canary":{"version":"v2"}},"slo":{"p99":"1s"}}`))
	if err != nil || c.Istio.Reporter != "destination" {
		t.Fatalf("reporter destination with a version selector: %v", err)
	}
}
