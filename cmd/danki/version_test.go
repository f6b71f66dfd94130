package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("danki version: %v", err)
	}
	if got := out.String(); !strings.HasPrefix(got, "danki "+version+" (go") {
		t.Fatalf("danki version printed %q, want it to start with %q", got, "danki "+version+" (go")
	}
}

func TestUnknownCommandFails(t *testing.T) {
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"no-such-command"})
	if err := root.Execute(); err == nil {
		t.Fatal("danki no-such-command succeeded, want an error")
	}
}
