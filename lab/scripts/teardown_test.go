// Package lab tests the lab scripts' process handling (lib.sh's start, stop
// and lab_leftovers; down.sh's check) with stand-ins for the lab's processes,
// in a temporary $DANKI_CACHE: no root, no network namespace, no real lab.
package lab

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the stand-ins, chosen by $LAB_FAKE:
//
//	controller: like the Argo Rollouts controller, copies a plugin binary
//	  into ./plugin-bin, starts it (in the controller's session: go-plugin
//	  starts plugins with a plain exec.Cmd), and exits on TERM without
//	  stopping it.
//	plugin: runs until signalled.
func TestMain(m *testing.M) {
	switch os.Getenv("LAB_FAKE") {
	case "controller":
		fakeController()
	case "plugin":
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

func fakeController() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	plugin := filepath.Join(os.Getenv("LAB_PLUGIN_BIN"), "danki", "istio")
	if err := copyFile(self, plugin); err != nil {
		panic(err)
	}
	cmd := exec.Command(plugin)
	cmd.Env = append(os.Environ(), "LAB_FAKE=plugin")
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	if err := os.WriteFile(os.Getenv("LAB_PLUGIN_PIDFILE"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		panic(err)
	}
	<-term
	if os.Getenv("LAB_FAKE_RESPAWN") != "" {
		// Like Argo's controller mid-shutdown: a worker finds its plugin
		// gone and starts it again before the process exits.
		again := exec.Command(plugin)
		again.Env = append(os.Environ(), "LAB_FAKE=plugin")
		if err := again.Start(); err != nil {
			panic(err)
		}
		if err := os.WriteFile(os.Getenv("LAB_PLUGIN_PIDFILE")+".respawned", []byte(strconv.Itoa(again.Process.Pid)), 0o644); err != nil {
			panic(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	os.Exit(0)
}

// labDirs is a lab cache in a temporary directory, with the test binary
// installed in its bin dir as the fake controller.
type labDirs struct {
	cache, bin, run, pluginPIDFile string
}

func newLabDirs(t *testing.T) labDirs {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the lab's process handling reads /proc: Linux only")
	}
	for _, tool := range []string{"bash", "setsid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	cache := t.TempDir()
	d := labDirs{cache: cache, bin: filepath.Join(cache, "lab", "bin"), run: filepath.Join(cache, "lab", "run"),
		pluginPIDFile: filepath.Join(cache, "plugin.pid")}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(self, filepath.Join(d.bin, "fake-controller")); err != nil {
		t.Fatal(err)
	}
	return d
}

// script runs bash code with lib.sh sourced, in the temporary lab, and
// returns its combined output.
func (d labDirs) script(t *testing.T, code string, env ...string) (string, error) {
	t.Helper()
	lib, err := filepath.Abs("lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "set -euo pipefail; source "+strconv.Quote(lib)+"; "+code)
	cmd.Env = append(os.Environ(), append([]string{
		"DANKI_CACHE=" + d.cache,
		"LAB_PLUGIN_BIN=" + filepath.Join(d.run, "argo", "plugin-bin"),
		"LAB_PLUGIN_PIDFILE=" + d.pluginPIDFile,
		// down.sh's network namespace and veth: names no lab uses, so the
		// test never touches a real lab's.
		"NETNS=danki-lab-test-none", "HOST_DEV=danki-lt0-none",
	}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// bash's setsid'd children keep no pipe of ours open (start redirects
	// them), but do not let a mistake hang the test.
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	return out.String(), err
}

// startFakeArgo starts the fake controller with lib.sh's start, as mesh.sh
// starts the real one, and returns its PID and its plugin's.
func (d labDirs) startFakeArgo(t *testing.T, env ...string) (controller, plugin int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(d.run, "argo"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := d.script(t, `cd "$run/argo" && start argo-rollouts "$bin/fake-controller"`, append([]string{"LAB_FAKE=controller"}, env...)...)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	controller = readPID(t, filepath.Join(d.run, "pids", "argo-rollouts.pid"))
	t.Cleanup(func() { _ = syscall.Kill(controller, syscall.SIGKILL) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(d.pluginPIDFile); err == nil && len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake controller (pid %d) started no plugin within 20 s; its log:\n%s", controller, readLog(d, "argo-rollouts"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	plugin = readPID(t, d.pluginPIDFile)
	t.Cleanup(func() { _ = syscall.Kill(plugin, syscall.SIGKILL) })
	if sid := sessionOf(plugin); sid != controller {
		t.Fatalf("plugin %d is in session %d, want the controller's (%d): start no longer runs its process with setsid?", plugin, sid, controller)
	}
	return controller, plugin
}

func TestStopStopsTheControllersPluginsToo(t *testing.T) {
	d := newLabDirs(t)
	controller, plugin := d.startFakeArgo(t)
	// A lab binary someone else runs (test/testenv runs etcd and
	// kube-apiserver from the lab's bin dir) is not the lab's to stop.
	other := exec.Command(filepath.Join(d.bin, "fake-controller"))
	other.Env = []string{"LAB_FAKE=plugin"}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })

	out, err := d.script(t, `lab_leftovers`)
	if err != nil {
		t.Fatalf("lab_leftovers: %v\n%s", err, out)
	}
	for _, pid := range []int{controller, plugin} {
		if !listsPID(out, pid) {
			t.Errorf("lab_leftovers does not list running lab process %d (%s):\n%s", pid, cmdline(pid), out)
		}
	}
	if listsPID(out, other.Process.Pid) {
		t.Errorf("lab_leftovers lists pid %d, a lab binary the lab did not start:\n%s", other.Process.Pid, out)
	}

	if out, err := d.script(t, `stop argo-rollouts`); err != nil {
		t.Fatalf("stop argo-rollouts: %v\n%s", err, out)
	}
	waitGone(t, 15*time.Second, map[int]string{controller: "the controller", plugin: "its plugin (orphaned when the controller exits)"})
	if out, err := d.script(t, `lab_leftovers`); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("lab_leftovers after stop = %q (err %v), want nothing", out, err)
	}
	if !running(other.Process.Pid) {
		t.Errorf("stop argo-rollouts stopped pid %d, which the lab did not start", other.Process.Pid)
	}
	if _, err := os.Stat(filepath.Join(d.run, "pids", "argo-rollouts.pid")); !os.IsNotExist(err) {
		t.Errorf("stop left the pid file: %v", err)
	}
}

// TestStopCatchesPluginsRestartedWhileStopping: a controller that starts a
// plugin again while it shuts down (found in the lab: Argo's workers restart
// a plugin they find dead) leaves nothing behind: stop ends the controller
// first, then whatever is still in its session.
func TestStopCatchesPluginsRestartedWhileStopping(t *testing.T) {
	d := newLabDirs(t)
	controller, plugin := d.startFakeArgo(t, "LAB_FAKE_RESPAWN=1")
	if out, err := d.script(t, `stop argo-rollouts`); err != nil {
		t.Fatalf("stop argo-rollouts: %v\n%s", err, out)
	}
	respawned := readPID(t, d.pluginPIDFile+".respawned")
	t.Cleanup(func() { _ = syscall.Kill(respawned, syscall.SIGKILL) })
	waitGone(t, 15*time.Second, map[int]string{controller: "the controller", plugin: "its first plugin", respawned: "the plugin it started while stopping"})
	if out, err := d.script(t, `lab_leftovers`); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("lab_leftovers after stop = %q (err %v), want nothing", out, err)
	}
}

func TestDownFailsAndCleansUpWhenSomethingIsLeft(t *testing.T) {
	d := newLabDirs(t)
	down, err := filepath.Abs("down.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func() (string, error) {
		t.Helper()
		return d.script(t, strconv.Quote(down))
	}

	// Nothing running: down succeeds and says so.
	if out, err := run(); err != nil || !strings.Contains(out, "nothing left running") {
		t.Fatalf("down.sh with nothing running: err %v, output:\n%s", err, out)
	}

	// A plugin process orphaned by an earlier teardown: in no pid file's
	// session, only its executable (under the run dir) says it is the lab's.
	controller, plugin := d.startFakeArgo(t)
	if err := syscall.Kill(controller, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, 10*time.Second, map[int]string{controller: "the controller"})
	if err := os.Remove(filepath.Join(d.run, "pids", "argo-rollouts.pid")); err != nil {
		t.Fatal(err)
	}
	if !running(plugin) {
		t.Fatalf("plugin %d exited with the controller: the stand-in no longer reproduces the orphan", plugin)
	}

	out, err := run()
	if err == nil {
		t.Errorf("down.sh succeeded with plugin %d still running; output:\n%s", plugin, out)
	}
	if !listsPID(out, plugin) || !strings.Contains(out, "processes behind") {
		t.Errorf("down.sh does not name the leftover plugin %d; output:\n%s", plugin, out)
	}
	waitGone(t, 15*time.Second, map[int]string{plugin: "the leftover plugin (down.sh kills what it finds)"})

	if out, err := run(); err != nil {
		t.Errorf("down.sh after the cleanup: %v\n%s", err, out)
	}
}

// listsPID reports whether one of the "PID COMMAND" lines is pid's.
func listsPID(lines string, pid int) bool {
	for _, line := range strings.Split(lines, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), strconv.Itoa(pid)+" ") {
			return true
		}
	}
	return false
}

// waitGone waits until every process has exited (zombies count as exited:
// the orphans' new parent reaps them in its own time).
func waitGone(t *testing.T, timeout time.Duration, procs map[int]string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pid, what := range procs {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Errorf("%s (pid %d: %s) still running after %v", what, pid, cmdline(pid), timeout)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, pgrp, session, …
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

func running(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

func sessionOf(pid int) int {
	f := procStat(pid)
	if len(f) < 4 {
		return -1
	}
	sid, _ := strconv.Atoi(f[3])
	return sid
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " ")
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

func readLog(d labDirs, name string) string {
	b, _ := os.ReadFile(filepath.Join(d.run, "logs", name+".log"))
	return string(b)
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return dst.Close()
}
