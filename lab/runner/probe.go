package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeLoop runs readiness probes, like the kubelet: a container with an
// HTTP readiness probe is ready once the probe path answers 2xx/3xx; one
// without a probe is ready once its process runs. Exec and gRPC probes are
// not supported (treated as passing once running).
func (r *Runner) probeLoop(ctx context.Context) {
	client := &http.Client{
		Timeout: time.Second,
		// Pod IPs are reached directly, never through a proxy.
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	tick := time.NewTicker(r.cfg.ProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		type target struct {
			key string
			cs  *containerState
			url string
		}
		var due []target
		now := time.Now()
		r.mu.Lock()
		for key, st := range r.pods {
			for _, cs := range st.containers {
				if cs.proc == nil || cs.proc.exited() || now.Before(cs.nextProb) {
					continue
				}
				url, err := probeURL(cs.spec, st.ip, r.portShift(st))
				if cs.sidecar {
					url, err = sidecarProbeURL(st.ip), nil
				}
				if err != nil {
					r.log.Warn("readiness probe", "pod", key, "container", cs.spec.Name, "err", err)
					cs.nextProb = now.Add(time.Minute)
					continue
				}
				if url == "" { // no HTTP probe: ready when running
					if !cs.ready {
						cs.ready = true
						r.queue.Add(key)
					}
					continue
				}
				due = append(due, target{key, cs, url})
			}
		}
		r.mu.Unlock()
		for _, t := range due {
			ok := probe(ctx, client, t.url)
			r.mu.Lock()
			// The sidecar's probe is the runner's own (no readinessProbe).
			p := t.cs.spec.ReadinessProbe
			if p == nil {
				p = &corev1.Probe{PeriodSeconds: 2}
			}
			if p.InitialDelaySeconds > 0 && time.Since(t.cs.proc.started) < time.Duration(p.InitialDelaySeconds)*time.Second {
				ok = false
			}
			if ok != t.cs.ready {
				t.cs.ready = ok
				r.log.Info("readiness changed", "pod", t.key, "container", t.cs.spec.Name, "ready", ok)
				r.queue.Add(t.key)
			}
			next := r.cfg.ProbeEvery
			if ok {
				next = time.Duration(max(p.PeriodSeconds, 1)) * time.Second
			}
			t.cs.nextProb = time.Now().Add(next)
			r.mu.Unlock()
		}
	}
}

func probe(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "danki-lab-runner/probe")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// portShift is how far a pod's app ports moved (the mesh's sidecar owns
// the declared ones), 0 when not meshed.
func (r *Runner) portShift(st *podState) int32 {
	if !st.meshed {
		return 0
	}
	return r.cfg.Mesh.offset()
}

// probeURL is the readiness probe's URL, or "" when the container has no
// HTTP readiness probe. A probe of a declared container port goes to where
// the app listens: shift ports further (in a meshed pod, as Istio's probe
// rewrite reaches the app past the sidecar).
func probeURL(c corev1.Container, ip netip.Addr, shift int32) (string, error) {
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet == nil {
		return "", nil
	}
	if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		return "", fmt.Errorf("readinessProbe.httpGet.scheme HTTPS is not supported by the lab runner: use HTTP")
	}
	port, err := resolvePort(c, p.HTTPGet.Port)
	if err != nil {
		return "", fmt.Errorf("readinessProbe.httpGet.port: %w", err)
	}
	for _, cp := range c.Ports {
		if shift != 0 && int(cp.ContainerPort) == port {
			port += int(shift)
			break
		}
	}
	path := p.HTTPGet.Path
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(port)) + path, nil
}

func resolvePort(c corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		if port.IntVal < 1 || port.IntVal > 65535 {
			return 0, fmt.Errorf("port %d out of range 1-65535", port.IntVal)
		}
		return int(port.IntVal), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q in container %s", port.StrVal, c.Name)
}
