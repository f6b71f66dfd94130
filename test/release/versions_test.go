package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOneVersion: the manifests danki ships name its images at one version —
// the gate's kustomize tag, the chart's appVersion, the init image in the
// Argo Rollouts values and the version hack/release.sh replaces — and none
// names latest.
func TestOneVersion(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var kustomization struct {
		Images []struct{ Name, NewTag string } `json:"images"`
	}
	if err := yaml.Unmarshal([]byte(read("deploy/gate/kustomization.yaml")), &kustomization); err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(read("deploy/helm/danki/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if len(kustomization.Images) != 1 || kustomization.Images[0].Name != "ghcr.io/danki-dev/danki" {
		t.Fatalf("deploy/gate/kustomization.yaml images %+v: want the gate's image", kustomization.Images)
	}
	v := chart.AppVersion
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v) || "v"+chart.Version != v {
		t.Errorf("deploy/helm/danki/Chart.yaml version %q appVersion %q: want vX.Y.Z and X.Y.Z", chart.Version, v)
	}
	if got := kustomization.Images[0].NewTag; got != v {
		t.Errorf("deploy/gate's image tag %s, the chart's appVersion %s", got, v)
	}
	if values := read("deploy/helm/argo-rollouts-values.yaml"); !strings.Contains(values, "image: ghcr.io/danki-dev/danki-plugin:"+v+"\n") {
		t.Errorf("deploy/helm/argo-rollouts-values.yaml does not name the init image at %s", v)
	}
	if script := read("hack/release.sh"); !strings.Contains(script, "\nrepo_version="+v+"\n") {
		t.Errorf("hack/release.sh's repo_version is not %s", v)
	}

	latest := regexp.MustCompile(`(?m)^.*\bimage:\s*\S+:latest\b.*$|^.*\S+/\S+:latest\b.*$`)
	for _, dir := range []string{"deploy", "docs", "examples", "images", "README.md"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range latest.FindAll(b, -1) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s names an image at latest: %s", rel, strings.TrimSpace(string(m)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The image definitions copy the files hack/release.sh writes.
	for _, f := range []string{"images/danki/Dockerfile", "images/danki-plugin/Dockerfile"} {
		if !strings.Contains(read(f), "COPY --chmod=0755 danki-${TARGETOS}-${TARGETARCH} /danki\n") {
			t.Errorf("%s does not copy dist/'s danki-<os>-<arch>", f)
		}
	}
}

// TestVersionScript: hack/version.sh prints a version usable as a tag, a
// chart version and -X main.version (a SemVer with a v).
func TestVersionScript(t *testing.T) {
	out, err := exec.Command(filepath.Join(repoRoot(t), "hack", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(out))
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
	if !semver.MatchString(v) || len(v) > 128 {
		t.Errorf("hack/version.sh: %q is not a SemVer version usable as an image tag", v)
	}
}
