package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMeasurePacesAndReportsEachRequest: with a pace, measure sends one
// request per pace (never sooner), and calls after with the count done
// after every request, where the command reads the JIT at row ends.
func TestMeasurePacesAndReportsEachRequest(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		w.Header().Set("X-Version", "v1")
	}))
	defer srv.Close()

	const n, pace = 11, 20 * time.Millisecond
	var done []int
	started := time.Now()
	rs, err := measure(srv.URL+"/", func(i int) string { return fmt.Sprintf("/?seed=%d", i) }, n, pace, func(d int) error {
		done = append(done, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != n || len(done) != n || done[0] != 1 || done[n-1] != n {
		t.Fatalf("got %d results and after calls %v, want %d and 1…%d", len(rs), done, n, n)
	}
	// Sleeping never ends early: the last of n requests paced at 20 ms is
	// sent ≥ 200 ms after measure started, and arrives after that. (The
	// span between the server's first and last arrival can be a little
	// shorter: the first request's connect delays its arrival.)
	if span := arrivals[n-1].Sub(started); span < (n-1)*pace {
		t.Errorf("the last of %d requests paced at %v arrived %v after measure started: not paced", n, pace, span)
	}

	// An error from after stops the measurement and is returned.
	stop := fmt.Errorf("jit read failed")
	_, err = measure(srv.URL+"/", func(int) string { return "/" }, n, 0, func(d int) error {
		if d == 3 {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Errorf("after's error: got %v, want %v", err, stop)
	}
}

// TestCompiledMs sums the JIT counter's series from the Prometheus page,
// and says what is missing when it is not there.
func TestCompiledMs(t *testing.T) {
	page := `# HELP jvm_compilation_time_ms_total The approximate accumulated elapsed time spent in compilation
# TYPE jvm_compilation_time_ms_total counter
jvm_compilation_time_ms_total{compiler="HotSpot 64-Bit Tiered Compilers"} 9767.0
jvm_compilation_time_ms_total{compiler="other"} 33.0
jvm_compilation_time_ms_total_created 1.7e9
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/actuator/prometheus" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	got, err := compiledMs(srv.URL + "/actuator/prometheus")
	if err != nil || got != 9800 {
		t.Fatalf("compiledMs = %v, %v; want 9800 (the two series summed, _created ignored)", got, err)
	}
	page = "jvm_gc_pause_seconds_count 3\n"
	if _, err := compiledMs(srv.URL + "/actuator/prometheus"); err == nil || !strings.Contains(err.Error(), "has no jvm_compilation_time_ms_total") {
		t.Errorf("page without the counter: got %v, want an error naming it", err)
	}
}

func TestCPUCount(t *testing.T) {
	for list, want := range map[string]int{"1": 1, "0,2": 2, "0-3": 4, "0-1,3": 3} {
		if got, err := cpuCount(list); err != nil || got != want {
			t.Errorf("cpuCount(%q) = %d, %v; want %d", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1,"} {
		if _, err := cpuCount(bad); err == nil || !strings.Contains(err.Error(), "-cpus") {
			t.Errorf("cpuCount(%q): got %v, want an error naming -cpus", bad, err)
		}
	}
}
