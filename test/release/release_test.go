// Package release checks danki's release files: hack/release.sh (make
// release) builds them once into a temporary directory, and the tests verify
// the checksums, the argo-rollouts-config snippet's sha256, the binaries and
// the image archives (images_test.go); and that the manifests danki ships
// name one version, never latest.
//
// It has only tests; the build is skipped under `go test -short`.
package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/danki-dev/danki/test/testenv"
)

// testPlatforms are built by TestRelease: linux/amd64 (the one the snippet
// names) by default; DANKI_RELEASE_TEST_PLATFORMS="linux/amd64 darwin/arm64 …"
// for more (each cold cross-build costs minutes on 2 cores).
func testPlatforms() []string {
	if p := strings.Fields(os.Getenv("DANKI_RELEASE_TEST_PLATFORMS")); len(p) > 0 {
		return p
	}
	return []string{"linux/amd64"}
}

const testVersion = "v9.8.7-test.1"

// testEpoch is the release's SOURCE_DATE_EPOCH: every file time in the
// images and their created time (2023-11-14 22:13:20 UTC).
const testEpoch = 1700000000

var checksumLine = regexp.MustCompile(`^([0-9a-f]{64})  (danki-[a-z]+-[a-z0-9]+)$`)

func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds danki with the release flags (skipped with -short)")
	}
	root := repoRoot(t)
	out := builtRelease(t)
	platforms := testPlatforms()

	// checksums.txt lists every binary built, with its real sha256, in the
	// format sha256sum -c reads.
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := checksumLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("checksums.txt: line %q is not sha256sum's format", sc.Text())
		}
		sums[m[2]] = m[1]
	}
	var want, got []string
	for _, p := range platforms {
		want = append(want, "danki-"+strings.ReplaceAll(p, "/", "-"))
	}
	for name := range sums {
		got = append(got, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("checksums.txt lists %v, want %v", got, want)
	}
	files, _ := filepath.Glob(filepath.Join(out, "danki-*"))
	if len(files) != len(want) {
		t.Errorf("dist has %v, checksums.txt %v", files, want)
	}
	for name, sum := range sums {
		if actual := fileSHA256(t, filepath.Join(out, name)); actual != sum {
			t.Errorf("checksums.txt says %s for %s, the file's is %s", sum, name, actual)
		}
	}

	// Static binaries: no interpreter, no shared libraries (CGO_ENABLED=0).
	for _, name := range want {
		if !strings.HasPrefix(name, "danki-linux-") {
			continue
		}
		e, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		libs, _ := e.ImportedLibraries()
		for _, p := range e.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: not static", name)
			}
		}
		if len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v: not static", name, libs)
		}
		e.Close()
	}
	if v, _ := os.ReadFile(filepath.Join(out, "VERSION")); strings.TrimSpace(string(v)) != testVersion {
		t.Errorf("VERSION file %q, want %s", v, testVersion)
	}
	native := "danki-" + runtime.GOOS + "-" + runtime.GOARCH
	if _, ok := sums[native]; ok {
		b, err := exec.Command(filepath.Join(out, native), "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(b), "danki "+testVersion+" ") {
			t.Errorf("%s version: %q (%v), want danki %s (the version by -ldflags, not VCS: -buildvcs=false)", native, b, err, testVersion)
		}
	}

	// The snippet for argo-rollouts-config (docs/install.md 1b): every
	// registration downloads this version's linux/amd64 binary and checks
	// its sha256.
	amd64, ok := sums["danki-linux-amd64"]
	if !ok {
		t.Fatal("danki-linux-amd64 not built: the snippet cannot be checked")
	}
	var cm corev1.ConfigMap
	raw, err := os.ReadFile(filepath.Join(out, "argo-rollouts-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		t.Fatalf("argo-rollouts-config.yaml: %v", err)
	}
	url := "https://github.com/danki-dev/danki/releases/download/" + testVersion + "/danki-linux-amd64"
	for _, key := range []string{"metricProviderPlugins", "trafficRouterPlugins", "stepPlugins"} {
		var plugins []struct {
			Name, Location, Sha256 string
			Args                   []string
		}
		if err := yaml.UnmarshalStrict([]byte(cm.Data[key]), &plugins); err != nil || len(plugins) != 1 {
			t.Fatalf("argo-rollouts-config.yaml %s: %d entries, %v", key, len(plugins), err)
		}
		p := plugins[0]
		if p.Location != url || p.Sha256 != amd64 || len(p.Args) == 0 || p.Args[0] != "plugin" {
			t.Errorf("%s %s: location %s sha256 %s args %v; want %s, %s, [plugin …]", key, p.Name, p.Location, p.Sha256, p.Args, url, amd64)
		}
	}
	values, err := os.ReadFile(filepath.Join(out, "argo-rollouts-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(values, []byte("image: ghcr.io/danki-dev/danki-plugin:"+testVersion+"\n")) {
		t.Errorf("argo-rollouts-values.yaml does not name the init image at %s:\n%s", testVersion, values)
	}

	// dist/deploy: the tree's deploy/ with the release's version wherever it
	// names one (the gate's image tag, the chart's version and appVersion,
	// the init image, deploy/http's URL and sha256), byte for byte the
	// tree's everywhere else, and the tree's version nowhere.
	for file, got := range manifestVersions(t, out) {
		if got != testVersion {
			t.Errorf("dist/%s names %s, the release is %s", file, got, testVersion)
		}
	}
	filled := map[string][]byte{
		"deploy/http/argo-rollouts-config.yaml": raw,
		"deploy/helm/argo-rollouts-values.yaml": values,
		"deploy/gate/kustomization.yaml":        nil,
		"deploy/helm/danki/Chart.yaml":          nil,
	}
	mv, err := exec.Command(filepath.Join(root, "hack", "version.sh"), "--manifests").Output()
	if err != nil {
		t.Fatal(err)
	}
	treeVersion := strings.TrimSpace(string(mv))
	copied := 0
	err = filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		tree, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dist, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Errorf("dist/%s: %v", rel, err)
			return nil
		}
		copied++
		want, isFilled := filled[rel]
		switch {
		case isFilled && want != nil && !bytes.Equal(dist, want):
			t.Errorf("dist/%s is not the release's top-level copy of it", rel)
		case isFilled && bytes.Equal(dist, tree):
			t.Errorf("dist/%s is the tree's as it is: the version was not filled in", rel)
		case !isFilled && !bytes.Equal(dist, tree):
			t.Errorf("dist/%s differs from the tree's, but names no version", rel)
		}
		if bytes.Contains(dist, []byte(treeVersion)) || bytes.Contains(dist, []byte("version: "+strings.TrimPrefix(treeVersion, "v")+"\n")) {
			t.Errorf("dist/%s still names the tree's version %s", rel, treeVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if copied < 10 {
		t.Errorf("compared %d files of deploy/ with dist/deploy: is the walk broken?", copied)
	}
}

// built is the release TestRelease and TestImages check: hack/release.sh
// runs once for the package (a cold build costs minutes on 2 cores), into a
// directory TestMain removes.
var built struct {
	once sync.Once
	dir  string
	log  []byte
	err  error
}

// builtRelease builds the release of testPlatforms at testVersion, its
// images' times at testEpoch, the first time it is called, and returns its
// directory.
func builtRelease(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		root, err := testenv.RepoRoot()
		if err == nil {
			built.dir, err = os.MkdirTemp("", "danki-release-")
		}
		if err != nil {
			built.err = err
			return
		}
		cmd := exec.Command(filepath.Join(root, "hack", "release.sh"), append([]string{built.dir}, testPlatforms()...)...)
		cmd.Env = append(os.Environ(), "VERSION="+testVersion, "SOURCE_DATE_EPOCH="+strconv.FormatInt(testEpoch, 10))
		built.log, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", built.err, built.log)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
