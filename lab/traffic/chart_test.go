package traffic

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rolloutSamples is 20 s of 50 qps, 3 ms each, with a cold-start spike
// (and a few errors) from second spikeAt on for 2 s when spike is set.
func rolloutSamples(start time.Time, spike bool) []Sample {
	var out []Sample
	for i := range 1000 {
		at := time.Duration(i) * 20 * time.Millisecond
		s := Sample{Start: start.Add(at), Latency: 3 * time.Millisecond, Code: 200}
		if spike && at >= 8*time.Second && at < 10*time.Second {
			s.Latency = time.Duration(50+i%200) * time.Millisecond
			if i%50 == 0 {
				s.Code = 503
			}
		}
		out = append(out, s)
	}
	return out
}

func chartPanels() []ChartPanel {
	return []ChartPanel{
		{
			Name:    "baseline: setWeight steps, no warm-up",
			Samples: rolloutSamples(t0, true),
			Markers: []Marker{{At: t0.Add(8 * time.Second), Label: "setWeight 20"}, {At: t0.Add(14 * time.Second), Label: "setWeight 100"}},
		},
		{
			Name:    "danki: warm-up, gated ramp",
			Samples: rolloutSamples(t0.Add(time.Hour), false),
			Start:   t0.Add(time.Hour),
			Markers: []Marker{
				{At: t0.Add(time.Hour - time.Second), Label: "before start: left out"},
				{At: t0.Add(time.Hour + 5*time.Second), Label: "warm-up done"},
				{At: t0.Add(time.Hour + 17*time.Second), Label: "abort"},
			},
		},
	}
}

func TestWriteChartSVG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteChart(&b, SVG, chartPanels()); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if !strings.Contains(svg, "<svg") || !strings.HasSuffix(strings.TrimSpace(svg), "</svg>") {
		t.Fatalf("not an SVG document (%d bytes): %.200s", len(svg), svg)
	}
	for _, want := range []string{
		"setWeight 20", "setWeight 100", "warm-up done", "abort", // markers
		"baseline: setWeight steps, no warm-up", "danki: warm-up, gated ramp", // panel titles
		"p50", "p99", "max", "errors", // legend
		"latency, ms (log)", "seconds since start",
	} {
		if !strings.Contains(svg, ">"+want+"<") {
			t.Errorf("SVG has no text %q", want)
		}
	}
	if strings.Contains(svg, "before start: left out") {
		t.Error("a marker before the panel's Start was drawn")
	}
	// Exactly one legend entry "errors": only the baseline panel had errors.
	if n := strings.Count(svg, ">errors<"); n != 1 {
		t.Errorf("%d legend entries \"errors\", want 1 (only the baseline panel failed requests)", n)
	}
}

func TestWriteChartPNG(t *testing.T) {
	var b bytes.Buffer
	if err := WriteChart(&b, PNG, chartPanels()); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG\r\n\x1a\n")) || b.Len() < 10000 {
		t.Errorf("not a plausible PNG: %d bytes, starts %q", b.Len(), b.Bytes()[:min(8, b.Len())])
	}
}

func TestSaveChart(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"latency.svg", "latency.PNG"} {
		path := filepath.Join(dir, name)
		if err := SaveChart(path, chartPanels()); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v, size %d", name, err, fi.Size())
		}
	}
	if err := SaveChart(filepath.Join(dir, "latency.jpg"), chartPanels()); err == nil || !strings.Contains(err.Error(), "use .svg or .png") {
		t.Errorf("SaveChart(.jpg) error = %v, want one naming .svg and .png", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "latency.jpg")); !os.IsNotExist(err) {
		t.Error("SaveChart created a file for an unsupported extension")
	}
}

func TestWriteChartEdgeCases(t *testing.T) {
	var b bytes.Buffer
	if err := WriteChart(&b, SVG, nil); err == nil {
		t.Error("WriteChart accepted no panels")
	}
	if err := WriteChart(&b, "gif", chartPanels()); err == nil || !strings.Contains(err.Error(), `"gif" is not supported`) {
		t.Errorf("WriteChart(gif) error = %v", err)
	}
	// A panel without samples (e.g. a scenario that failed to start) still
	// draws, next to one with samples.
	b.Reset()
	panels := []ChartPanel{{Name: "empty"}, chartPanels()[0]}
	if err := WriteChart(&b, SVG, panels); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ">empty<") {
		t.Error("empty panel's title missing")
	}
}

func TestPerSecond(t *testing.T) {
	origin := t0
	ms := time.Millisecond
	samples := []Sample{
		{Start: origin.Add(-ms), Latency: 999 * ms, Code: 200}, // before origin: left out
		{Start: origin, Latency: 2 * ms, Code: 200},
		{Start: origin.Add(999 * ms), Latency: 4 * ms, Code: -1},
		{Start: origin.Add(2500 * ms), Latency: 8 * ms, Code: 200},
	}
	got := perSecond(samples, origin)
	want := []second{
		{x: 0.5, p50: 2, p99: 4, max: 4, errors: 1},
		{x: 2.5, p50: 8, p99: 8, max: 8},
	}
	if len(got) != len(want) {
		t.Fatalf("perSecond = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("second %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
