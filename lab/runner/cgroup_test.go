package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

func TestMilliCPUToSharesAndQuota(t *testing.T) {
	for _, c := range []struct {
		milli, shares, quota int64
	}{
		{0, 2, -1},            // no request: the minimum; no limit: unlimited
		{1, 2, 1000},          // 1m: 1.024 shares → the kernel's minimum 2; 100 µs quota → 1 ms minimum
		{250, 256, 25000},     //
		{1000, 1024, 100000},  // one CPU: a full period
		{1500, 1536, 150000},  // 1.5 CPUs: one and a half periods
		{300000, 262144, 3e7}, // shares capped at the kernel's maximum
		{-5, 2, -1},           // never negative
		{2, 2, 1000},          // 2.048 → 2
		{3, 3, 1000},          // 3.072 → 3: truncated, as kubelet does
		{999, 1022, 99900},    // 1022.976 → 1022
		{100, 102, 10000},     // the lab's former request
		{200, 204, 20000},     //
		{500, 512, 50000},     //
		{2000, 2048, 200000},  //
		{10, 10, 1000},        // 10.24 → 10; 1000 µs
		{11, 11, 1100},        //
	} {
		if got := milliCPUToShares(c.milli); got != c.shares {
			t.Errorf("shares(%dm) = %d, want %d", c.milli, got, c.shares)
		}
		if got := milliCPUToQuota(c.milli); got != c.quota {
			t.Errorf("quota(%dm) = %d, want %d", c.milli, got, c.quota)
		}
	}
}

// res builds a ResourceList from "cpu=250m,memory=1Gi".
func res(t *testing.T, s string) corev1.ResourceList {
	t.Helper()
	if s == "" {
		return nil
	}
	l := corev1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		q, err := resource.ParseQuantity(v)
		if err != nil {
			t.Fatalf("quantity %q: %v", v, err)
		}
		l[corev1.ResourceName(k)] = q
	}
	return l
}

func ctr(t *testing.T, name, requests, limits string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: res(t, requests), Limits: res(t, limits)}}
}

func TestCgroupValuesFor(t *testing.T) {
	const gi = 1 << 30
	unlimited := cgroupValues{Shares: 2, QuotaUs: -1, MemoryBytes: -1}
	for _, c := range []struct {
		name       string
		init       []corev1.Container
		containers []corev1.Container
		want       podCgroupValues
	}{{
		name:       "no resources: BestEffort, minimum shares, no limits",
		containers: []corev1.Container{ctr(t, "app", "", "")},
		want:       podCgroupValues{QoS: corev1.PodQOSBestEffort, Pod: unlimited, Containers: map[string]cgroupValues{"app": unlimited}},
	}, {
		name:       "the lab's app: requests below limits is Burstable",
		containers: []corev1.Container{ctr(t, "app", "cpu=250m,memory=384Mi", "cpu=1,memory=512Mi")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 250,
			Pod:        cgroupValues{Shares: 256, QuotaUs: 100000, MemoryBytes: 512 << 20},
			Containers: map[string]cgroupValues{"app": {Shares: 256, QuotaUs: 100000, MemoryBytes: 512 << 20}}},
	}, {
		name:       `limits only ("1.5" CPUs, 1Gi): requests default to them, Guaranteed`,
		containers: []corev1.Container{ctr(t, "app", "", "cpu=1.5,memory=1Gi")},
		want: podCgroupValues{QoS: corev1.PodQOSGuaranteed, CPURequestMilli: 1500,
			Pod:        cgroupValues{Shares: 1536, QuotaUs: 150000, MemoryBytes: gi},
			Containers: map[string]cgroupValues{"app": {Shares: 1536, QuotaUs: 150000, MemoryBytes: gi}}},
	}, {
		name:       "requests equal to limits, written differently (0.5 = 500m, 1Gi = 1024Mi): Guaranteed",
		containers: []corev1.Container{ctr(t, "app", "cpu=0.5,memory=1024Mi", "cpu=500m,memory=1Gi")},
		want: podCgroupValues{QoS: corev1.PodQOSGuaranteed, CPURequestMilli: 500,
			Pod:        cgroupValues{Shares: 512, QuotaUs: 50000, MemoryBytes: gi},
			Containers: map[string]cgroupValues{"app": {Shares: 512, QuotaUs: 50000, MemoryBytes: gi}}},
	}, {
		name:       "requests only: Burstable, shares but no limits",
		containers: []corev1.Container{ctr(t, "app", "cpu=100m,memory=320Mi", "")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 100,
			Pod:        cgroupValues{Shares: 102, QuotaUs: -1, MemoryBytes: -1},
			Containers: map[string]cgroupValues{"app": {Shares: 102, QuotaUs: -1, MemoryBytes: -1}}},
	}, {
		name:       "CPU limit only: its request defaults to it, memory unlimited, Burstable",
		containers: []corev1.Container{ctr(t, "app", "", "cpu=200m")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 200,
			Pod:        cgroupValues{Shares: 204, QuotaUs: 20000, MemoryBytes: -1},
			Containers: map[string]cgroupValues{"app": {Shares: 204, QuotaUs: 20000, MemoryBytes: -1}}},
	}, {
		name:       "decimal and tiny quantities round up: 1G, 0.0001 CPU = 1m, 100m bytes = 1 byte",
		containers: []corev1.Container{ctr(t, "app", "cpu=0.0001", "cpu=0.0001,memory=1G"), ctr(t, "side", "", "cpu=1m,memory=100m")},
		want: podCgroupValues{QoS: corev1.PodQOSGuaranteed, CPURequestMilli: 2,
			Pod: cgroupValues{Shares: 2, QuotaUs: 1000, MemoryBytes: 1e9 + 1},
			Containers: map[string]cgroupValues{"app": {Shares: 2, QuotaUs: 1000, MemoryBytes: 1e9},
				"side": {Shares: 2, QuotaUs: 1000, MemoryBytes: 1}}},
	}, {
		name: "two containers with limits: the pod's are their sums",
		containers: []corev1.Container{ctr(t, "app", "cpu=500m,memory=256Mi", "cpu=1,memory=512Mi"),
			ctr(t, "proxy", "cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 600,
			Pod: cgroupValues{Shares: 614, QuotaUs: 120000, MemoryBytes: 640 << 20},
			Containers: map[string]cgroupValues{"app": {Shares: 512, QuotaUs: 100000, MemoryBytes: 512 << 20},
				"proxy": {Shares: 102, QuotaUs: 20000, MemoryBytes: 128 << 20}}},
	}, {
		name: "one container without limits leaves the pod unlimited in them",
		containers: []corev1.Container{ctr(t, "app", "cpu=500m,memory=256Mi", "cpu=1,memory=512Mi"),
			ctr(t, "logs", "cpu=50m", "")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 550,
			Pod: cgroupValues{Shares: 563, QuotaUs: -1, MemoryBytes: -1},
			Containers: map[string]cgroupValues{"app": {Shares: 512, QuotaUs: 100000, MemoryBytes: 512 << 20},
				"logs": {Shares: 51, QuotaUs: -1, MemoryBytes: -1}}},
	}, {
		name:       "an init container without limits makes a Guaranteed-looking pod Burstable (as GetPodQOS)",
		init:       []corev1.Container{ctr(t, "init", "", "")},
		containers: []corev1.Container{ctr(t, "app", "", "cpu=1,memory=1Gi")},
		want: podCgroupValues{QoS: corev1.PodQOSBurstable, CPURequestMilli: 1000,
			Pod:        cgroupValues{Shares: 1024, QuotaUs: 100000, MemoryBytes: gi},
			Containers: map[string]cgroupValues{"app": {Shares: 1024, QuotaUs: 100000, MemoryBytes: gi}}},
	}, {
		name:       "zero quantities count as absent",
		containers: []corev1.Container{ctr(t, "app", "cpu=0,memory=0", "cpu=0")},
		want:       podCgroupValues{QoS: corev1.PodQOSBestEffort, Pod: unlimited, Containers: map[string]cgroupValues{"app": unlimited}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: c.init, Containers: c.containers}}
			got := cgroupValuesFor(pod)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if q := podQOS(pod); q != c.want.QoS {
				t.Errorf("podQOS = %s, want %s", q, c.want.QoS)
			}
		})
	}
}

func TestCgroupRoots(t *testing.T) {
	const mountinfo = `23 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 /kube /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 23 0:39 / /mnt/with\040space rw - cgroup cgroup rw,pids
`
	mounts, err := parseMountinfo(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []cgroupMount{
		{dir: "/sys/fs/cgroup/cpu,cpuacct", root: "/", controllers: []string{"cpu", "cpuacct"}},
		{dir: "/sys/fs/cgroup/cpuset", root: "/", controllers: []string{"cpuset"}},
		{dir: "/sys/fs/cgroup/memory", root: "/kube", controllers: []string{"memory"}},
		{dir: "/sys/fs/cgroup/systemd", root: "/"},
		{dir: "/mnt/with space", root: "/", controllers: []string{"pids"}},
	}
	if !reflect.DeepEqual(mounts, wantMounts) {
		t.Errorf("mounts:\n got %+v\nwant %+v", mounts, wantMounts)
	}
	self, err := parseProcCgroup(strings.NewReader("9:name=systemd:/\n4:memory:/kube/job7\n2:cpu,cpuacct:/\n0::/\n"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cgroupRoots(mounts, self, "lab")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cpu":     "/sys/fs/cgroup/cpu,cpuacct/lab",
		"cpuacct": "/sys/fs/cgroup/cpu,cpuacct/lab",
		"memory":  "/sys/fs/cgroup/memory/job7/lab", // below our own group, relative to the mount's root
	}
	if !reflect.DeepEqual(roots, want) {
		t.Errorf("roots = %v, want %v", roots, want)
	}
	if d := (&cgroupTree{roots: roots}).dirs(); !slices.Equal(d, []string{"/sys/fs/cgroup/cpu,cpuacct/lab", "/sys/fs/cgroup/memory/job7/lab"}) {
		t.Errorf("dirs = %v: cpu and cpuacct share one hierarchy, one dir", d)
	}

	// Our group outside the mount's root (another cgroup namespace): the mount's top.
	self["memory"] = "/elsewhere"
	if roots, err := cgroupRoots(mounts, self, "lab"); err != nil || roots["memory"] != "/sys/fs/cgroup/memory/lab" {
		t.Errorf("group outside the mount: memory root %q (%v), want the mount's top", roots["memory"], err)
	}

	// cgroup2 only: no v1 hierarchy has cpu or memory.
	v2, _ := parseMountinfo(strings.NewReader("41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"))
	if _, err := cgroupRoots(v2, map[string]string{}, "lab"); err == nil || !strings.Contains(err.Error(), "cpu, memory") {
		t.Errorf("cgroup2-only host: err = %v, want one naming cpu and memory", err)
	}
	if _, err := newCgroupTree("a/b"); err == nil {
		t.Error("a parent with a slash was accepted")
	}
}

// The wrapper writes its PID to every file before "--" and then becomes the
// command (same PID), which is what puts a pod's process in its groups
// before it runs.
func TestJoinCgroupsWrapper(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	argv := joinCgroups([]string{a, b}, []string{"sh", "-c", `echo "$$ $1"`, "sh", "-- arg"})
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	pid, arg, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if arg != "-- arg" {
		t.Errorf("the command got %q as its argument, want %q", arg, "-- arg")
	}
	for _, f := range []string{a, b} {
		if got, _ := os.ReadFile(f); strings.TrimSpace(string(got)) != pid {
			t.Errorf("%s holds %q, want the command's PID %s", f, got, pid)
		}
	}
	argv = joinCgroups([]string{filepath.Join(dir, "missing", "cgroup.procs")}, []string{"true"})
	err = exec.Command(argv[0], argv[1:]...).Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 {
		t.Errorf("a group that cannot be joined: %v, want exit 125 before the command runs", err)
	}
	if got := joinCgroups(nil, []string{"java"}); !slices.Equal(got, []string{"java"}) {
		t.Errorf("no groups: %v, want the command unchanged", got)
	}
}

// burnCPUForTest makes the test binary, run as a pod's process, burn CPU in
// two threads and in a child process: unlimited they would take both of
// the machine's cores (or more), so the pod's CPU limit is what bounds them.
func burnCPUForTest() {
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for range 2 {
		go func() {
			for n := 0; ; n++ {
				_ = n * n
			}
		}()
	}
}

// On the real cgroup filesystem (root, cgroup v1): a pod started by the
// runner lands with its child in its container group, gets the values
// kubelet would set, is held to its CPU limit, and its groups go with it.
func TestRunnerAppliesResourcesThroughCgroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes (skipped with -short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("creating cgroup v1 groups needs root")
	}
	parent := "danki-lab-test-" + strconv.Itoa(os.Getpid()) // not the lab's own group: a lab may be up
	probe, err := newCgroupTree(parent)
	if err != nil {
		t.Skipf("no usable cgroup v1 cpu and memory controllers here: %v", err)
	}
	if _, ok := probe.roots["cpuacct"]; !ok {
		_ = probe.destroy()
		t.Skip("no cgroup v1 cpuacct controller to measure the pod's CPU time with")
	}
	roots := probe.roots
	if err := probe.destroy(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = (&cgroupTree{roots: roots}).destroy() })

	const node = "lab-node"
	client := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       corev1.NodeSpec{PodCIDR: "127.78.0.0/24"},
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{
		Client: client, Node: node, Network: Loopback{}, LogDir: t.TempDir(), CgroupParent: parent,
		Images: ImageCommands{"test.local/app": {self}}, StopGrace: 2 * time.Second, ProbeEvery: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stopRunner := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stopRunner()

	// Someone removes a QoS group under the running runner (a teardown
	// script run by mistake): the next pod puts it back instead of failing.
	cpu, mem, acct := roots["cpu"], roots["memory"], roots["cpuacct"]
	waitUntil(t, 10*time.Second, "the runner created its groups", func() bool {
		_, err := os.Stat(filepath.Join(cpu, "burstable"))
		return err == nil
	})
	for _, dir := range []string{cpu, mem, acct} {
		if err := os.Remove(filepath.Join(dir, "burstable")); err != nil {
			t.Fatal(err)
		}
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: "default", UID: types.UID("uid-burn")},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: "test.local/app:v1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 18088}},
			Env:   []corev1.EnvVar{{Name: "LABRUNNER_TEST_SERVE", Value: "1"}, {Name: "LABRUNNER_TEST_BURN", Value: "1"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromString("http")}}},
			Resources: corev1.ResourceRequirements{Requests: res(t, "cpu=100m,memory=64Mi"), Limits: res(t, "cpu=200m,memory=128Mi")},
		}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := waitReady(t, ctx, client, "burn")
	pid, err := strconv.Atoi(strings.TrimPrefix(ready.Status.ContainerStatuses[0].ContainerID, "danki-lab://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", ready.Status.ContainerStatuses[0].ContainerID, err)
	}

	podRel := filepath.Join("burstable", "poduid-burn")
	for _, f := range []struct {
		dir, file string
		want      int64
	}{
		{filepath.Join(cpu, "burstable"), "cpu.shares", 102}, // the burstable pods' summed requests
		{filepath.Join(cpu, podRel), "cpu.shares", 102},
		{filepath.Join(cpu, podRel), "cpu.cfs_quota_us", 20000},
		{filepath.Join(cpu, podRel), "cpu.cfs_period_us", 100000},
		{filepath.Join(cpu, podRel, "app"), "cpu.shares", 102},
		{filepath.Join(cpu, podRel, "app"), "cpu.cfs_quota_us", 20000},
		{filepath.Join(mem, podRel), "memory.limit_in_bytes", 128 << 20},
		{filepath.Join(mem, podRel, "app"), "memory.limit_in_bytes", 128 << 20},
		{filepath.Join(cpu, "besteffort"), "cpu.shares", 2},
	} {
		if got, err := readCgroupInt(f.dir, f.file); err != nil || got != f.want {
			t.Errorf("%s/%s = %d (%v), want %d", f.dir, f.file, got, err, f.want)
		}
	}
	// The process and the child it started are in the container's group of
	// every hierarchy.
	for _, dir := range []string{cpu, mem, acct} {
		procs := waitChild(t, filepath.Join(dir, podRel, "app"), pid)
		t.Logf("%s/%s/app/cgroup.procs: %v (container process %d)", dir, podRel, procs, pid)
	}

	// Three busy threads on two cores would take ~2 CPUs unlimited; the
	// 200m limit holds the pod to ~0.2. Generous bounds: the machine is
	// shared (less is possible), but not 1.5× the limit.
	usage := func() (int64, time.Time) {
		u, err := readCgroupInt(filepath.Join(acct, podRel), "cpuacct.usage")
		if err != nil {
			t.Fatal(err)
		}
		return u, time.Now()
	}
	u0, t0 := usage()
	time.Sleep(2 * time.Second)
	u1, t1 := usage()
	cpus := float64(u1-u0) / float64(t1.Sub(t0).Nanoseconds())
	t.Logf("pod with limits.cpu 200m used %.3f CPUs over %v (cpuacct.usage)", cpus, t1.Sub(t0).Round(time.Millisecond))
	if cpus > 0.3 || cpus < 0.05 {
		t.Errorf("pod used %.3f CPUs with limits.cpu 200m, want 0.05–0.3", cpus)
	}

	// An in-place resize (pods/resize on a real API server; an update of
	// the spec here): the groups take the new values while the process
	// runs on, and the status reports them.
	cur, err := client.CoreV1().Pods("default").Get(ctx, "burn", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: res(t, "cpu=1m,memory=64Mi"), Limits: res(t, "cpu=400m,memory=128Mi")}
	if _, err := client.CoreV1().Pods("default").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the resize applied to the pod's groups", func() bool {
		for _, f := range []struct {
			dir, file string
			want      int64
		}{
			{filepath.Join(cpu, "burstable"), "cpu.shares", 2},
			{filepath.Join(cpu, podRel), "cpu.shares", 2},
			{filepath.Join(cpu, podRel), "cpu.cfs_quota_us", 40000},
			{filepath.Join(cpu, podRel, "app"), "cpu.shares", 2},
			{filepath.Join(cpu, podRel, "app"), "cpu.cfs_quota_us", 40000},
		} {
			if got, err := readCgroupInt(f.dir, f.file); err != nil || got != f.want {
				return false
			}
		}
		return true
	})
	waitUntil(t, 10*time.Second, "the status reports the resized resources", func() bool {
		p, err := client.CoreV1().Pods("default").Get(ctx, "burn", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].Resources == nil {
			return false
		}
		s := p.Status.ContainerStatuses[0]
		return s.Resources.Requests.Cpu().String() == "1m" && s.Resources.Limits.Cpu().String() == "400m" &&
			s.ContainerID == ready.Status.ContainerStatuses[0].ContainerID // not restarted
	})

	if err := client.CoreV1().Pods("default").Delete(ctx, "burn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 15*time.Second, "the deleted pod's groups are removed", func() bool {
		for _, dir := range []string{cpu, mem, acct} {
			if _, err := os.Stat(filepath.Join(dir, podRel)); err == nil {
				return false
			}
		}
		return true
	})
	if got, _ := readCgroupInt(filepath.Join(cpu, "burstable"), "cpu.shares"); got != 2 {
		t.Errorf("burstable cpu.shares = %d with no burstable pod left, want 2", got)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z") {
			t.Errorf("the deleted pod's process %d still runs", pid)
		}
	}
	stopRunner()
	for _, dir := range []string{cpu, mem, acct} {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s still exists after the runner stopped", dir)
		}
	}
}

// waitChild waits until the group's cgroup.procs lists pid and a child of
// pid, and returns the list.
func waitChild(t *testing.T, dir string, pid int) []int {
	t.Helper()
	var procs []int
	waitUntil(t, 5*time.Second, fmt.Sprintf("%s/cgroup.procs lists process %d and its child", dir, pid), func() bool {
		var err error
		if procs, err = cgroupProcs(dir); err != nil || !slices.Contains(procs, pid) {
			return false
		}
		return slices.ContainsFunc(procs, func(p int) bool { return parentPID(p) == pid })
	})
	return procs
}

func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func readCgroupInt(dir, file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
