package wellknown

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// declared is one constant of names.go.
type declared struct{ ident, value, doc string }

// declaredNames parses names.go: every constant, its value and its comment.
func declaredNames(t *testing.T) []declared {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []declared
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			t.Fatalf("names.go: only constants belong here, found %T", d)
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			doc := vs.Doc.Text()
			if len(g.Specs) == 1 && doc == "" {
				doc = g.Doc.Text()
			}
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: want a string literal", n.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				out = append(out, declared{ident: n.Name, value: v, doc: doc})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("names.go declares no names")
	}
	return out
}

// TestNamesAreDocumented: every name has its row in docs/names.md (its
// value and its constant on one line), every danki.dev/* name of that table
// is declared, and each comment says who writes the name and who reads it.
func TestNamesAreDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "names.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // name (first cell) → row
	for line := range strings.SplitSeq(string(raw), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
		}
	}
	seen := map[string]string{}
	for _, d := range declaredNames(t) {
		if prev, dup := seen[d.value]; dup {
			t.Errorf("%s and %s are both %q", prev, d.ident, d.value)
		}
		seen[d.value] = d.ident
		row, ok := rows[d.value]
		switch {
		case !ok:
			t.Errorf("docs/names.md has no row for %s (%s)", d.value, d.ident)
		case !strings.Contains(row, "`"+d.ident+"`"):
			t.Errorf("docs/names.md: the row of %s does not name the constant %s", d.value, d.ident)
		}
		if doc := strings.ToLower(d.doc); !strings.Contains(doc, "written") || !strings.Contains(doc, "read") {
			t.Errorf("%s: its comment must say who writes it and who reads it: %q", d.ident, d.doc)
		}
	}
	for name := range rows {
		if _, ok := seen[name]; !ok {
			t.Errorf("docs/names.md lists %s, which pkg/wellknown does not declare", name)
		}
	}
}

var docLink = regexp.MustCompile(`\]\(([a-z-]+\.md)#([a-z0-9-]+)\)`)

// TestNamesDocLinksResolve: each link of docs/names.md points at a heading
// that exists (GitHub's anchors).
func TestNamesDocLinksResolve(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "names.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := docLink.FindAllStringSubmatch(string(raw), -1)
	if len(links) == 0 {
		t.Fatal("docs/names.md links to no section")
	}
	anchors := map[string]map[string]bool{}
	for _, l := range links {
		file, anchor := l[1], l[2]
		if anchors[file] == nil {
			doc, err := os.ReadFile(filepath.Join("..", "..", "docs", file))
			if err != nil {
				t.Errorf("docs/names.md links to %s: %v", file, err)
				continue
			}
			anchors[file] = headings(string(doc))
		}
		if !anchors[file][anchor] {
			t.Errorf("docs/names.md links to %s#%s: no such heading", file, anchor)
		}
	}
}

// headings returns a Markdown file's heading anchors as GitHub makes them.
func headings(doc string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
