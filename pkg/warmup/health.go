package warmup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/danki-dev/danki/pkg/load"
)

// healthPoll is the pause between health probes of a target.
const healthPoll = 250 * time.Millisecond

// ErrUnhealthy is wrapped by the error of a warm-up whose targets did not
// answer the health path with 200 (or the gRPC health check with SERVING)
// in time.
var ErrUnhealthy = errors.New("targets not healthy")

// waitHealthy probes every target's health path (GET, with the marker header)
// until each has answered 200 once, or ctx ends — or, for gRPC services
// (Config.healthGRPC), asks the gRPC health service (waitHealthyGRPC). Health
// probes are not warm-up load: they are not counted in the results.
//
// limit says what bounds ctx, for the error ("within healthTimeout 2m0s").
func waitHealthy(ctx context.Context, cfg *session, targets []Target, limit string) error {
	if cfg.healthGRPC(targets) {
		return waitHealthyGRPC(ctx, cfg, targets, limit)
	}
	client := cfg.sideClient(cfg.Timeout.D())
	defer client.CloseIdleConnections()
	failed := failedTargets(targets, func(t Target) (string, string) {
		url := t.healthURL(cfg.HealthPath)
		return "GET " + url, probeUntilOK(ctx, client, cfg, url)
	})
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d of %d targets did not answer their health check with 200 %s: %s",
		ErrUnhealthy, len(failed), len(targets), healthLimit(ctx, limit), strings.Join(failed, "; "))
}

// sideClient is the HTTP client of the requests a warm-up sends a pod
// beside its load (the health check, the JIT signal's page): one
// connection, the warm-up's checked dial (dialContext: the network policy,
// the guard, mTLS for a pod that has it), the environment's proxy only for
// an unchecked run (the command line), and no redirect followed (it would
// name another address). timeout bounds each request.
func (c *session) sideClient(timeout time.Duration) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DialContext: c.dialContext, MaxResponseHeaderBytes: load.MaxResponseHeaderBytes}
	if !c.checked() {
		tr.Proxy = http.ProxyFromEnvironment
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// healthLimit is limit when the health wait ran out of time, else (every
// failed target given up at once: errGiveUp) what ended it.
func healthLimit(ctx context.Context, limit string) string {
	if ctx.Err() != nil {
		return limit
	}
	return "(gave up at once: waiting would not change the answer)"
}

// errGiveUp ends a health wait on a target that will not answer however
// long it is asked: a pod whose sidecar resets plaintext (STRICT), or one
// that proves another identity (its address is another workload's).
var errGiveUp = errors.New("will not answer")

// failedTargets runs check on every target at once and returns, sorted,
// "target: what: last outcome" for each whose check did not pass (an empty
// last outcome is a pass).
func failedTargets(targets []Target, check func(Target) (what, last string)) []string {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			if what, last := check(t); last != "" {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %s: %s", t, what, last))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return failed
}

// probeUntilOK returns "" once url answered 200, else the last outcome when
// ctx ended. A pod with a sidecar that resets a plaintext probe, or that
// proves another identity than its ServiceAccount's, is given up at once
// (errGiveUp): waiting changes nothing.
func probeUntilOK(ctx context.Context, client *http.Client, cfg *session, url string) string {
	last := "no answer yet"
	explain := cfg.explainerFor(url)
	_, sidecar := cfg.meshAddr(hostPort(url))
	probe := func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Header.Set(cfg.MarkerHeader, "1")
		req.Header.Set("User-Agent", userAgent)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				explained := explain.transport(err)
				last = explained.Error()
				if sidecar && explained != err || isIdentityMismatch(err) {
					return false, errGiveUp
				}
			}
			return false, nil
		}
		denied := explain.http(resp)
		// Read as the load reads (MaxResponseBodyBytes); past that, Close
		// drops the connection instead of reading on.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBodyBytes))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true, nil
		}
		last = "HTTP " + resp.Status
		if denied != nil {
			last = denied.Error()
		}
		return false, nil
	}
	switch err := wait.PollUntilContextCancel(ctx, healthPoll, true, probe); {
	case err == nil:
		return ""
	case errors.Is(err, errGiveUp):
		return last
	case ctx.Err() == nil:
		return err.Error() // the request could not be built
	}
	return last
}
