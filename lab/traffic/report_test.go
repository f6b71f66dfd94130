package traffic

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/danki-dev/danki/pkg/latency"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// shuffled returns samples with latency i ms for i = 1..n, started i ms
// after t0, in random order.
func shuffled(n int) []Sample {
	s := make([]Sample, n)
	for i := range s {
		s[i] = Sample{Start: t0.Add(time.Duration(i+1) * time.Millisecond), Latency: time.Duration(i+1) * time.Millisecond, Code: 200}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

func TestSummarizeExactPercentiles(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		n                               int
		mean, p50, p90, p99, p999, pmax time.Duration
	}{
		// Nearest rank: the ceil(p/100·n)-th smallest value.
		{1000, 500500 * time.Microsecond, 500 * ms, 900 * ms, 990 * ms, 999 * ms, 1000 * ms},
		{10, 5500 * time.Microsecond, 5 * ms, 9 * ms, 10 * ms, 10 * ms, 10 * ms},
		{1, 1 * ms, 1 * ms, 1 * ms, 1 * ms, 1 * ms, 1 * ms},
		{2000, 1000500 * time.Microsecond, 1000 * ms, 1800 * ms, 1980 * ms, 1998 * ms, 2000 * ms},
	} {
		got := Summarize(shuffled(tc.n), []Phase{{Name: "all"}})[0]
		want := PhaseStats{Name: "all", Summary: latency.Summary{Count: tc.n, Min: ms, Mean: tc.mean, P50: tc.p50, P90: tc.p90, P99: tc.p99, P999: tc.p999, Max: tc.pmax}}
		if got != want {
			t.Errorf("n=%d:\n got %+v\nwant %+v", tc.n, got, want)
		}
	}
}

func TestSummarizePhaseBoundaries(t *testing.T) {
	s := func(at time.Duration, lat time.Duration, code int) Sample {
		return Sample{Start: t0.Add(at), Latency: lat, Code: code}
	}
	samples := []Sample{
		s(2*time.Second, 7*time.Millisecond, 200),                  // exactly at during.To: after
		s(-time.Second, 1*time.Millisecond, 200),                   // before, open From
		s(time.Second-time.Nanosecond, 2*time.Millisecond, 503),    // last instant of before
		s(time.Second, 300*time.Millisecond, -1),                   // exactly at during.From: during
		s(1500*time.Millisecond, 40*time.Millisecond, 302),         // during, a redirect is OK
		s(time.Hour, 3*time.Millisecond, 200),                      // after, open To
		s(2*time.Second-time.Nanosecond, 50*time.Millisecond, 404), // last instant of during
	}
	phases := []Phase{
		{Name: "before", To: t0.Add(time.Second)},
		{Name: "during", From: t0.Add(time.Second), To: t0.Add(2 * time.Second)},
		{Name: "after", From: t0.Add(2 * time.Second)},
		{Name: "empty", From: t0.Add(10 * time.Second), To: t0.Add(20 * time.Second)},
		{Name: "inverted", From: t0.Add(2 * time.Second), To: t0},
	}
	got := Summarize(samples, phases)
	ms := time.Millisecond
	want := []PhaseStats{
		{Name: "before", To: phases[0].To, Summary: latency.Summary{Count: 2, Errors: 1, Min: 1 * ms, Mean: 1500 * time.Microsecond, P50: 1 * ms, P90: 2 * ms, P99: 2 * ms, P999: 2 * ms, Max: 2 * ms}},
		{Name: "during", From: phases[1].From, To: phases[1].To, Summary: latency.Summary{Count: 3, Errors: 2, Min: 40 * ms, Mean: 130 * ms, P50: 50 * ms, P90: 300 * ms, P99: 300 * ms, P999: 300 * ms, Max: 300 * ms}},
		{Name: "after", From: phases[2].From, Summary: latency.Summary{Count: 2, Min: 3 * ms, Mean: 5 * ms, P50: 3 * ms, P90: 7 * ms, P99: 7 * ms, P999: 7 * ms, Max: 7 * ms}},
		{Name: "empty", From: phases[3].From, To: phases[3].To},
		{Name: "inverted", From: phases[4].From, To: phases[4].To},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
}

func scenariosForTable() []Scenario {
	ms := time.Millisecond
	return []Scenario{
		{
			Name: "baseline",
			Phases: []PhaseStats{
				{Name: "before", Summary: latency.Summary{Count: 3000, P50: 3500 * time.Microsecond, P99: 8 * ms, P999: 12 * ms, Max: 15 * ms}},
				{Name: "during", Summary: latency.Summary{Count: 6000, Errors: 3, P50: 4 * ms, P99: 210 * ms, P999: 980 * ms, Max: 12500 * ms}},
				{Name: "after", Summary: latency.Summary{Count: 3000, P50: 3600 * time.Microsecond, P99: 9 * ms, P999: 14 * ms, Max: 16 * ms}},
			},
			RolloutDuration: 90 * time.Second,
		},
		{
			Name: "danki",
			Phases: []PhaseStats{
				{Name: "before", Summary: latency.Summary{Count: 3000, P50: 3400 * time.Microsecond, P99: 8 * ms, P999: 11 * ms, Max: 14 * ms}},
				{Name: "during", Summary: latency.Summary{Count: 15000, P50: 3700 * time.Microsecond, P99: 10 * ms, P999: 19 * ms, Max: 25 * ms}},
				// no "after" phase: shows as "–"
			},
			RolloutDuration: 4*time.Minute + 12300*time.Millisecond,
		},
	}
}

func TestWriteTableMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, Markdown, scenariosForTable()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	wantRows := [][]string{
		{"phase", "baseline p50", "baseline p99", "baseline p99.9", "baseline max", "baseline err/req",
			"danki p50", "danki p99", "danki p99.9", "danki max", "danki err/req"},
		nil, // separator
		{"before", "3.50ms", "8.00ms", "12.0ms", "15.0ms", "0/3,000", "3.40ms", "8.00ms", "11.0ms", "14.0ms", "0/3,000"},
		{"during", "4.00ms", "210ms", "980ms", "12.5s", "3/6,000", "3.70ms", "10.0ms", "19.0ms", "25.0ms", "0/15,000"},
		{"after", "3.60ms", "9.00ms", "14.0ms", "16.0ms", "0/3,000", "–", "–", "–", "–", "–"},
	}
	for i, want := range wantRows {
		if want == nil {
			if !strings.HasPrefix(lines[i], "|---|---:|") {
				t.Errorf("line %d = %q, want the separator", i, lines[i])
			}
			continue
		}
		if got := markdownCells(lines[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("line %d:\n got %q\nwant %q", i, got, want)
		}
	}
	if lines[len(wantRows)] != "" {
		t.Errorf("want a blank line after the table, got %q", lines[len(wantRows)])
	}
	if want := "rollout duration: baseline 1m30s, danki 4m12.3s"; lines[len(wantRows)+1] != want {
		t.Errorf("footer %q, want %q", lines[len(wantRows)+1], want)
	}
}

func markdownCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

func TestWriteTableText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, Text, scenariosForTable()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	// group names, column names, rule, 3 rows, footer
	if len(lines) != 7 {
		t.Fatalf("got %d lines, want 7:\n%s", len(lines), b.String())
	}
	if f := strings.Fields(lines[0]); !reflect.DeepEqual(f, []string{"baseline", "danki"}) {
		t.Errorf("group line %q", lines[0])
	}
	if want := []string{"during", "4.00ms", "210ms", "980ms", "12.5s", "3/6,000", "3.70ms", "10.0ms", "19.0ms", "25.0ms", "0/15,000"}; !reflect.DeepEqual(strings.Fields(lines[4]), want) {
		t.Errorf("during row %q, want fields %q", lines[4], want)
	}
	// Right-aligned columns: header, rule and rows end at the same column.
	width := utf8.RuneCountInString(lines[1])
	for _, l := range lines[2:6] {
		if utf8.RuneCountInString(l) != width {
			t.Errorf("line %q is %d wide, header %d", l, utf8.RuneCountInString(l), width)
		}
	}
	// Each scenario's name starts where its first column's area starts.
	danki := strings.Index(lines[0], "danki")
	if p50 := strings.Index(lines[5], "–"); danki <= 0 || danki > p50 {
		t.Errorf("group name danki at column %d, its first value at %d", danki, p50)
	}
	if lines[6] != "rollout duration: baseline 1m30s, danki 4m12.3s" {
		t.Errorf("footer %q", lines[6])
	}
}

func TestScenarioJSONRoundTrip(t *testing.T) {
	sc := scenariosForTable()[0]
	sc.Markers = []Marker{{At: t0, Label: "setWeight 20"}}
	sc.Phases[0].From = t0
	data, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"rolloutDuration":90000000000`, `"p999":12000000`, `"label":"setWeight 20"`, `"errors":3`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, data)
		}
	}
	if bytes.Contains(data, []byte(`"to":`)) {
		t.Errorf("zero To should be omitted: %s", data)
	}
	var back Scenario
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, sc) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, sc)
	}
}

func TestWarmupCurve(t *testing.T) {
	samples := shuffled(1500) // request k took k ms
	for i := range samples {
		if samples[i].Latency == 5*time.Millisecond {
			samples[i].Code = 500
		}
	}
	got := WarmupCurve(samples)
	ms := time.Millisecond
	want := []WarmupBucket{
		{First: 1, Last: 1, Summary: latency.Summary{Count: 1, Min: ms, Mean: ms, P50: ms, P90: ms, P99: ms, P999: ms, Max: ms}},
		{First: 2, Last: 10, Summary: latency.Summary{Count: 9, Errors: 1, Min: 2 * ms, Mean: 6 * ms, P50: 6 * ms, P90: 10 * ms, P99: 10 * ms, P999: 10 * ms, Max: 10 * ms}},
		{First: 11, Last: 100, Summary: latency.Summary{Count: 90, Min: 11 * ms, Mean: 55500 * time.Microsecond, P50: 55 * ms, P90: 91 * ms, P99: 100 * ms, P999: 100 * ms, Max: 100 * ms}},
		{First: 101, Last: 1000, Summary: latency.Summary{Count: 900, Min: 101 * ms, Mean: 550500 * time.Microsecond, P50: 550 * ms, P90: 910 * ms, P99: 991 * ms, P999: 1000 * ms, Max: 1000 * ms}},
		{First: 1001, Last: 1500, Summary: latency.Summary{Count: 500, Min: 1001 * ms, Mean: 1250500 * time.Microsecond, P50: 1250 * ms, P90: 1450 * ms, P99: 1495 * ms, P999: 1500 * ms, Max: 1500 * ms}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WarmupCurve:\n got %+v\nwant %+v", got, want)
	}
	if WarmupCurve(nil) != nil {
		t.Error("WarmupCurve(nil) should be empty")
	}

	var b bytes.Buffer
	if err := WriteWarmupTable(&b, Markdown, got); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if h := markdownCells(lines[0]); !reflect.DeepEqual(h, []string{"requests", "count", "min", "mean", "p50", "p90", "p99", "max", "errors"}) {
		t.Errorf("header %q", h)
	}
	for i, want := range [][]string{
		{"1", "1", "1.00ms", "1.00ms", "1.00ms", "1.00ms", "1.00ms", "1.00ms", "0"},
		{"2–10", "9", "2.00ms", "6.00ms", "6.00ms", "10.0ms", "10.0ms", "10.0ms", "1"},
		{"11–100", "90", "11.0ms", "55.5ms", "55.0ms", "91.0ms", "100ms", "100ms", "0"},
		{"101–1,000", "900", "101ms", "550ms", "550ms", "910ms", "991ms", "1.00s", "0"},
		{"1,001–1,500", "500", "1.00s", "1.25s", "1.25s", "1.45s", "1.50s", "1.50s", "0"},
	} {
		if got := markdownCells(lines[2+i]); !reflect.DeepEqual(got, want) {
			t.Errorf("row %d:\n got %q\nwant %q", i, got, want)
		}
	}
}

func TestFormatting(t *testing.T) {
	// Latencies: latency.Format, tested in pkg/latency.
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -20000: "-20,000"} {
		if got := fmtCount(n); got != want {
			t.Errorf("fmtCount(%d) = %q, want %q", n, got, want)
		}
	}
}
