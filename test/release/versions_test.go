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

// TestOneVersion: the manifests danki ships name its images and its chart at
// one version, the one hack/version.sh --manifests prints — the gate's
// kustomize tag, the chart's version and appVersion, the init image in the
// Argo Rollouts values — and none names latest.
func TestOneVersion(t *testing.T) {
	root := repoRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh"), "--manifests").Output()
	if err != nil {
		t.Fatalf("hack/version.sh --manifests: %v", err)
	}
	v := strings.TrimSpace(string(out))
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v) {
		t.Errorf("hack/version.sh --manifests: %q, want vX.Y.Z (a release the manifests name)", v)
	}
	for file, got := range manifestVersions(t, root) {
		if got != v {
			t.Errorf("%s names %s, hack/version.sh --manifests %s", file, got, v)
		}
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

// manifestVersions reads the version each manifest under root/deploy names:
// deploy/gate's image tag, deploy/helm/danki's version (with a v) and
// appVersion, and the init image of deploy/helm/argo-rollouts-values.yaml.
func manifestVersions(t *testing.T, root string) map[string]string {
	t.Helper()
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var kustomization struct {
		Images []struct{ Name, NewTag string } `json:"images"`
	}
	if err := yaml.Unmarshal(read("deploy/gate/kustomization.yaml"), &kustomization); err != nil {
		t.Fatal(err)
	}
	if len(kustomization.Images) != 1 || kustomization.Images[0].Name != "ghcr.io/danki-dev/danki" {
		t.Fatalf("deploy/gate/kustomization.yaml images %+v: want the gate's image", kustomization.Images)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(read("deploy/helm/danki/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	var values struct {
		Controller struct {
			InitContainers []struct{ Name, Image string } `json:"initContainers"`
		} `json:"controller"`
	}
	if err := yaml.Unmarshal(read("deploy/helm/argo-rollouts-values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	inits := values.Controller.InitContainers
	if len(inits) != 1 || !strings.HasPrefix(inits[0].Image, "ghcr.io/danki-dev/danki-plugin:") {
		t.Fatalf("deploy/helm/argo-rollouts-values.yaml initContainers %+v: want danki's, ghcr.io/danki-dev/danki-plugin", inits)
	}
	return map[string]string{
		"deploy/gate/kustomization.yaml images[0].newTag":                   kustomization.Images[0].NewTag,
		"deploy/helm/danki/Chart.yaml version (v added)":                    "v" + chart.Version,
		"deploy/helm/danki/Chart.yaml appVersion":                           chart.AppVersion,
		"deploy/helm/argo-rollouts-values.yaml initContainers[0].image tag": strings.TrimPrefix(inits[0].Image, "ghcr.io/danki-dev/danki-plugin:"),
	}
}

// TestVersionSet: hack/version.sh --set, run on a copy of the tree's
// manifests, moves every one of them (and --manifests) to the new version.
func TestVersionSet(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	for _, rel := range []string{"hack/version.sh", "deploy/gate/kustomization.yaml", "deploy/helm/danki/Chart.yaml", "deploy/helm/argo-rollouts-values.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tmp, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, rel), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(tmp, "hack", "version.sh")
	if b, err := exec.Command(script, "--set", "v9.8.7").CombinedOutput(); err != nil {
		t.Fatalf("hack/version.sh --set v9.8.7: %v\n%s", err, b)
	}
	for file, got := range manifestVersions(t, tmp) {
		if got != "v9.8.7" {
			t.Errorf("after --set v9.8.7, %s names %s", file, got)
		}
	}
	if out, err := exec.Command(script, "--manifests").Output(); err != nil || strings.TrimSpace(string(out)) != "v9.8.7" {
		t.Errorf("after --set v9.8.7, --manifests prints %q (%v)", out, err)
	}
	if b, err := exec.Command(script, "--set", "9.8.7").CombinedOutput(); err == nil {
		t.Errorf("hack/version.sh --set 9.8.7 (no v) accepted: %s", b)
	}
}

// TestReleaseRefusesUnbumpedTag: a final version other than the manifests'
// (a tag pushed before hack/version.sh --set) is refused before anything is
// built, so no release ships a gate or chart that names another version.
func TestReleaseRefusesUnbumpedTag(t *testing.T) {
	root := repoRoot(t)
	out := filepath.Join(t.TempDir(), "dist")
	cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), out, "linux/amd64")
	cmd.Env = append(os.Environ(), "VERSION=v99.0.0")
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hack/release.sh with VERSION=v99.0.0 succeeded; want a refusal (the manifests name another version)\n%s", b)
	}
	if !strings.Contains(string(b), "hack/version.sh --set v99.0.0") {
		t.Errorf("refused, but without naming the fix:\n%s", b)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s was created: the refusal came after the build started", out)
	}
}
