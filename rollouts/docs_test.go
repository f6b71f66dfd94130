package rollouts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	templateutil "github.com/argoproj/argo-rollouts/utils/template"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/pkg/analysis"
	dankiconfig "github.com/danki-dev/danki/pkg/config"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/shift"
	"github.com/danki-dev/danki/pkg/warmupstep"
	"github.com/danki-dev/danki/test/testenv"
)

// documentedConfigs pairs each plugin's config struct with the docs file
// whose reference tables must name every one of its fields.
var documentedConfigs = []struct {
	plugin, doc string
	config      reflect.Type
}{
	{TrafficRouterName, "../docs/istio-router.md", reflect.TypeFor[shift.RouterConfig]()},
	{WarmupPluginName, "../docs/warmup.md", reflect.TypeFor[warmupstep.StepConfig]()},
	{LatencyPluginName, "../docs/latency.md", reflect.TypeFor[analysis.Config]()},
}

// TestDocsCoverConfigFields keeps the configuration references complete: every
// JSON field of every plugin config (recursively: `ramp.interval`,
// `requests[].method`, `istio.canary.service`) must be a backticked name in
// the first cell of a table row of the plugin's docs file. A field added
// without a row fails here, naming the field and the file.
func TestDocsCoverConfigFields(t *testing.T) {
	for _, c := range documentedConfigs {
		t.Run(c.plugin, func(t *testing.T) {
			paths := fieldPaths(c.config)
			if len(paths) < 10 {
				t.Fatalf("%s has only %d fields: is the walk broken? %v", c.config, len(paths), paths)
			}
			documented := documentedFields(t, c.doc)
			for _, missing := range undocumented(paths, documented) {
				t.Errorf("%s: config field `%s` (%s) has no row in a reference table: add a table row whose first cell has `%s`",
					c.doc, missing, c.config, missing)
			}
		})
	}
}

// TestDocsCoverageCheckCanFail shows the check above is not vacuous: a config
// with a field no docs file mentions is reported, while the fields next to it
// that are documented are not.
func TestDocsCoverageCheckCanFail(t *testing.T) {
	// RouterConfig with one more block, as if someone added a field to it.
	type config struct {
		shift.RouterConfig
		Dashboard *struct {
			URL     string `json:"url"`
			Refresh int    `json:"refreshSeconds"`
		} `json:"dashboard,omitempty"`
	}
	got := undocumented(fieldPaths(reflect.TypeFor[config]()), documentedFields(t, "../docs/istio-router.md"))
	want := []string{"dashboard", "dashboard.refreshSeconds", "dashboard.url"}
	if !slices.Equal(got, want) {
		t.Fatalf("undocumented = %v, want %v", got, want)
	}
}

// TestDocsFieldPaths pins how field paths are spelled: embedded structs are
// inlined, slices of objects get [], pointers are followed, types that read
// their own JSON (durations, numbers, raw JSON, int-or-string) are leaves,
// and unexported fields and json:"-" are not configuration.
func TestDocsFieldPaths(t *testing.T) {
	type inner struct {
		Port int `json:"port"`
	}
	type embedded struct {
		Shared string `json:"shared"`
	}
	type config struct {
		embedded
		Name    string               `json:"name,omitempty"`
		Routes  []inner              `json:"routes"`
		Ptr     *inner               `json:"ptr"`
		Raw     json.RawMessage      `json:"raw"`
		Wait    dankiconfig.Duration `json:"wait"`
		Labels  map[string]string
		Skipped string `json:"-"`
		private int
	}
	_ = config{}.private
	got := fieldPaths(reflect.TypeFor[config]())
	want := []string{"Labels", "name", "ptr", "ptr.port", "raw", "routes", "routes[].port", "shared", "wait"}
	if !slices.Equal(got, want) {
		t.Fatalf("fieldPaths = %v, want %v", got, want)
	}
}

// fieldPaths lists the JSON field paths of a config type, sorted.
func fieldPaths(t reflect.Type) []string {
	var paths []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if readsOwnJSON(t) {
			return
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array, reflect.Map:
			if prefix != "" {
				walk(t.Elem(), prefix+"[]")
			}
			return
		case reflect.Struct:
		default:
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				walk(f.Type, prefix) // inlined by encoding/json
				continue
			}
			if name == "" {
				name = f.Name
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			paths = append(paths, path)
			walk(f.Type, path)
		}
	}
	walk(t, "")
	sort.Strings(paths)
	return slices.Compact(paths)
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

func readsOwnJSON(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// undocumented returns the paths (sorted) that documented does not name.
// Paths compare without their [] (the docs write `requests[].method` or,
// under a heading, `method`).
func undocumented(paths []string, documented map[string]bool) []string {
	var missing []string
	for _, p := range paths {
		if !documented[strings.ReplaceAll(p, "[]", "")] {
			missing = append(missing, p)
		}
	}
	return missing
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	fieldPath  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(\[\])?(\.[A-Za-z][A-Za-z0-9]*(\[\])?)*$`)
	tableRule  = regexp.MustCompile(`^\|[\s:|-]*$`)
)

// documentedFields reads the field paths a docs file's tables document: the
// backticked field names in the first cell of each table row. Under a
// heading whose first backticked word is itself a field path (### `slo`),
// the names are relative to it: `p99` there documents slo.p99.
func documentedFields(t *testing.T, doc string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	prefix := ""
	inCode := false
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if strings.HasPrefix(line, "#") {
			prefix = ""
			if m := backticked.FindStringSubmatch(line); m != nil && fieldPath.MatchString(m[1]) {
				prefix = strings.ReplaceAll(m[1], "[]", "")
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "|") || tableRule.MatchString(trimmed) {
			continue
		}
		first, _, _ := strings.Cut(strings.ReplaceAll(trimmed[1:], `\|`, "\x00"), "|")
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			name := strings.ReplaceAll(m[1], "[]", "")
			if !fieldPath.MatchString(m[1]) {
				continue
			}
			switch {
			case prefix == "":
				documented[name] = true
			case strings.HasPrefix(name, prefix+"."):
				documented[name] = true
			default:
				documented[prefix+"."+name] = true
			}
		}
	}
	return documented
}

// TestDocsExampleConfigs parses the danki configs in every Rollout and
// AnalysisTemplate under examples/ and lab/manifests/ with the plugins' own parsers, the way
// the controller hands them over: a typo or a removed field in an example is
// an error here, not a failed rollout on a cluster (the API server accepts
// anything under a plugin's config).
func TestDocsExampleConfigs(t *testing.T) {
	var files []string
	for _, root := range []string{"../examples", "../lab/manifests"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	for _, path := range files {
		docs, err := testenv.YAMLDocuments(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, raw := range docs {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(raw, &meta); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if meta.APIVersion != "argoproj.io/v1alpha1" {
				continue
			}
			where := fmt.Sprintf("%s (document %d)", path, i+1)
			switch meta.Kind {
			case "Rollout":
				var ro v1alpha1.Rollout
				if err := yaml.UnmarshalStrict(raw, &ro); err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				checkRolloutConfigs(t, where, &ro, counts)
			case "AnalysisTemplate":
				var at v1alpha1.AnalysisTemplate
				if err := yaml.UnmarshalStrict(raw, &at); err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				checkTemplateConfigs(t, where, &at, counts)
			}
		}
	}
	t.Logf("danki configs parsed: %v", counts)
	for _, plugin := range []string{TrafficRouterName, TrafficRouterName + " gate", WarmupPluginName, LatencyPluginName} {
		if counts[plugin] == 0 {
			t.Errorf("no example under examples/ has a %s config: is the walk broken?", plugin)
		}
	}
}

func checkRolloutConfigs(t *testing.T, where string, ro *v1alpha1.Rollout, counts map[string]int) {
	t.Helper()
	canary := ro.Spec.Strategy.Canary
	if canary == nil {
		return
	}
	if tr := canary.TrafficRouting; tr != nil && tr.Plugins[TrafficRouterName] != nil {
		counts[TrafficRouterName]++
		b, err := bind(ro, policy.Local())
		if err != nil {
			t.Errorf("%s: %s: %v", where, TrafficRouterName, err)
		} else if len(b.Gate) > 0 {
			counts[TrafficRouterName+" gate"]++
			if _, err := analysis.ParseConfig(b.Gate); err != nil {
				t.Errorf("%s: %s gate: %v", where, TrafficRouterName, err)
			}
		}
	}
	for i, step := range canary.Steps {
		if step.Plugin == nil || step.Plugin.Name != WarmupPluginName {
			continue
		}
		counts[WarmupPluginName]++
		if _, err := warmupstep.ParseStepConfig(step.Plugin.Config, policy.Local()); err != nil {
			t.Errorf("%s: steps[%d] %s: %v", where, i, WarmupPluginName, err)
		}
	}
}

func checkTemplateConfigs(t *testing.T, where string, at *v1alpha1.AnalysisTemplate, counts map[string]int) {
	t.Helper()
	// Each arg gets its default or a plausible value, as Argo resolves them.
	var args []v1alpha1.Argument
	for _, a := range at.Spec.Args {
		v := "test-" + a.Name
		switch {
		case a.Value != nil:
			v = *a.Value
		case a.Name == "namespace":
			v = "default"
		case strings.HasSuffix(a.Name, "-hash"):
			v = "7d9f8c6b5"
		case a.Name == "port":
			v = "8080"
		}
		args = append(args, v1alpha1.Argument{Name: a.Name, Value: &v})
	}
	for _, m := range at.Spec.Metrics {
		raw, ok := m.Provider.Plugin[LatencyPluginName]
		if !ok {
			continue
		}
		counts[LatencyPluginName]++
		resolved, err := templateutil.ResolveQuotedArgs(string(raw), args)
		if err != nil {
			t.Errorf("%s metric %s: Argo cannot resolve its args: %v", where, m.Name, err)
			continue
		}
		if _, err := analysis.ParseConfig([]byte(resolved)); err != nil {
			t.Errorf("%s metric %s: %s: %v", where, m.Name, LatencyPluginName, err)
		}
	}
}
