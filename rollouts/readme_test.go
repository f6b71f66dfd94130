package rollouts

import (
	"os"
	"reflect"
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

// TestDocsInstallRegistrationBlock keeps the one written-out plugin registration
// (docs/install.md; every other page links to it) true to what deploy/
// installs and to the plugins danki serves: the block is
// deploy/argo-rollouts-config.yaml's data, and it registers each plugin once
// under its kind, started as `danki plugin`.
func TestDocsInstallRegistrationBlock(t *testing.T) {
	data, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	const open = "  ```yaml\n  data:\n"
	start := strings.Index(doc, open)
	if start < 0 {
		t.Fatal("docs/install.md has no indented ```yaml block starting with data: (the registration)")
	}
	block := doc[start+len("  ```yaml\n"):]
	block = block[:strings.Index(block, "  ```")]
	var lines []string
	for l := range strings.SplitSeq(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	var documented, installed struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict([]byte(strings.Join(lines, "\n")), &documented); err != nil {
		t.Fatalf("docs/install.md registration block: %v", err)
	}
	raw, err := os.ReadFile("../deploy/argo-rollouts-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &installed); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(documented.Data, installed.Data) {
		t.Fatalf("docs/install.md's registration block is not deploy/argo-rollouts-config.yaml's data:\n%v\nvs\n%v", documented.Data, installed.Data)
	}
	for key, plugin := range map[string]string{
		"stepPlugins":           WarmupPluginName,
		"trafficRouterPlugins":  TrafficRouterName,
		"metricProviderPlugins": LatencyPluginName,
	} {
		var entries []struct {
			Name     string   `json:"name"`
			Location string   `json:"location"`
			Args     []string `json:"args"`
		}
		if err := yaml.UnmarshalStrict([]byte(documented.Data[key]), &entries); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if len(entries) != 1 || entries[0].Name != plugin || len(entries[0].Args) == 0 || entries[0].Args[0] != "plugin" {
			t.Errorf("%s = %+v, want one entry %s with args [\"plugin\", …]", key, entries, plugin)
		}
	}
}
