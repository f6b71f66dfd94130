package lab

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCompatMatrixAgrees: the compatibility matrix in docs/install.md names
// the versions the lab really runs — the controller make compat builds and
// make test's default (build.sh, mesh.sh, the wrapper modules, danki's own
// go.mod), the API server, istiod and Envoy build.sh pins — and every row
// says when it last ran; make compat's go test -run pattern names tests and
// subtests that exist.
func TestCompatMatrixAgrees(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	find := func(what, text, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no match for %s", what, pattern)
		}
		return m[1]
	}
	build, mesh, compat := read("lab/scripts/build.sh"), read("lab/scripts/mesh.sh"), read("lab/scripts/compat.sh")
	argoRequire := `(?m)^(?:require )?\s*github\.com/argoproj/argo-rollouts (v[0-9.]+)\b`

	newest := find("build.sh", build, `(?m)^ARGO_DEFAULT_VERSION=(v[0-9.]+)\s`)
	if got := find("mesh.sh", mesh, `(?m)^ARGO_DEFAULT_VERSION=(v[0-9.]+)\s`); got != newest {
		t.Errorf("mesh.sh's ARGO_DEFAULT_VERSION %s, build.sh's %s", got, newest)
	}
	if got := find("lab/build/argo/go.mod", read("lab/build/argo/go.mod"), argoRequire); got != newest {
		t.Errorf("lab/build/argo/go.mod requires argo-rollouts %s, build.sh's default is %s", got, newest)
	}
	if got := find("go.mod", read("go.mod"), argoRequire); got != newest {
		t.Errorf("danki's go.mod requires argo-rollouts %s, the lab's default controller is %s", got, newest)
	}

	oldest := find("compat.sh", compat, `(?m)^COMPAT_ARGO_VERSION=\$\{COMPAT_ARGO_VERSION:-(v[0-9.]+)\}`)
	wrappers, err := filepath.Glob(filepath.Join(root, "lab", "build", "argo-*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var wrapped []string
	for _, w := range wrappers {
		b, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		wrapped = append(wrapped, find(w, string(b), argoRequire))
	}
	if !slices.Contains(wrapped, oldest) {
		t.Errorf("make compat runs argo-rollouts %s; no lab/build/argo-*/go.mod requires it (they require %v)", oldest, wrapped)
	}

	// The matrix: one table row per component.
	docs := read("docs/install.md")
	i := strings.Index(docs, "\n## Compatibility\n")
	if i < 0 {
		t.Fatal(`docs/install.md has no "## Compatibility" section`)
	}
	section := docs[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(line, "| ") {
			rows[strings.TrimSpace(cells[1])] = line
		}
	}
	date := regexp.MustCompile(`20\d\d-\d\d-\d\d`)
	for _, want := range []struct{ row, has, how string }{
		{"Argo Rollouts controller (oldest)", "**" + oldest + "**", "`make compat`"},
		{"Argo Rollouts controller (newest)", "**" + newest + "**", "`make test`"},
		{"Kubernetes API server", "**" + find("build.sh", build, `(?m)^KUBE_VERSION=(v[0-9.]+)\s`) + "**", ""},
		{"Istio", "**istiod " + find("build.sh", build, `(?m)^ISTIO_VERSION=([0-9.]+)\s`) + "**", ""},
		{"Envoy", "**" + find("build.sh", build, `(?m)^ENVOY_VERSION=([0-9.]+)\s`) + "**", ""},
	} {
		line, ok := rows[want.row]
		switch {
		case !ok:
			t.Errorf("docs/install.md, Compatibility: no row %q (rows: %v)", want.row, slices.Sorted(maps.Keys(rows)))
		case !strings.Contains(line, want.has) || !strings.Contains(line, want.how):
			t.Errorf("docs/install.md, Compatibility, row %q does not name %s %s: %s", want.row, want.has, want.how, line)
		case strings.HasPrefix(want.row, "Argo") && !date.MatchString(line):
			t.Errorf("docs/install.md, Compatibility, row %q says no date it ran: %s", want.row, line)
		}
	}

	// make compat's -run pattern: TOP/SUB, each an alternation.
	run := find("compat.sh", compat, `(?m)^COMPAT_RUN='([^']+)'`)
	parts := regexp.MustCompile(`^\^\(([^)]+)\)\$/\^\(([^)]+)\)$`).FindStringSubmatch(run)
	if parts == nil {
		t.Fatalf("compat.sh's COMPAT_RUN %q: want ^(TestA|TestB)$/^(sub|sub)", run)
	}
	files, err := filepath.Glob(filepath.Join(root, "test", "e2e", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var e2e strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e2e.Write(b)
	}
	for _, name := range strings.Split(parts[1], "|") {
		if !strings.Contains(e2e.String(), "func "+name+"(t *testing.T)") {
			t.Errorf("COMPAT_RUN names %s: no such test in test/e2e", name)
		}
	}
	var subtests []string
	for _, m := range regexp.MustCompile(`t\.Run\("([^"]+)"`).FindAllStringSubmatch(e2e.String(), -1) {
		subtests = append(subtests, strings.ReplaceAll(m[1], " ", "_"))
	}
	for _, prefix := range strings.Split(parts[2], "|") {
		n := 0
		for _, s := range subtests {
			if strings.HasPrefix(s, prefix) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("COMPAT_RUN's subtest pattern %s matches no t.Run in test/e2e", prefix)
		}
	}
}
