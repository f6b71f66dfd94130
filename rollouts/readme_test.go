package rollouts

import (
	"os"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"sigs.k8s.io/yaml"
)

// TestReadmeRolloutExample keeps the README's Rollout snippet true to the
// code: every danki config in it must pass the plugins' own parsers.
func TestReadmeRolloutExample(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	start := strings.Index(readme, "```yaml\nstrategy:\n")
	if start < 0 {
		t.Fatal("README.md has no ```yaml block starting with strategy:")
	}
	block := readme[start+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]

	var spec struct {
		Strategy v1alpha1.RolloutStrategy `json:"strategy"`
	}
	if err := yaml.UnmarshalStrict([]byte(block), &spec); err != nil {
		t.Fatalf("README Rollout snippet does not parse as a Rollout strategy: %v", err)
	}
	ro := &v1alpha1.Rollout{Spec: v1alpha1.RolloutSpec{Strategy: spec.Strategy}}
	ro.Namespace, ro.Name = "default", "app"
	b, err := bind(ro, policy.Local())
	if err != nil {
		t.Fatalf("README danki/istio config: %v", err)
	}
	if _, err := analysis.ParseConfig(b.Gate); err != nil {
		t.Fatalf("README danki/istio gate config: %v", err)
	}
	var warmups int
	for i, step := range spec.Strategy.Canary.Steps {
		if step.Plugin != nil && step.Plugin.Name == WarmupPluginName {
			warmups++
			if _, err := warmupstep.ParseStepConfig(step.Plugin.Config, policy.Local()); err != nil {
				t.Fatalf("README steps[%d] danki/warmup config: %v", i, err)
			}
		}
	}
	if warmups != 1 {
		t.Fatalf("README snippet has %d danki/warmup steps, want 1", warmups)
	}
}
