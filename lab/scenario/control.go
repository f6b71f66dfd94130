package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// controlRollout is lab/manifests/danki/30-rollout.yaml (raw) with its
// danki/warmup step replaced by a pause of d (rounded up to whole seconds,
// what Argo's pause takes): the same Rollout whose new pods get no warm-up
// traffic at all. The rest — the canary scale, the ramp, the analysis — is
// left as it is, so the stretch before the first setWeight differs from
// danki's in the warm-up's load alone. It returns the Rollout as JSON
// (kubectl applies it as it is).
func controlRollout(raw []byte, d time.Duration) ([]byte, error) {
	if d <= 0 {
		return nil, fmt.Errorf("a pause of %s: want a positive warm-up length", d)
	}
	var ro map[string]any
	if err := yaml.Unmarshal(raw, &ro); err != nil {
		return nil, fmt.Errorf("danki's Rollout: %w", err)
	}
	spec, _ := ro["spec"].(map[string]any)
	strategy, _ := spec["strategy"].(map[string]any)
	canary, _ := strategy["canary"].(map[string]any)
	steps, _ := canary["steps"].([]any)
	replaced := 0
	for i, s := range steps {
		step, _ := s.(map[string]any)
		plugin, _ := step["plugin"].(map[string]any)
		if plugin != nil && plugin["name"] == "danki/warmup" {
			steps[i] = map[string]any{"pause": map[string]any{"duration": fmt.Sprintf("%ds", int64(math.Ceil(d.Seconds())))}}
			replaced++
		}
	}
	if replaced != 1 {
		return nil, fmt.Errorf("danki's Rollout has %d danki/warmup steps, want 1 to replace", replaced)
	}
	return json.Marshal(ro)
}

// control rolls out v2 with danki's Rollout whose warm-up step is a pause
// of warmup (danki's warm-up length in this run), under the same users. It
// may end aborted: its cold canary meets danki's ramp gate and analysis;
// only its hold stretch and what users saw are compared.
func (l *lab) control(ctx context.Context, manifests string, warmup time.Duration) (*Run, error) {
	raw, err := os.ReadFile(filepath.Join(manifests, "danki", "30-rollout.yaml"))
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	js, err := controlRollout(raw, warmup)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	dir, err := os.MkdirTemp("", "danki-control-")
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	defer os.RemoveAll(dir)
	rollout := filepath.Join(dir, "30-rollout.json")
	if err := os.WriteFile(rollout, js, 0o644); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	name := fmt.Sprintf("the control (lab/manifests/danki with a pause of %s instead of the warm-up)", warmup.Round(time.Second))
	if err := l.installFiles(ctx, mainApp, name, filepath.Join(manifests, "danki", "40-analysis.yaml"), rollout); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	l.cfg.Log.Info("users warm the v1 pods (not measured)", "scenario", Control, "for", l.cfg.Settle)
	if err := sleep(ctx, l.cfg.Settle+l.cfg.Before); err != nil {
		return nil, err
	}
	run, err := l.rollout(ctx, mainApp, Control, "v2", nil)
	switch {
	case err != nil && run != nil && run.HoldDuration() > 0 && ctx.Err() == nil:
		// Its cold canary held up the ramp: the hold was measured, the
		// next install replaces the Rollout.
		l.cfg.Log.Warn("the control's rollout did not finish (only its pause is compared)", "err", err)
	case err != nil:
		return nil, err
	}
	if run.HoldDuration() <= 0 {
		return nil, errors.New("control: the pause standing in for the warm-up was not seen to start and end")
	}
	if run.Outcome != "promoted" {
		l.cfg.Log.Warn("the control's cold canary was not promoted (only its pause is compared)", "outcome", run.Outcome)
	}
	return run, nil
}
