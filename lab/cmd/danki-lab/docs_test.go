package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// labCommand is a danki-lab command line in Markdown: an inline code span
// (`danki-lab gate-bench --repeat 3`, possibly wrapped over two lines) or a
// code block line, with or without its bin/ directory
// (.cache/lab/bin/danki-lab …) or run from source (go run ./lab/cmd/danki-lab …).
var (
	labSpan = regexp.MustCompile("`(?:[^`\\s]*/)?danki-lab ([^`]+)`")
	labLine = regexp.MustCompile(`^(?:\S*bin/|go run \S*/)?danki-lab (.+)$`)
)

// TestDocsLabCommandLinesParse keeps the docs true to danki-lab: every
// `danki-lab …` command in lab/README.md, lab/RESULTS.md, README.md,
// CONTRIBUTING.md and docs/ names a real subcommand and only flags it has.
func TestDocsLabCommandLinesParse(t *testing.T) {
	files, err := filepath.Glob("../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../RESULTS.md", "../../../README.md", "../../../CONTRIBUTING.md")
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range labCommandLines(string(raw)) {
			if err := checkLabCommandLine(line); err != nil {
				t.Errorf("%s: %q: %v", file, line, err)
			}
			checked++
		}
	}
	if checked < 8 {
		t.Fatalf("checked %d danki-lab command lines: were they not found?", checked)
	}
}

// TestDocsLabCommandCheckCanFail: a made-up subcommand, flag or stray
// argument is caught.
func TestDocsLabCommandCheckCanFail(t *testing.T) {
	for _, line := range []string{"gate-bench --no-such-flag 1", "bench", "gate-bench stray", "results --out", "results --out x"} {
		if err := checkLabCommandLine(line); err == nil {
			t.Errorf("danki-lab %s passed", line)
		}
	}
	if got := labCommandLines("a `danki-lab gate-bench\n--repeat 3` b\n```sh\n.cache/lab/bin/danki-lab results x  # c\ngo run ./lab/cmd/danki-lab aa\n```\n"); strings.Join(got, "|") != "results x|aa|gate-bench --repeat 3" {
		t.Fatalf("labCommandLines = %q", got)
	}
}

// labCommandLines returns the arguments after danki-lab of every command in
// doc: code spans (joined over a line break) and code block lines (a
// trailing "  # comment" cut).
func labCommandLines(doc string) []string {
	var out []string
	inCode := false
	var prose strings.Builder
	for l := range strings.SplitSeq(doc, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			prose.WriteString(l + " ")
			continue
		}
		if i := strings.Index(trimmed, "  #"); i >= 0 {
			trimmed = strings.TrimSpace(trimmed[:i])
		}
		if m := labLine.FindStringSubmatch(trimmed); m != nil {
			out = append(out, m[1])
		}
	}
	for _, m := range labSpan.FindAllStringSubmatch(prose.String(), -1) {
		if !strings.Contains(m[1], "…") {
			out = append(out, strings.TrimSpace(m[1]))
		}
	}
	return out
}

// checkLabCommandLine parses danki-lab's arguments as the command would,
// without running it; a subcommand named alone (`danki-lab results`) only
// has to exist. Quoted words are not split.
func checkLabCommandLine(line string) error {
	args := strings.Fields(line)
	cmd, rest, err := newRootCmd().Find(args)
	if err != nil {
		return err
	}
	if cmd == cmd.Root() {
		return fmt.Errorf("no such danki-lab command: %q", args[0])
	}
	if len(args) == 1 {
		return nil
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}
