package warmup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// grpcPort says whether a port speaks gRPC by Kubernetes' conventions: its
// name is grpc or grpc-* (Istio's protocol selection), or its appProtocol
// is grpc.
func grpcPort(name string, appProtocol *string) bool {
	return name == "grpc" || strings.HasPrefix(name, "grpc-") || (appProtocol != nil && strings.EqualFold(*appProtocol, "grpc"))
}

// healthGRPC says whether the health wait uses the gRPC health protocol:
// healthProtocol when set, else when the request mix is gRPC or every
// target's port is a gRPC port.
func (c *Config) healthGRPC(targets []Target) bool {
	switch c.HealthProtocol {
	case HealthGRPC:
		return true
	case HealthHTTP:
		return false
	}
	return c.isGRPC() || (len(targets) > 0 && !slices.ContainsFunc(targets, func(t Target) bool { return !t.GRPC }))
}

// waitHealthyGRPC is waitHealthy over the standard gRPC health protocol:
// grpc.health.v1.Health/Check for HealthService (with the marker metadata)
// on every target until each has answered SERVING once, or ctx ends.
func waitHealthyGRPC(ctx context.Context, cfg *session, targets []Target, limit string) error {
	failed := failedTargets(targets, func(t Target) (string, string) {
		return fmt.Sprintf("grpc.health.v1.Health/Check %q", cfg.HealthService), checkUntilServing(ctx, cfg, t)
	})
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d of %d targets did not answer their gRPC health check with SERVING %s: %s",
		ErrUnhealthy, len(failed), len(targets), healthLimit(ctx, limit), strings.Join(failed, "; "))
}

// checkUntilServing returns "" once t answered SERVING, else the last
// outcome when ctx ended, or at once when a pod with a sidecar resets the
// plaintext check (STRICT: waiting changes nothing).
func checkUntilServing(ctx context.Context, cfg *session, t Target) string {
	conn, err := dialGRPC(cfg, t)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	explain := cfg.explainerFor(t.URL)
	_, sidecar := cfg.meshAddr(hostPort(t.URL))
	last := "no answer yet"
	probe := func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(markedContext(ctx, cfg.Config), cfg.Timeout.D())
		defer cancel()
		resp, err := client.Check(cctx, &healthpb.HealthCheckRequest{Service: cfg.HealthService}, grpc.WaitForReady(false))
		switch {
		case err != nil:
			// A check cut by the end of the wait says nothing about the
			// target (the check's own deadline may fire just before ctx's).
			if dl, ok := ctx.Deadline(); ctx.Err() == nil && (!ok || time.Now().Before(dl)) {
				explained := explain.grpc(err)
				last = explained.Error()
				if sidecar && explained != err {
					return false, errGiveUp
				}
				if status.Code(err) == codes.Unimplemented {
					last += " (the server has no gRPC health service: register grpc.health.v1.Health, or set healthProtocol http with a healthPath)"
				}
			}
			return false, nil
		case resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return true, nil
		}
		last = resp.GetStatus().String()
		return false, nil
	}
	if err := wait.PollUntilContextCancel(ctx, healthPoll, true, probe); err == nil {
		return ""
	}
	return last
}

// podGRPCPort says whether the pod's container port is a gRPC port: named
// grpc or grpc-*, or probed by a gRPC readinessProbe.
func podGRPCPort(p *corev1.Pod, port int32) bool {
	if p == nil {
		return false
	}
	for _, c := range p.Spec.Containers {
		if rp := c.ReadinessProbe; rp != nil && rp.GRPC != nil && rp.GRPC.Port == port {
			return true
		}
		for _, cp := range c.Ports {
			if cp.ContainerPort == port && grpcPort(cp.Name, nil) {
				return true
			}
		}
	}
	return false
}

// HealthCheck says what the health wait asks the targets, for status
// messages.
func (c *Config) HealthCheck(targets []Target) string {
	if c.healthGRPC(targets) {
		return fmt.Sprintf("grpc.health.v1.Health/Check %q with SERVING", c.HealthService)
	}
	if len(targets) == 0 {
		return "their health path with 200"
	}
	return targets[0].healthURL(c.HealthPath) + " with 200"
}
