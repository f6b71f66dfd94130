// Command coldstart measures how a freshly started service's latency falls as
// it warms up: it sends sequential requests to a URL and prints a Markdown
// table of latency per request range (1, 2–10, 11–100, …), the shape of the
// field reports' tables. Used for examples/sample-app/README.md:
//
//	go run ./test/lab/coldstart -url http://127.0.0.1:18080/ -n 5000
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18080/", "URL to measure (a fresh pod, directly or through the gateway)")
	n := flag.Int("n", 3000, "requests to send, one at a time")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "coldstart: -n must be >= 1")
		os.Exit(2)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil}}
	lat := make([]float64, 0, *n)
	byVersion := map[string][]float64{}
	for i := 0; i < *n; i++ {
		start := time.Now()
		resp, err := client.Get(*url + "?seed=" + strconv.Itoa(i))
		if err != nil {
			fmt.Fprintf(os.Stderr, "coldstart: request %d: %v\n", i+1, err)
			os.Exit(1)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ms := float64(time.Since(start).Microseconds()) / 1000
		if resp.StatusCode != http.StatusOK {
			fmt.Fprintf(os.Stderr, "coldstart: request %d: status %d\n", i+1, resp.StatusCode)
			os.Exit(1)
		}
		lat = append(lat, ms)
		v := resp.Header.Get("X-Version")
		byVersion[v] = append(byVersion[v], ms)
	}
	fmt.Printf("%d sequential requests to %s (answered by %v)\n\n", *n, *url, keys(byVersion))
	fmt.Println("| requests | p50 ms | p90 ms | p99 ms | max ms | × warm p50 |")
	fmt.Println("|---|---|---|---|---|---|")
	warm := pct(lat[len(lat)*3/4:], 50) // last quarter: converged
	for _, r := range [][2]int{{1, 1}, {2, 10}, {11, 100}, {101, 500}, {501, 1000}, {1001, 2000}, {2001, 5000}, {5001, 10000}} {
		if r[0] > len(lat) {
			break
		}
		seg := lat[r[0]-1 : min(r[1], len(lat))]
		label := fmt.Sprintf("%d–%d", r[0], min(r[1], len(lat)))
		if r[0] == r[1] {
			label = strconv.Itoa(r[0])
		}
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f× |\n", label, pct(seg, 50), pct(seg, 90), pct(seg, 99), slices.Max(seg), pct(seg, 50)/warm)
	}
}

func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)))
	return s[min(i, len(s)-1)]
}

func keys(m map[string][]float64) []string {
	var k []string
	for v, l := range m {
		k = append(k, fmt.Sprintf("%s×%d", v, len(l)))
	}
	slices.Sort(k)
	return k
}
