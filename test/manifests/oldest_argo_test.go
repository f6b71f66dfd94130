package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/danki-dev/danki/test/testenv"
)

// TestManifestsOldestArgo applies every file with an Argo Rollouts object
// under examples/ and lab/manifests/ to an API server carrying the CRDs of
// the oldest Argo Rollouts release the compatibility matrix tests (make
// compat's, lab/scripts/compat.sh; docs/install.md, "Compatibility"), in a
// server-side dry run with strict field validation: no field they use is
// newer than that release. A control proves those CRDs are the old ones: a
// field v1.10 added to the canary strategy is refused.
func TestManifestsOldestArgo(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "lab", "scripts", "compat.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^COMPAT_ARGO_VERSION=\$\{COMPAT_ARGO_VERSION:-(v[0-9.]+)\}`).FindSubmatch(script)
	if m == nil {
		t.Fatal("lab/scripts/compat.sh pins no COMPAT_ARGO_VERSION")
	}
	version := string(m[1])
	e := testenv.StartArgo(t, version)
	k := newKubectl(t, e.Config)

	var files []string
	namespaces := map[string]bool{}
	for _, path := range append(yamlFiles(t, filepath.Join(root, "examples")), yamlFiles(t, filepath.Join(root, "lab", "manifests"))...) {
		docs := readDocs(t, path)
		argo := false
		for _, d := range docs {
			argo = argo || strings.HasPrefix(d.APIVersion, "argoproj.io/")
		}
		if !argo || notApplicable(docs) != "" {
			continue
		}
		files = append(files, path)
		for _, d := range docs {
			if d.Metadata.Namespace != "" {
				namespaces[d.Metadata.Namespace] = true
			}
		}
	}
	if len(files) < 8 {
		t.Fatalf("only %d files with Argo Rollouts objects under examples/ and lab/manifests/: is the walk broken?", len(files))
	}
	createNamespaces(t, e.Kube, namespaces)

	t.Run("control: a v1.10 field is refused by the "+version+" CRDs", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rollout.yaml")
		if err := os.WriteFile(path, []byte(`apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: newer-field, namespace: default}
spec:
  selector: {matchLabels: {app: newer-field}}
  template:
    metadata: {labels: {app: newer-field}}
    spec:
      containers: [{name: app, image: registry.example.com/app:v1}]
  strategy:
    canary:
      replicaProgressThreshold: {type: Percent, value: 50}
      steps: [{setWeight: 20}]
`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := k.run(dryRunArgs(path)...)
		if err == nil || !strings.Contains(string(out), "replicaProgressThreshold: field not declared in schema") {
			t.Fatalf("the Rollout CRD of %s accepted or refused otherwise a field it does not have (err %v):\n%s", version, err, out)
		}
	})
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		t.Run(rel, func(t *testing.T) {
			k.applyDryRun(t, path, len(readDocs(t, path)))
		})
	}
}
