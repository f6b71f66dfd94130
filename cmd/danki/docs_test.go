package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsCommandLinesParse keeps README.md, docs/ and lab/README.md true to
// the CLI: every `danki …` command line in their code blocks must name a real
// command and only flags it has, with values its flags accept.
func TestDocsCommandLinesParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../lab/README.md")
	checked := 0
	for _, file := range files {
		for _, line := range docCommandLines(t, file) {
			if err := checkCommandLine(line); err != nil {
				t.Errorf("%s: %q: %v", file, line, err)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d command lines: the docs' examples were not found", checked)
	}
}

// TestDocsCommandLinesCheckCanFail: a made-up flag, a bad flag value, a
// made-up subcommand and a stray argument are caught.
func TestDocsCommandLinesCheckCanFail(t *testing.T) {
	for _, line := range []string{
		"danki warmup --no-such-flag 1",
		"danki warmup --qps fast",
		"danki shift turn --virtual-service x",
		"danki warmup mirror stray",
	} {
		if err := checkCommandLine(line); err == nil {
			t.Errorf("%q passed", line)
		}
	}
}

// checkCommandLine parses line as the CLI would, without running it.
func checkCommandLine(line string) error {
	args, err := shellWords(line)
	if err != nil {
		return err
	}
	cmd, rest, err := newRootCmd().Find(args[1:])
	if err != nil {
		return err
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%s has subcommands only", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}

// docCommandLines returns the `danki …` lines of file's fenced code blocks,
// continuation lines joined, comments and synopses ("[flags]") left out.
func docCommandLines(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode, cur := false, ""
	for _, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			inCode, cur = !inCode, ""
			continue
		}
		if !inCode {
			continue
		}
		if cur == "" {
			trimmed = strings.TrimPrefix(trimmed, "$ ")
			// Output lines ("danki analyze: source …") are no commands.
			if f := strings.Fields(trimmed); len(f) < 2 || f[0] != "danki" || strings.HasSuffix(f[1], ":") || strings.Contains(trimmed, "[flags]") {
				continue
			}
		}
		if i := strings.Index(trimmed, "  #"); i >= 0 {
			trimmed = strings.TrimSpace(trimmed[:i])
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur += strings.TrimSuffix(trimmed, `\`) + " "
			continue
		}
		out = append(out, cur+trimmed)
		cur = ""
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the docs'
// needs: blanks separate words; single and double quotes group.
func shellWords(s string) ([]string, error) {
	var (
		words []string
		word  strings.Builder
		in    bool // inside a word
		quote rune
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, word.String())
				word.Reset()
				in = false
			}
		default:
			word.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		words = append(words, word.String())
	}
	return words, nil
}
