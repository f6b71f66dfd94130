package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/internal/testutil"
)

// danki capacity against a server of known capacity (one slot of 5 ms:
// 200 qps): the knee is near it, -o json carries the curve, and --min-qps
// above the knee exits non-zero naming both.
func TestCapacityCommand(t *testing.T) {
	sem := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Danki-Warmup") != "1" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		sem <- struct{}{}
		time.Sleep(5 * time.Millisecond)
		<-sem
	})}
	l := testutil.ListenLoopback(t)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + l.Addr().String()

	out, stderr, err := runDanki("capacity", "--url", url, "--start-qps", "80", "--hold", "1s", "--refine", "2", "-o", "json", "--min-qps", "400")
	if err == nil || !strings.Contains(err.Error(), "below --min-qps 400") || exitCode(err) != exitVerdict || strings.Contains(stderr, "Error:") {
		t.Fatalf("err %v; want the knee below --min-qps 400\nstderr:\n%s", err, stderr)
	}
	var res struct {
		KneeQPS float64 `json:"kneeQPS"`
		Steps   []struct {
			Broke string `json:"broke"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	broke := 0
	for _, s := range res.Steps {
		if s.Broke != "" {
			broke++
		}
	}
	if res.KneeQPS < 120 || res.KneeQPS > 230 || len(res.Steps) < 4 || broke == 0 {
		t.Fatalf("knee %.0f qps after %d steps; want near 200 (one 5 ms slot), a broken step in the curve\n%s", res.KneeQPS, len(res.Steps), out)
	}
	if !strings.Contains(stderr, "qps asked") {
		t.Fatalf("no progress line per step on stderr:\n%s", stderr)
	}
	if _, _, err := runDanki("capacity", "--url", url, "--factor", "1"); err == nil || !strings.Contains(err.Error(), "factor") {
		t.Fatalf("--factor 1: %v; want an error naming factor", err)
	}
	// danki capacity has no --allow-side-effects: the refusal says so.
	if _, _, err := runDanki("capacity", "--url", url, "--path", "/x?_method=DELETE"); err == nil || !strings.Contains(err.Error(), "danki capacity, which sends GETs only, has no flag for it") {
		t.Fatalf("--path with _method: %v; want the refusal to say danki capacity has no flag for allowSideEffects", err)
	}
}
