// Package architecture holds tests of the module's shape: which package may
// import which (docs/architecture.md).
package architecture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/danki-dev/danki"

// pkgInfo is what go list says of one package, its import paths relative to
// the module ("pkg/warmup"); imports from outside the module are dropped.
type pkgInfo struct {
	Path        string
	Imports     []string // non-test code
	TestImports []string // _test.go files, in-package and external
}

// floor is one row of docs/architecture.md's table: a floor number and the
// package patterns on it ("pkg/warmup", or "test/..." for a whole subtree).
type floor struct {
	Level    int
	Patterns []string
}

// TestImportsKeepToTheirFloors: every package of the module is placed by
// docs/architecture.md's table, its non-test code imports only packages on
// lower floors, the lab is imported by nothing outside it (but test/e2e),
// and test helpers only by tests.
func TestImportsKeepToTheirFloors(t *testing.T) {
	floors := readFloors(t, "../../docs/architecture.md")
	pkgs := listPackages(t)
	if len(pkgs) < 15 {
		t.Fatalf("go list found %d packages: is the walk broken?", len(pkgs))
	}
	for _, v := range violations(floors, pkgs) {
		t.Error(v)
	}
}

// TestLayerCheckCanFail: an import up a floor, one along a floor, a package
// the table does not place, the product importing the lab, and non-test
// code importing a test helper are each reported; a clean graph is not.
func TestLayerCheckCanFail(t *testing.T) {
	floors := []floor{
		{0, []string{"pkg/config"}},
		{1, []string{"pkg/warmup"}},
		{2, []string{"pkg/analysis", "pkg/capacity"}},
		{6, []string{"rollouts"}},
		{10, []string{"lab/traffic"}},
		{20, []string{"internal/testutil", "test/..."}},
	}
	clean := []pkgInfo{
		{Path: "pkg/config"},
		{Path: "pkg/warmup", Imports: []string{"pkg/config"}, TestImports: []string{"internal/testutil", "test/testenv"}},
		{Path: "pkg/analysis", Imports: []string{"pkg/warmup", "pkg/config"}},
		{Path: "rollouts", Imports: []string{"pkg/analysis"}},
		{Path: "lab/traffic", Imports: []string{"pkg/warmup"}},
		{Path: "test/e2e", TestImports: []string{"lab/traffic", "pkg/warmup"}},
		{Path: "test/testenv"},
	}
	if v := violations(floors, clean); len(v) != 0 {
		t.Fatalf("clean graph reported: %v", v)
	}
	for _, tc := range []struct {
		name string
		pkg  pkgInfo
		want string
	}{
		{"up a floor", pkgInfo{Path: "pkg/warmup", Imports: []string{"pkg/analysis"}}, "pkg/warmup (floor 1) imports pkg/analysis (floor 2)"},
		{"along a floor", pkgInfo{Path: "pkg/analysis", Imports: []string{"pkg/capacity"}}, "pkg/analysis (floor 2) imports pkg/capacity (floor 2)"},
		{"not placed", pkgInfo{Path: "pkg/newthing"}, "pkg/newthing is on no floor"},
		{"product imports the lab", pkgInfo{Path: "pkg/capacity", TestImports: []string{"lab/traffic"}}, "pkg/capacity imports lab/traffic"},
		{"lab imports rollouts", pkgInfo{Path: "lab/traffic", Imports: []string{"rollouts"}}, "lab/traffic imports rollouts"},
		{"helper outside tests", pkgInfo{Path: "rollouts", Imports: []string{"internal/testutil"}}, "rollouts imports internal/testutil outside tests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := slices.Clone(clean)
			i := slices.IndexFunc(pkgs, func(p pkgInfo) bool { return p.Path == tc.pkg.Path })
			if i >= 0 {
				pkgs[i] = tc.pkg
			} else {
				pkgs = append(pkgs, tc.pkg)
			}
			v := violations(floors, pkgs)
			if !slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("violations = %q, want one containing %q", v, tc.want)
			}
		})
	}
}

// TestReadFloors pins how the table is read: floor numbers, backticked
// patterns in the second cell, the first table of the section only.
func TestReadFloors(t *testing.T) {
	doc := "# x\n\n## The floors\n\n| floor | packages | what |\n|---:|---|---|\n" +
		"| 0 | `pkg/config` `pkg/latency` | ground, not `pkg/other` |\n| 3 | `test/...` | tests |\n\n" +
		"text\n\n| you are adding | put it in |\n|---|---|\n| 9 | `pkg/nope` |\n"
	got, err := parseFloors(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []floor{{0, []string{"pkg/config", "pkg/latency"}}, {3, []string{"test/..."}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("parseFloors = %v, want %v", got, want)
	}
	if _, err := parseFloors("# no table\n"); err == nil {
		t.Fatal("a page without the table parsed")
	}
}

// violations lists every rule the packages break, one sentence each.
func violations(floors []floor, pkgs []pkgInfo) []string {
	var out []string
	for _, p := range pkgs {
		level, ok := floorOf(floors, p.Path)
		if !ok {
			out = append(out, fmt.Sprintf("%s is on no floor: add it to docs/architecture.md's table, on the lowest floor its imports allow", p.Path))
			continue
		}
		for _, imp := range p.Imports {
			if isTestHelper(imp) && !isTestHelper(p.Path) {
				out = append(out, fmt.Sprintf("%s imports %s outside tests: test helpers are for _test.go files only", p.Path, imp))
				continue
			}
			if inLab(p.Path) && !inLab(imp) && !strings.HasPrefix(imp, "pkg/") {
				out = append(out, fmt.Sprintf("%s imports %s: the lab builds on pkg/ only", p.Path, imp))
				continue
			}
			il, ok := floorOf(floors, imp)
			if !ok {
				continue // reported as unplaced on its own
			}
			if il >= level {
				out = append(out, fmt.Sprintf("%s (floor %d) imports %s (floor %d): a package imports only lower floors (docs/architecture.md)", p.Path, level, imp, il))
			}
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports) {
			if inLab(imp) && !inLab(p.Path) && p.Path != "test/e2e" {
				out = append(out, fmt.Sprintf("%s imports %s: nothing outside lab/ imports the lab (test/e2e aside)", p.Path, imp))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func inLab(path string) bool { return path == "lab" || strings.HasPrefix(path, "lab/") }

func isTestHelper(path string) bool {
	return strings.HasPrefix(path, "internal/") || strings.HasPrefix(path, "test/")
}

// floorOf places a package: an exact pattern wins over a subtree pattern
// ("test/..."), the longest subtree over shorter ones.
func floorOf(floors []floor, path string) (int, bool) {
	best, level := -1, 0
	for _, f := range floors {
		for _, pat := range f.Patterns {
			switch {
			case pat == path:
				return f.Level, true
			case strings.HasSuffix(pat, "/..."):
				prefix := strings.TrimSuffix(pat, "...")
				if (strings.HasPrefix(path, prefix) || path+"/" == prefix) && len(prefix) > best {
					best, level = len(prefix), f.Level
				}
			}
		}
	}
	return level, best >= 0
}

func readFloors(t *testing.T, doc string) []floor {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	floors, err := parseFloors(string(data))
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return floors
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseFloors reads the first table under the "## The floors" heading: its
// rows' first cell is the floor, the backticked words of the second its
// package patterns.
func parseFloors(doc string) ([]floor, error) {
	_, section, ok := strings.Cut(doc, "\n## The floors\n")
	if !ok {
		return nil, fmt.Errorf(`no "## The floors" section`)
	}
	var floors []floor
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			continue
		}
		level, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		if err != nil {
			continue // the header and the rule
		}
		f := floor{Level: level}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			f.Patterns = append(f.Patterns, m[1])
		}
		floors = append(floors, f)
	}
	if len(floors) == 0 {
		return nil, fmt.Errorf(`no floors in the "## The floors" table`)
	}
	return floors, nil
}

// listPackages runs go list over the whole module.
func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, pkgInfo{
			Path:        local(p.ImportPath),
			Imports:     locals(p.Imports),
			TestImports: locals(slices.Concat(p.TestImports, p.XTestImports)),
		})
	}
	return pkgs
}

func local(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// locals keeps the module's own imports, relative to it.
func locals(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == module || strings.HasPrefix(p, module+"/") {
			if l := local(p); !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}
