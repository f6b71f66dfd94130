package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultCgroupParent is the name of the lab's own group in each cgroup v1
// hierarchy, the lab's "kubepods".
const DefaultCgroupParent = "danki-lab"

// The cgroup v1 controllers the runner uses: cpu (cpu.shares from requests,
// cpu.cfs_quota_us from limits) and memory (memory.limit_in_bytes) are
// required; cpuacct is joined when mounted so each pod's CPU time can be
// read (cpuacct.usage), as on a node. cpuset is left alone: kubelet only
// writes it for the static CPU manager policy, and a new v1 cpuset group
// admits no process until its cpus and mems are copied in.
var (
	requiredControllers = []string{"cpu", "memory"}
	optionalControllers = []string{"cpuacct"}
)

// cgroupTree is the lab's group tree, laid out as kubelet's cgroupfs driver
// lays out kubepods:
//
//	<parent>/                  cpu.shares = node CPUs × 1024
//	<parent>/pod<uid>/<ctr>    Guaranteed pods
//	<parent>/burstable/        cpu.shares = its pods' summed requests
//	<parent>/burstable/pod<uid>/<ctr>
//	<parent>/besteffort/       cpu.shares = 2
//	<parent>/besteffort/pod<uid>/<ctr>
//
// in every hierarchy it uses. The parent is created inside the runner's own
// group of each hierarchy, not at its root: whatever limits the runner was
// started under (a systemd slice, a CI job's memory group) still cover the
// pods, and the lab never moves a process out of its launcher's reach.
type cgroupTree struct {
	// roots: controller → the parent group's directory in the hierarchy
	// that controller is mounted on (cpu and cpuacct may share one).
	roots map[string]string

	mu             sync.Mutex // serialises writes to the QoS groups
	burstableMilli int64
}

// cgroupMount is one cgroup v1 hierarchy from /proc/self/mountinfo.
type cgroupMount struct {
	dir         string   // where it is mounted, e.g. /sys/fs/cgroup/cpu
	root        string   // the hierarchy path mounted there (usually "/")
	controllers []string // e.g. [cpu cpuacct]
}

// parseMountinfo lists the cgroup v1 mounts of a /proc/<pid>/mountinfo
// ("36 25 0:31 / /sys/fs/cgroup/cpu rw,… - cgroup cgroup rw,cpu"). cgroup2
// mounts are skipped: the runner speaks v1 only.
func parseMountinfo(r io.Reader) ([]cgroupMount, error) {
	var mounts []cgroupMount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		m := cgroupMount{dir: unescapeMount(f[4]), root: unescapeMount(f[3])}
		for _, opt := range strings.Split(g[2], ",") {
			if !slices.Contains(mountOptions, opt) && !strings.Contains(opt, "=") {
				m.controllers = append(m.controllers, opt)
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, sc.Err()
}

// mountOptions are the cgroup v1 mount options that are not controllers.
var mountOptions = []string{"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods"}

// unescapeMount undoes mountinfo's octal escapes (\040 is a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseProcCgroup maps each v1 controller to the process's group from a
// /proc/<pid>/cgroup ("4:memory:/process_api/abc", "1:cpu,cpuacct:/").
func parseProcCgroup(r io.Reader) (map[string]string, error) {
	groups := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || f[1] == "" {
			continue // the cgroup2 line ("0::/") names no controllers
		}
		for _, c := range strings.Split(f[1], ",") {
			groups[c] = f[2]
		}
	}
	return groups, sc.Err()
}

// cgroupRoots places the parent group named parent in each hierarchy of the
// controllers the runner uses, below the process's own group there. It
// fails naming what is missing when a required controller has no v1
// hierarchy (a cgroup2-only machine, or a container without cgroupfs).
func cgroupRoots(mounts []cgroupMount, self map[string]string, parent string) (map[string]string, error) {
	roots := map[string]string{}
	var missing []string
	for _, c := range append(slices.Clone(requiredControllers), optionalControllers...) {
		i := slices.IndexFunc(mounts, func(m cgroupMount) bool { return slices.Contains(m.controllers, c) })
		if i < 0 {
			if slices.Contains(requiredControllers, c) {
				missing = append(missing, c)
			}
			continue
		}
		m := mounts[i]
		own := self[c]
		// A group outside the mount's root (seen from a container that has
		// its own cgroup namespace) is not reachable: use the mount's top.
		rel, err := filepath.Rel(m.root, own)
		if own == "" || err != nil || strings.HasPrefix(rel, "..") {
			rel = "."
		}
		roots[c] = filepath.Join(m.dir, rel, parent)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy with the %s controller(s) is mounted (see /proc/self/mountinfo; a cgroup2-only host has none)",
			strings.Join(missing, ", "))
	}
	return roots, nil
}

// newCgroupTree finds where the lab's groups go on this machine, creates the
// parent and its QoS groups, and removes groups a killed runner left behind
// (killing their processes: anything in the lab's groups is a lab pod's).
func newCgroupTree(parent string) (*cgroupTree, error) {
	if parent == "" || strings.ContainsAny(parent, `/\`) || parent == "." || parent == ".." {
		return nil, fmt.Errorf("cgroup parent %q: want a single directory name such as %s", parent, DefaultCgroupParent)
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	mounts, err := parseMountinfo(mi)
	mi.Close()
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	pc, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read own cgroups: %w", err)
	}
	self, err := parseProcCgroup(pc)
	pc.Close()
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	roots, err := cgroupRoots(mounts, self, parent)
	if err != nil {
		return nil, err
	}
	t := &cgroupTree{roots: roots}
	if err := t.setup(); err != nil {
		_ = t.destroy()
		return nil, err
	}
	return t, nil
}

// dirs are the parent's directories, one per hierarchy.
func (t *cgroupTree) dirs() []string {
	var d []string
	for _, root := range t.roots {
		if !slices.Contains(d, root) {
			d = append(d, root)
		}
	}
	slices.Sort(d)
	return d
}

func (t *cgroupTree) setup() error {
	for _, root := range t.dirs() {
		if err := removeGroup(root); err != nil {
			return fmt.Errorf("remove the lab's groups left by an earlier runner: %w", err)
		}
	}
	return t.ensureQoS()
}

// ensureQoS creates the parent and QoS groups where missing and sets their
// shares. Called for every new pod too: like kubelet's QoS manager, the
// runner puts back what someone removed instead of failing every pod.
func (t *cgroupTree) ensureQoS() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, root := range t.dirs() {
		for _, d := range []string{root, filepath.Join(root, "burstable"), filepath.Join(root, "besteffort")} {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("create cgroup %s: %w (cgroup v1 groups need root)", d, err)
			}
		}
	}
	cpu := t.roots["cpu"]
	// As kubelet sizes kubepods from the node's allocatable CPU (no
	// reservations here): the pods together weigh what the node's CPUs do
	// against the host's other processes.
	if err := writeCgroupFile(cpu, "cpu.shares", int64(runtime.NumCPU())*sharesPerCPU); err != nil {
		return err
	}
	if err := writeCgroupFile(filepath.Join(cpu, "besteffort"), "cpu.shares", minShares); err != nil {
		return err
	}
	return writeCgroupFile(filepath.Join(cpu, "burstable"), "cpu.shares", milliCPUToShares(t.burstableMilli))
}

// destroy removes the whole tree (after the runner stopped its pods).
func (t *cgroupTree) destroy() error {
	var errs []error
	for _, root := range t.dirs() {
		if err := removeGroup(root); err != nil {
			errs = append(errs, err)
			continue
		}
		// Checked, not assumed: the teardown's check finds what is left.
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup %s still present after its removal (stat: %v)", root, err))
		}
	}
	return errors.Join(errs...)
}

// setBurstableShares adds delta millicores to the burstable group's
// requests and sets its cpu.shares to their sum (at least 2), as kubelet's
// QoS manager does: burstable pods together weigh what they requested.
func (t *cgroupTree) setBurstableShares(deltaMilli int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.burstableMilli += deltaMilli
	return writeCgroupFile(filepath.Join(t.roots["cpu"], "burstable"), "cpu.shares", milliCPUToShares(t.burstableMilli))
}

// qosDir is a QoS class's group below the parent; Guaranteed pods sit
// directly in the parent, as in kubepods.
func qosDir(qos corev1.PodQOSClass) string {
	switch qos {
	case corev1.PodQOSBurstable:
		return "burstable"
	case corev1.PodQOSBestEffort:
		return "besteffort"
	}
	return ""
}

// podCgroup is one pod's groups: pod<uid> below its QoS group and one
// group per container below that, in every hierarchy.
type podCgroup struct {
	tree   *cgroupTree
	rel    string // e.g. burstable/pod<uid>
	values podCgroupValues
}

// createPod creates the pod's groups with the values kubelet would apply:
// the pod group first (a v1 child's CFS quota may not exceed its parent's),
// then each container's.
func (t *cgroupTree) createPod(uid types.UID, v podCgroupValues) (*podCgroup, error) {
	pc := &podCgroup{tree: t, rel: filepath.Join(qosDir(v.QoS), "pod"+string(uid)), values: v}
	names := slices.Sorted(maps.Keys(v.Containers))
	err := func() error {
		if err := t.ensureQoS(); err != nil {
			return err
		}
		for _, root := range t.dirs() {
			if err := removeGroup(filepath.Join(root, pc.rel)); err != nil { // a stale incarnation
				return err
			}
			if err := os.Mkdir(filepath.Join(root, pc.rel), 0o755); err != nil {
				return fmt.Errorf("create cgroup: %w", err)
			}
		}
		if err := t.apply(pc.rel, v.Pod); err != nil {
			return err
		}
		for _, n := range names {
			for _, root := range t.dirs() {
				if err := os.Mkdir(filepath.Join(root, pc.rel, n), 0o755); err != nil {
					return fmt.Errorf("create cgroup: %w", err)
				}
			}
			if err := t.apply(filepath.Join(pc.rel, n), v.Containers[n]); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		_ = pc.remove()
		return nil, fmt.Errorf("pod cgroup %s: %w", pc.rel, err)
	}
	return pc, nil
}

// apply writes v to the group rel: the period before the quota (the
// kernel checks the pair), the memory limit before any process joins (a
// limit below the group's usage is refused).
func (t *cgroupTree) apply(rel string, v cgroupValues) error {
	cpu, mem := filepath.Join(t.roots["cpu"], rel), filepath.Join(t.roots["memory"], rel)
	if err := writeCgroupFile(cpu, "cpu.shares", v.Shares); err != nil {
		return err
	}
	if err := writeCgroupFile(cpu, "cpu.cfs_period_us", cfsPeriodUs); err != nil {
		return err
	}
	if err := writeCgroupFile(cpu, "cpu.cfs_quota_us", v.QuotaUs); err != nil {
		return err
	}
	return writeCgroupFile(mem, "memory.limit_in_bytes", v.MemoryBytes)
}

// resize applies new values to the pod's groups in place, as kubelet
// actuates an in-place resize (pods/resize): the group that grows first,
// so a child's CFS quota never exceeds its parent's at any moment. The QoS
// class cannot change (the API server refuses such a resize).
func (pc *podCgroup) resize(v podCgroupValues) error {
	if v.QoS != pc.values.QoS {
		return fmt.Errorf("resize pod cgroup %s: QoS class %s → %s cannot change in place", pc.rel, pc.values.QoS, v.QoS)
	}
	names := slices.Sorted(maps.Keys(v.Containers))
	containers := func() error {
		for _, n := range names {
			if err := pc.tree.apply(filepath.Join(pc.rel, n), v.Containers[n]); err != nil {
				return err
			}
		}
		return nil
	}
	pod := func() error { return pc.tree.apply(pc.rel, v.Pod) }
	steps := []func() error{containers, pod}
	if grows(pc.values.Pod.QuotaUs, v.Pod.QuotaUs) || grows(pc.values.Pod.MemoryBytes, v.Pod.MemoryBytes) {
		steps = []func() error{pod, containers}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("resize pod cgroup %s: %w", pc.rel, err)
		}
	}
	pc.values = v
	return nil
}

// grows reports whether a limit (-1: none) is larger in to than in from.
func grows(from, to int64) bool {
	return to != from && (to < 0 || from >= 0 && to > from)
}

// procsFiles are the cgroup.procs files of a container's groups, one per
// hierarchy: writing a PID there moves that process (all its threads).
func (pc *podCgroup) procsFiles(container string) []string {
	var files []string
	for _, root := range pc.tree.dirs() {
		files = append(files, filepath.Join(root, pc.rel, container, "cgroup.procs"))
	}
	return files
}

// dir is the pod's group in the hierarchy of controller.
func (pc *podCgroup) dir(controller string) string {
	return filepath.Join(pc.tree.roots[controller], pc.rel)
}

// remove kills what still runs in the pod's groups (the runner stopped the
// process groups gracefully before; a process that left its process group
// cannot leave its cgroup) and removes them, as kubelet does on pod
// deletion.
func (pc *podCgroup) remove() error {
	var errs []error
	for _, root := range pc.tree.dirs() {
		errs = append(errs, removeGroup(filepath.Join(root, pc.rel)))
	}
	return errors.Join(errs...)
}

// removeGroup removes dir and the groups below it, deepest first, killing
// the processes in each (SIGKILL) and waiting up to 15 s for them to leave:
// a v1 group with members cannot be removed, and a KILLed process held to
// its CPU quota takes a while to exit. A missing dir is not an error.
func removeGroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list cgroup %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeGroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids, err := cgroupProcs(dir)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s (processes %v): %w", dir, pids, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupProcs lists the PIDs in a group's cgroup.procs.
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/cgroup.procs: %w", dir, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func writeCgroupFile(dir, file string, v int64) error {
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(strconv.FormatInt(v, 10)), 0); err != nil {
		return fmt.Errorf("set %s to %d: %w", path, v, err)
	}
	return nil
}

// oomKills is how often the kernel's OOM killer ended a process in the
// container's memory group (memory.oom_control's oom_kill; 0 when the
// kernel does not report it): a container that exited over its limit is
// "OOMKilled", as kubelet reports it.
func (pc *podCgroup) oomKills(container string) int64 {
	b, err := os.ReadFile(filepath.Join(pc.dir("memory"), container, "memory.oom_control"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// joinCgroupsScript moves the shell into each cgroup.procs file given
// before "--", then execs the command after it: the process is in the
// pod's groups before the pod's program runs, so each of its threads and
// children is too (no window in which a JVM's JIT threads run unlimited).
// A group that cannot be joined fails the start (exit 125), with the
// shell's message in the container's log.
const joinCgroupsScript = `while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done; shift; exec "$@"`

// joinCgroups wraps argv to start inside the groups whose cgroup.procs
// files are given. cgroup v1 has no race-free way to spawn a process into a
// group (clone3's CLONE_INTO_CGROUP is v2-only), hence the exec wrapper.
func joinCgroups(procs, argv []string) []string {
	if len(procs) == 0 {
		return argv
	}
	out := append([]string{"/bin/sh", "-c", joinCgroupsScript, "danki-lab-cgroup"}, procs...)
	return append(append(out, "--"), argv...)
}
