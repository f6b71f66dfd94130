package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The danki binary is what Argo Rollouts downloads and checks by sha256: the
// lab's runner, the demo and the plotting library (with its fonts) belong in
// the danki-lab binary only; everything under lab/ is the lab wing. A new import in cmd/danki, rollouts/ or pkg/ that pulls
// one of them back fails here.
func TestPluginBinaryLinksNoLabPackages(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list cmd/danki's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/danki-dev/danki/cmd/danki").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/danki: %v\n%s", err, out)
	}
	labOnly := regexp.MustCompile(`gonum\.org/|go-fonts|go-latex|go-pdf|github\.com/danki-dev/danki/lab(/|$)`)
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		if labOnly.MatchString(pkg) {
			found = append(found, pkg)
		}
	}
	if len(found) > 0 {
		t.Errorf("cmd/danki links lab-only packages (keep them in lab/cmd/danki-lab): %s", strings.Join(found, ", "))
	}
	if !strings.Contains(string(out), "github.com/danki-dev/danki/rollouts\n") {
		t.Errorf("go list -deps ./cmd/danki lacks danki's rollouts package: is this the right module?\n%s", out)
	}
}

func TestLabCommands(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"runner", "demo"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Errorf("danki-lab %s: not a command (%v)", name, err)
		}
	}
	root.SetArgs([]string{"runner", "--node", "n"})
	root.SetOut(new(strings.Builder))
	root.SetErr(new(strings.Builder))
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "log-dir") {
		t.Errorf("danki-lab runner without --log-dir: err = %v, want the required flag named", err)
	}
}

// gate-bench refuses an unknown way or event by its flag, before it looks
// for a lab (the --root given here does not exist: that error would come
// later).
func TestGateBenchSelection(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ways", "app-gated,app-nope"}, `--ways: unknown way "app-nope"`},
		{[]string{"--events", "scale-up,explode"}, `--events: unknown event "explode"`},
		{[]string{"--repeat", "0"}, `--repeat 0: want 1 or more`},
	} {
		root := newRootCmd()
		root.SetArgs(append([]string{"gate-bench", "--root", "/nonexistent"}, c.args...))
		root.SetOut(new(strings.Builder))
		root.SetErr(new(strings.Builder))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
	ways, events, err := parseGateBenchSelection([]string{"app-gated", "app-startonly"}, []string{"none"})
	if err != nil || len(ways) != 2 || ways[1].Deployment != "app-startonly" || events == nil || len(events) != 0 {
		t.Errorf("ways %v, events %v, err %v; want the gate and the control, no events (not the default)", ways, events, err)
	}
	ways, events, err = parseGateBenchSelection(nil, []string{"quiet", "scale-up", "pod-kill"})
	if err != nil || ways != nil || len(events) != 3 {
		t.Errorf("defaults: ways %v, events %v, err %v", ways, events, err)
	}
}
