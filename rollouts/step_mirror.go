package rollouts

import (
	"context"
	"fmt"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"

	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmup"
)

// mirrorCleanupTimeout bounds removing a leftover warm-up mirror from a
// step call (Abort, Terminate, a final Run).
const mirrorCleanupTimeout = 20 * time.Second

// withMirror adds the mirror source to job (step config `mirror`): the
// Rollout's danki/istio config names the VirtualService and the canary
// destination. Mode only replaces the synthetic load (Job.Main);
// afterSynthetic mirrors once the synthetic warm-up converged, before any
// other check (Job.After).
func (s *warmupStep) withMirror(ro *v1alpha1.Rollout, cfg warmup.StepConfig, job *warmup.Job) error {
	mc, err := mirror.Parse(cfg.Mirror)
	if err != nil {
		return err
	}
	b, err := bind(ro, s.policy)
	if err != nil {
		return fmt.Errorf("mirror: needs the Rollout's %s traffic router to mirror on its VirtualService: %w", TrafficRouterName, err)
	}
	ist, err := s.istioClient()
	if err != nil {
		return err
	}
	src, err := mc.NewSource(s.log, analysis.WithPolicy(s.policy), analysis.WithKube(s.kubeClient))
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	sh := shift.New(ist, s.log)
	run := func(ctx context.Context, _ []warmup.Target, report func(string)) (string, error) {
		// prometheus.bearerTokenSecret is read from the Rollout's namespace.
		ctx = analysis.ForNamespace(ctx, ro.Namespace)
		r := &mirror.Run{Config: mc, Warmup: cfg.Config, Shifter: sh, Target: b.Target, Source: src,
			Log: s.log.With("rollout", ro.Namespace+"/"+ro.Name)}
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
func (s *warmupStep) removeMirror(ro *v1alpha1.Rollout, cfg warmup.StepConfig) {
	if len(cfg.Mirror) == 0 {
		return
	}
	b, err := bind(ro, s.policy)
	if err != nil {
		return
	}
	ist, err := s.istioClient()
	if err != nil {
		s.log.Warn("warm-up mirror not checked", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), mirrorCleanupTimeout)
	defer cancel()
	if err := mirror.Remove(ctx, shift.New(ist, s.log), b.Target); err != nil {
		s.log.Error("warm-up mirror NOT removed", "rollout", ro.Namespace+"/"+ro.Name, "err", err)
	}
}

func (s *warmupStep) istioClient() (istioclient.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.istio == nil {
		return nil, fmt.Errorf("mirror: no Istio client (%v): run the plugin with a kubeconfig or in-cluster service account allowed to update VirtualServices", s.kubeErr)
	}
	return s.istio, nil
}
