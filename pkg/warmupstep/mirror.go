package warmupstep

import (
	"context"
	"fmt"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
)

// mirrorCleanupTimeout bounds removing a leftover warm-up mirror from a
// step call (Abort, Terminate, a final Run).
const mirrorCleanupTimeout = 20 * time.Second

// WithMirror adds the mirror source to job (step config `mirror`; none,
// nothing to add): the Rollout's danki/istio config names the
// VirtualService and the canary destination. Mode only replaces the synthetic load (Job.Main);
// afterSynthetic mirrors once the synthetic warm-up converged, before any
// other check (Job.After).
func (s *Step) WithMirror(ro Rollout, cfg StepConfig, job *Job) error {
	if cfg.Mirror == nil {
		return nil
	}
	mc := *cfg.Mirror
	if ro.RouterErr != nil {
		return fmt.Errorf("mirror: needs the Rollout's %s traffic router to mirror on its VirtualService: %w", routerName, ro.RouterErr)
	}
	ist, err := s.istio()
	if err != nil {
		return err
	}
	src, err := mc.NewSource(s.Log, analysis.WithPolicy(s.Policy), analysis.WithKube(s.kube))
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	sh := shift.New(ist, s.Log)
	target := ro.Router.Target
	run := func(ctx context.Context, _ []warmup.Target, report func(string)) (string, error) {
		// prometheus.bearerTokenSecret is read from the Rollout's namespace.
		ctx = analysis.ForNamespace(ctx, ro.Namespace)
		r := &mirror.Run{Config: mc, Warmup: cfg.Config, Shifter: sh, Target: target, Source: src,
			Log: s.Log.With("rollout", ro.owner())}
		res, err := r.Execute(ctx, report)
		if err != nil {
			return "", err
		}
		return res.Summary(), nil
	}
	if mc.Mode == mirror.ModeOnly {
		job.Main = run
		return nil
	}
	after := job.After
	job.After = func(ctx context.Context, canary []warmup.Target, report func(string)) (string, error) {
		summary, err := run(ctx, canary, report)
		if err != nil || after == nil {
			return summary, err
		}
		more, err := after(ctx, canary, report)
		return summary + "; " + more, err
	}
	return nil
}

// removeMirror removes a warm-up mirror left on the Rollout's VirtualService
// (idempotent: no mirror, no write). It covers the ways out a run in memory
// cannot: an Abort or Terminate, or a final status handed back, after the
// plugin process restarted.
func (s *Step) removeMirror(ro Rollout, cfg StepConfig) {
	if cfg.Mirror == nil || ro.RouterErr != nil {
		return
	}
	ist, err := s.istio()
	if err != nil {
		s.Log.Warn("warm-up mirror not checked", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), mirrorCleanupTimeout)
	defer cancel()
	if err := mirror.Remove(ctx, shift.New(ist, s.Log), ro.Router.Target); err != nil {
		s.Log.Error("warm-up mirror NOT removed", "rollout", ro.owner(), "err", err)
	}
}

// istio is the Istio client for the mirror, or why there is none.
func (s *Step) istio() (istioclient.Interface, error) {
	c := s.Clients()
	if c.Istio == nil {
		return nil, fmt.Errorf("mirror: no Istio client (%v): run the plugin with a kubeconfig or in-cluster service account allowed to update VirtualServices", c.Err)
	}
	return c.Istio, nil
}
