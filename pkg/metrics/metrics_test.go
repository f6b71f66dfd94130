package metrics_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	itest "github.com/danki-dev/danki/internal/testutil"
	"github.com/danki-dev/danki/pkg/metrics"
)

// A nil set records nothing and does not panic: a plugin without
// --metrics-address calls the same methods.
func TestNilRecordsNothing(t *testing.T) {
	var g *metrics.Gate
	g.Slots(3)
	g.Queued(1)
	g.SlotHeld(1)
	g.Running(1)
	g.WarmupEnded(metrics.OutcomeWarm, time.Second, 10)
	g.Admission("gated")
	g.Unregister()
	var p *metrics.Plugin
	p.WarmupEnded(metrics.OutcomeWarm, time.Second)
	p.WarmupRequests(5)
	p.RampDecision("move", "slo")
	p.RampAbort(nil)
	p.AnalysisVerdict("Successful")
	p.PrometheusQuery("timeout")
}

// Label values outside their set are recorded as "other": no caller can
// grow a label's cardinality, e.g. with an error text.
func TestLabelsStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := metrics.NewPlugin(reg)
	if err != nil {
		t.Fatal(err)
	}
	p.RampDecision("back-off", "slo")
	p.RampDecision("move", "")
	p.AnalysisVerdict("Successful")
	p.PrometheusQuery("dial tcp 10.0.0.7:9090: connection refused")
	p.WarmupEnded("pod shop/cart-7d9f deleted", time.Second)
	p.RampAbort(errors.New("forbidden"))
	want := `
# HELP danki_plugin_analysis_verdicts_total danki/latency measurements finished, by phase: successful, failed, inconclusive, error.
# TYPE danki_plugin_analysis_verdicts_total counter
danki_plugin_analysis_verdicts_total{phase="error"} 0
danki_plugin_analysis_verdicts_total{phase="failed"} 0
danki_plugin_analysis_verdicts_total{phase="inconclusive"} 0
danki_plugin_analysis_verdicts_total{phase="other"} 0
danki_plugin_analysis_verdicts_total{phase="successful"} 1
`
	if err := testutil.CollectAndCompare(reg, strings.NewReader(want), "danki_plugin_analysis_verdicts_total"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"danki_plugin_ramp_decisions_total", "action", "back_off", 1},
		{"danki_plugin_ramp_decisions_total", "action", "move", 1},
		{"danki_plugin_ramp_breaches_total", "cause", "slo", 1},
		{"danki_plugin_prometheus_query_errors_total", "kind", "other", 1},
		{"danki_plugin_warmups_total", "outcome", "other", 1},
		{"danki_plugin_ramp_aborts_total", "result", "failed", 1},
	} {
		m, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := -1.0
		for _, f := range m {
			if f.GetName() != c.name {
				continue
			}
			for _, s := range f.Metric {
				for _, l := range s.Label {
					if l.GetName() == c.label && l.GetValue() == c.value {
						got = s.Counter.GetValue()
					}
				}
			}
		}
		if got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "danki_plugin_prometheus_query_errors_total"); n != 8 {
		t.Errorf("danki_plugin_prometheus_query_errors_total has %d series, want its 7 kinds and other", n)
	}
}

// The endpoint serves the registry over HTTP; a second set on the same
// registry is refused, and a Gate taken off its registry can be made again.
func TestServeAndRegistration(t *testing.T) {
	reg, p, err := metrics.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewPlugin(reg); err == nil {
		t.Error("a second plugin set registered on the same registry")
	}
	srv, err := metrics.Serve("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	p.WarmupRequests(1200)
	m := itest.ScrapeMetrics(t, "http://"+srv.Addr+metrics.Path)
	if v := m.MustValue(t, "danki_plugin_warmup_requests_total"); v != 1200 {
		t.Errorf("danki_plugin_warmup_requests_total = %v, want 1200", v)
	}
	if _, ok := m.Value("go_goroutines"); !ok {
		t.Error("no Go runtime metrics on the plugin's endpoint")
	}

	greg := prometheus.NewRegistry()
	g, err := metrics.NewGate(greg)
	if err != nil {
		t.Fatal(err)
	}
	g.Unregister()
	if _, err := metrics.NewGate(greg); err != nil {
		t.Errorf("NewGate after Unregister: %v", err)
	}
}

// danki_build_info is 1, labelled with the build, in the gate's registry
// and the plugins' alike, and once in a registry that has both.
func TestBuildInfo(t *testing.T) {
	both := prometheus.NewRegistry()
	if _, err := metrics.NewGate(both); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewPlugin(both); err != nil {
		t.Fatalf("the plugins' metrics beside the gate's: %v", err)
	}
	plugin, _, err := metrics.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for name, reg := range map[string]*prometheus.Registry{"gate and plugins": both, "plugin process": plugin} {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var found []*dto.Metric
		for _, f := range families {
			if f.GetName() == "danki_build_info" {
				if f.GetType() != dto.MetricType_GAUGE {
					t.Errorf("%s: danki_build_info is a %s", name, f.GetType())
				}
				found = append(found, f.GetMetric()...)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%s: %d danki_build_info series, want 1", name, len(found))
		}
		labels := map[string]string{}
		for _, l := range found[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if found[0].GetGauge().GetValue() != 1 || labels["version"] == "" || labels["goversion"] != runtime.Version() || labels["revision"] == "" || len(labels) != 3 {
			t.Errorf("%s: danki_build_info %v = %g; want 1 with version, goversion %s and revision", name, labels, found[0].GetGauge().GetValue(), runtime.Version())
		}
	}
}
