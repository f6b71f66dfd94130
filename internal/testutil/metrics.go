package testutil

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/danki-dev/danki/pkg/metrics"
)

// RegisteredFamilies is every metric family the gate and the plugins
// register, gathered from a registry of their own (every counter's label
// values exist at 0 from the start: docs/metrics.md).
func RegisteredFamilies(t testing.TB) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewGate(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.NewPlugin(reg); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// Scrape is one scrape of a Prometheus metrics endpoint, parsed.
type Scrape map[string]*dto.MetricFamily

// ScrapeMetrics GETs url (a /metrics endpoint) and parses its text
// exposition; the test fails if that does not work.
func ScrapeMetrics(t testing.TB, url string) Scrape {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: parse: %v", url, err)
	}
	return families
}

// Value is the value of the series of metric name whose labels include
// labels ("k", "v", …): a counter's or gauge's value, a histogram's sample
// count. ok is false when there is no such series.
func (s Scrape) Value(name string, labels ...string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// HistogramSum is the sum of the histogram series of name with labels.
func (s Scrape) HistogramSum(name string, labels ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if m.Histogram != nil && hasLabels(m, labels) {
			return m.Histogram.GetSampleSum(), true
		}
	}
	return 0, false
}

// Names lists the metric names with prefix, sorted (for failure messages).
func (s Scrape) Names(prefix string) string {
	var out []string
	for n := range s {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.Label {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// MustValue is Value, failing the test when the series is missing.
func (s Scrape) MustValue(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	v, ok := s.Value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%s in the scrape (danki metrics: %s)", name, fmt.Sprint(labels), s.Names("danki_"))
	}
	return v
}
