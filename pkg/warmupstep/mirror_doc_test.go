package warmupstep

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/mirror"
	"github.com/danki-dev/danki/pkg/policy"
)

// The step example in docs/warmup.md's "Mirrored traffic" section is a
// valid danki/warmup config with a valid mirror block (moved from
// pkg/mirror: the step config that holds the block is this package's).
func TestMirrorDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/warmup.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Mirrored traffic\n")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/warmup.md has no yaml example in its Mirrored traffic section")
	}
	var steps []struct {
		Plugin struct {
			Name   string          `json:"name"`
			Config json.RawMessage `json:"config"`
		} `json:"plugin"`
	}
	if err := yaml.UnmarshalStrict([]byte(block), &steps); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].Plugin.Name != "danki/warmup" {
		t.Fatalf("example steps %+v", steps)
	}
	cfg, err := ParseStepConfig(steps[0].Plugin.Config, policy.Local())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mirror == nil {
		t.Fatal("the example has no mirror block")
	}
	mc := *cfg.Mirror
	if mc.Mode != mirror.ModeOnly || mc.MaxPercent != 20 || !mc.AllowSideEffects {
		t.Fatalf("mirror block %+v", mc)
	}
}
