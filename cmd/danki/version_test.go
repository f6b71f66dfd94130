package main

import (
	"bytes"
	"runtime/debug"
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
	info, ok := debug.ReadBuildInfo()
	want := "danki " + buildVersion(info, ok) + " (go"
	if got := out.String(); !strings.HasPrefix(got, want) {
		t.Fatalf("danki version printed %q, want it to start with %q", got, want)
	}
}

func TestBuildVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = ""
	cases := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "dev"},
		{"go install @version", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, true, "v0.3.1"},
		{"vcs revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true, "dev-0123456789ab-dirty"},
		{"nothing recorded", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "dev"},
	}
	for _, c := range cases {
		if got := buildVersion(c.info, c.ok); got != c.want {
			t.Errorf("%s: buildVersion = %q, want %q", c.name, got, c.want)
		}
	}
	version = "v9.9.9"
	if got := buildVersion(&debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, true); got != "v9.9.9" {
		t.Errorf("-ldflags version: buildVersion = %q, want v9.9.9", got)
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
