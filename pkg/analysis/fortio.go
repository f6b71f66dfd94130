package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"fortio.org/fortio/fhttp"
	"fortio.org/fortio/stats"

	"github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
)

// FortioConfig reads fortio result JSON (fortio's -json output, or what
// danki's warm-up step writes) from files or http(s) URLs.
type FortioConfig struct {
	Canary string `json:"canary"`
	Stable string `json:"stable,omitempty"`
}

// compile checks the fortio block; problems are added under "fortio.".
func (fc FortioConfig) compile(p *config.Errors) {
	if fc.Canary == "" {
		p.Addf("fortio.canary", "missing; set the path or http(s) URL of the canary's fortio result JSON")
	}
}

// Fortio is a Source that reads fortio HTTP result JSON (fhttp.HTTPRunnerResults,
// what `fortio load -json` writes and what danki's warm-up step emits) from
// files or http(s) URLs. Unlike Prometheus histograms, fortio keeps the raw
// minimum and maximum, so slo.max can be checked; its buckets are also much
// finer. The window does not apply: a result file is one whole run.
//
// Under a tenant policy a result is an http(s) URL within the operator's
// --allow-target, dialled under the network policy (a name resolving to
// loopback, link-local or the API server is refused when dialled, and so
// is a redirect outside the allowed targets); a path is refused, since the
// files are the controller's. Every result is read up to the policy's
// FileBytes.
type Fortio struct {
	canary, stable string
	client         *http.Client
	maxBytes       int64
}

// NewFortio builds the fortio source for a validated Config, held to the
// policy of WithPolicy (default: the strictest, which reads no file).
func NewFortio(cfg Config, opts ...Option) (*Fortio, error) {
	return newFortio(cfg, options(opts).policy)
}

func newFortio(cfg Config, pol policy.Policy) (*Fortio, error) {
	if cfg.Fortio == nil {
		return nil, fmt.Errorf("fortio: missing")
	}
	var errs config.Errors
	for _, loc := range []struct{ field, value string }{{"fortio.canary", cfg.Fortio.Canary}, {"fortio.stable", cfg.Fortio.Stable}} {
		switch {
		case loc.value == "":
		case isHTTP(loc.value):
			errs.Add("", pol.Network.CheckURL(loc.field, loc.value))
		default:
			errs.Add("", pol.CheckFile(loc.field, loc.value, "serve the result over http(s) from an address the operator allows (--allow-target), or measure with source: load"))
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return &Fortio{canary: cfg.Fortio.Canary, stable: cfg.Fortio.Stable, client: fortioClient(pol.Network), maxBytes: pol.Limits.WithDefaults().FileBytes}, nil
}

func isHTTP(location string) bool {
	return strings.HasPrefix(location, "http://") || strings.HasPrefix(location, "https://")
}

// fortioClient dials under n and follows a redirect only to an allowed
// target. No proxy: a proxy's address would be dialled in the target's
// place.
func fortioClient(n policy.Network) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if !n.AnyTarget {
		tr.Proxy = nil
		tr.DialContext = n.Dialer(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return n.CheckURL("redirect", req.URL.String())
	}}
}

// Fetch reads the canary's (and stable's) result.
func (f *Fortio) Fetch(ctx context.Context, _ time.Duration) (*Sample, error) {
	s := &Sample{Queries: []string{f.canary}}
	canary, err := f.read(ctx, "canary", f.canary)
	if err != nil {
		return s, err
	}
	s.Canary = canary
	if f.stable != "" {
		s.Queries = append(s.Queries, f.stable)
		stable, err := f.read(ctx, "stable", f.stable)
		if err != nil {
			return s, err
		}
		s.Stable = &stable
	}
	return s, nil
}

func (f *Fortio) read(ctx context.Context, name, location string) (Side, error) {
	data, err := f.load(ctx, location)
	if err != nil {
		return Side{}, fmt.Errorf("read %s fortio result %s (fortio.%s): %w", name, location, name, err)
	}
	var res fhttp.HTTPRunnerResults
	if err := json.Unmarshal(data, &res); err != nil {
		return Side{}, fmt.Errorf("%s fortio result %s is not fortio HTTP result JSON: %w", name, location, err)
	}
	return FortioSide(name, location, &res), nil
}

func (f *Fortio) load(ctx context.Context, location string) ([]byte, error) {
	if !isHTTP(location) {
		return policy.ReadFile(location, f.maxBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, location, nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET answered %s", resp.Status)
	}
	return policy.ReadAtMost(resp.Body, f.maxBytes)
}

// FortioSide converts a fortio HTTP result into a Side: the duration
// histogram (seconds → milliseconds) with its raw min and max, the request
// count, and the error count (5xx and fortio's -1 for connection errors).
// A gRPC result (RunType "gRPC", as danki's gRPC warm-up writes it) holds
// gRPC status codes: every code but 0 (OK) is an error.
func FortioSide(name, from string, res *fhttp.HTTPRunnerResults) Side {
	grpc := strings.EqualFold(res.RunType, "gRPC")
	side := Side{
		Name:        name,
		LatencyFrom: from,
		Latency:     FortioHistogram(res.DurationHistogram),
		Requests:    Measured{From: from, Found: true},
		Errors:      Measured{From: from, Found: true},
	}
	for code, n := range res.RetCodes {
		side.Requests.Value += float64(n)
		if (grpc && code != 0) || (!grpc && (code < 100 || code >= 500)) {
			side.Errors.Value += float64(n)
		}
	}
	if len(res.RetCodes) == 0 && res.DurationHistogram != nil {
		side.Requests.Value = float64(res.DurationHistogram.Count)
	}
	return side
}

// FortioHistogram converts fortio's histogram (seconds, non-cumulative
// buckets that skip empty ranges) into a cumulative Histogram in
// milliseconds. A gap between two exported buckets becomes an empty bucket
// so that interpolation never spreads counts over a range fortio saw empty.
func FortioHistogram(hd *stats.HistogramData) Histogram {
	h := Histogram{HasRaw: true}
	if hd == nil || hd.Count == 0 || len(hd.Data) == 0 {
		return Histogram{}
	}
	const ms = 1000.0
	h.Min, h.Max = hd.Min*ms, hd.Max*ms
	cum := 0.0
	prevEnd := hd.Min * ms
	for _, b := range hd.Data {
		start, end := b.Start*ms, b.End*ms
		if len(h.Buckets) > 0 && start > prevEnd {
			h.Buckets = append(h.Buckets, Bucket{UpperBound: start, Count: cum})
		}
		cum += float64(b.Count)
		h.Buckets = append(h.Buckets, Bucket{UpperBound: end, Count: cum})
		prevEnd = end
	}
	h.normalize()
	return h
}
