package rollouts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	templateutil "github.com/argoproj/argo-rollouts/utils/template"
	"github.com/danki-dev/danki/pkg/analysis"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/test/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// exampleArgs are values for every arg the example templates declare.
var exampleArgs = map[string]string{
	"canary-service":  "app-canary",
	"stable-service":  "app-stable",
	"namespace":       "default",
	"canary-hash":     "7d9f8c6b5",
	"stable-hash":     "5c4b3a291",
	"app":             "app",
	"port":            "8080",
	"preview-service": "app-preview",
	"active-service":  "app-active",
	"preview-hash":    "6d5f7c9b8",
}

func loadExampleTemplates(t *testing.T) map[string]*v1alpha1.AnalysisTemplate {
	t.Helper()
	files, err := filepath.Glob("../examples/analysis/*.yaml")
	if err != nil || len(files) < 6 {
		t.Fatalf("example templates: %v (%d files)", err, len(files))
	}
	out := map[string]*v1alpha1.AnalysisTemplate{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var at v1alpha1.AnalysisTemplate
		if err := yaml.UnmarshalStrict(data, &at); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if at.Kind != "AnalysisTemplate" || at.APIVersion != "argoproj.io/v1alpha1" {
			t.Fatalf("%s: %s %s", f, at.APIVersion, at.Kind)
		}
		out[filepath.Base(f)] = &at
	}
	return out
}

// examplePolicy is an operator's: the Prometheus the examples name is
// allowed, nothing else.
var examplePolicy = policy.Policy{Prometheus: []policy.Prometheus{{Address: "http://prometheus.istio-system:9090"}}}

// TestExampleAnalysisTemplates resolves each example's args exactly as the
// Argo Rollouts controller does (utils/template.ResolveQuotedArgs over the
// marshalled metric) and checks danki accepts the resulting plugin config —
// under an operator's policy, as a tenant's template: no example may name a
// controller file or another Prometheus.
func TestExampleAnalysisTemplates(t *testing.T) {
	provider := newLatencyProvider(quietLog, examplePolicy)
	seen := map[string]bool{}
	for name, at := range loadExampleTemplates(t) {
		var args []v1alpha1.Argument
		for _, a := range at.Spec.Args {
			v, ok := exampleArgs[a.Name]
			if a.Value != nil {
				v, ok = *a.Value, true
			}
			if !ok {
				t.Fatalf("%s: no test value for arg %q", name, a.Name)
			}
			args = append(args, v1alpha1.Argument{Name: a.Name, Value: &v})
		}
		for _, m := range at.Spec.Metrics {
			metricJSON, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			resolved, err := templateutil.ResolveQuotedArgs(string(metricJSON), args)
			if err != nil {
				t.Fatalf("%s metric %s: Argo cannot resolve its args: %v", name, m.Name, err)
			}
			var rm v1alpha1.Metric
			if err := json.Unmarshal([]byte(resolved), &rm); err != nil {
				t.Fatal(err)
			}
			raw, ok := rm.Provider.Plugin[LatencyPluginName]
			if !ok {
				t.Fatalf("%s metric %s has no provider.plugin.danki/latency", name, m.Name)
			}
			cfg, err := analysis.ParseConfig(raw)
			if err != nil {
				t.Fatalf("%s metric %s: %v\nconfig: %s", name, m.Name, err, raw)
			}
			if strings.Contains(string(raw), "{{") {
				t.Errorf("%s metric %s: unresolved {{…}} left: %s", name, m.Name, raw)
			}
			md := provider.GetMetadata(rm)
			if md["error"] != "" {
				t.Errorf("%s metric %s: GetMetadata: %s", name, m.Name, md["error"])
			}
			seen[cfg.Source] = true
			if cfg.TailTest != nil {
				seen["tailTest"] = true
			}
			if len(cfg.Queries) > 0 {
				seen["queries"] = true
				if !strings.Contains(md["queries"], `rollouts_pod_template_hash="7d9f8c6b5"`) {
					t.Errorf("%s: the canary hash did not reach the GC query: %s", name, md["queries"])
				}
			}
		}
	}
	for _, want := range []string{"istio", "envoy", "promql", "load", "tailTest", "queries"} {
		if !seen[want] {
			t.Errorf("no example uses %s", want)
		}
	}
}

// TestArgoRejectsCurlyQueryTemplates shows why danki's PromQL templates use
// << >>: Argo resolves every {{…}} in a metric and fails on the unknown ones.
func TestArgoRejectsCurlyQueryTemplates(t *testing.T) {
	_, err := templateutil.ResolveQuotedArgs(`{"query":"x{ {{.Selector}} }"}`, nil)
	if err == nil || !strings.Contains(err.Error(), "failed to resolve {{.Selector}}") {
		t.Fatalf("err = %v, want Argo's failed to resolve", err)
	}
}

// TestExampleAnalysisTemplatesOnAPIServer creates every example on a real
// kube-apiserver with Argo Rollouts' CRDs (skipped under -short).
func TestExampleAnalysisTemplatesOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for name, at := range loadExampleTemplates(t) {
		at.Namespace = "default"
		created, err := env.Argo.ArgoprojV1alpha1().AnalysisTemplates("default").Create(ctx, at, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: create: %v", name, err)
		}
		for i, m := range created.Spec.Metrics {
			got, want := m.Provider.Plugin[LatencyPluginName], at.Spec.Metrics[i].Provider.Plugin[LatencyPluginName]
			var g, w any
			_ = json.Unmarshal(got, &g)
			_ = json.Unmarshal(want, &w)
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			if string(gj) != string(wj) {
				t.Errorf("%s metric %s: the API server changed the plugin config:\n got %s\nwant %s", name, m.Name, gj, wj)
			}
		}
	}
}
