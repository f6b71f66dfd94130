package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Config is what a Runner needs.
type Config struct {
	Client  kubernetes.Interface
	Node    string        // the node whose pods this runner runs
	Network Network       // where pod IPs live and processes run
	Images  ImageCommands // image repository → command
	LogDir  string        // one log file per container: <namespace>_<pod>_<container>.log
	HostIP  string        // reported as status.hostIP (the host end of the veth)
	FileSD  string        // if set, a Prometheus file_sd JSON of the pods to scrape
	Logger  *slog.Logger

	// StopGrace is how long a stopped process gets between SIGTERM and
	// SIGKILL (default 10 s).
	StopGrace time.Duration
	// ProbeEvery is how often not-yet-ready containers are probed
	// (default 500 ms); ready ones are probed every periodSeconds.
	ProbeEvery time.Duration
	// Workers is how many pods are synced in parallel (default 4).
	Workers int

	// CgroupParent names the lab's group in each cgroup v1 hierarchy, the
	// lab's "kubepods" (default DefaultCgroupParent, "danki-lab"): each pod
	// with a command runs in a group below it with the CPU shares, CFS quota
	// and memory limit kubelet would give it (see cgroupValuesFor). Without
	// cgroup v1 cpu and memory controllers (or without root) the runner
	// warns once and runs pods without limits.
	CgroupParent string
	// NoCgroups runs pods without CPU and memory limits, as if the machine
	// had no cgroup v1 (tests that are not about resources set it).
	NoCgroups bool

	// Mesh, if set, runs injected pods' istio-proxy containers as Istio
	// sidecars (pilot-agent + Envoy) and serves the injector (mesh.go).
	// nil: an istio-proxy container is faked like any unmapped image.
	Mesh *Mesh

	// WorkDir, if set, gives each pod a working directory of its own,
	// <WorkDir>/<namespace>_<pod>, removed when the pod stops (as a
	// container's writable layer is): a program writing relative paths
	// (the Argo controller's ./plugin-bin) keeps them apart. "": the
	// runner's directory.
	WorkDir string
	// APIServer is the API server's host:port as host-network pods reach
	// it. With WorkDir, a host-network pod that mounts its kube-api-access
	// volume gets its service-account credentials there and the in-cluster
	// environment (serviceaccount.go), as the kubelet gives them.
	APIServer string
}

// Runner runs the pods of one node as local processes. Create it with New.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	ipam  *ipam
	queue workqueue.TypedRateLimitingInterface[string]
	store cache.Store

	mu   sync.Mutex
	pods map[string]*podState // by namespace/name

	sdMu   sync.Mutex
	sdLast []byte // last file_sd content written

	cg *cgroupTree // nil: pods run without resource limits
}

type podState struct {
	uid        types.UID
	ip         netip.Addr
	started    time.Time
	containers []*containerState
	cgroup     *podCgroup // nil without cgroups
	meshed     bool       // its istio-proxy runs as a sidecar: app ports moved (Mesh)
	hostNet    bool       // spec.hostNetwork: on the host's network, ip is HostIP, no address of its own
	dir        string     // its working directory (Config.WorkDir), "" without
}

type containerState struct {
	spec     corev1.Container
	argv     []string // nil: image maps to no command, the container is faked
	tag      string
	badImage error
	sidecar  bool // the istio-proxy container: pilot-agent, prepared by prepareSidecar
	// apiAccess: the container gets the pod's service-account credentials
	// and the in-cluster environment (servesAPIAccess).
	apiAccess bool
	proc      *process
	restarts  int32
	lastExit  time.Time
	ready     bool
	nextProb  time.Time
	oomKills  int64 // the container group's OOM kills when the process started
	// applied is the resources in effect (reported in the container's
	// status): the spec's at start, then each in-place resize's.
	applied corev1.ResourceRequirements
}

// New checks cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("lab runner: Config.Client is nil: pass a Kubernetes clientset for the lab's API server")
	case cfg.Node == "":
		return nil, errors.New("lab runner: Config.Node is empty: name the node whose pods to run (the lab's is danki-lab-node)")
	case cfg.Network == nil:
		return nil, errors.New("lab runner: Config.Network is nil: use Netns{…} (root) or Loopback{}")
	case cfg.LogDir == "":
		return nil, errors.New("lab runner: Config.LogDir is empty: give a directory for the pods' logs")
	}
	if cfg.Images == nil {
		cfg.Images = ImageCommands{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = 500 * time.Millisecond
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	return &Runner{cfg: cfg, log: cfg.Logger.With("node", cfg.Node), pods: map[string]*podState{}}, nil
}

// Run runs pods until ctx ends, then stops every process it started and
// releases their addresses.
func (r *Runner) Run(ctx context.Context) error {
	node, err := r.cfg.Client.CoreV1().Nodes().Get(ctx, r.cfg.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w (create it first; lab/scripts/up.sh does)", r.cfg.Node, err)
	}
	if node.Spec.PodCIDR == "" {
		return fmt.Errorf("node %s has no spec.podCIDR: set it so pods get addresses", r.cfg.Node)
	}
	if r.ipam, err = newIPAM(node.Spec.PodCIDR); err != nil {
		return fmt.Errorf("node %s: %w", r.cfg.Node, err)
	}
	if r.cfg.APIServer != "" && r.cfg.WorkDir != "" {
		if err := ensureServiceAccountMountPoint(); err != nil {
			return err
		}
	}
	if !r.cfg.NoCgroups {
		if r.cg, err = newCgroupTree(r.cfg.CgroupParent); err != nil {
			r.log.Warn("pods run WITHOUT CPU and memory limits: their resources are not applied", "err", err)
		} else {
			r.log.Info("pods' resources applied through cgroup v1 as kubelet would", "groups", r.cg.dirs())
			defer func() {
				// Said either way: lab/scripts/down.sh fails on groups left
				// behind and shows these lines.
				removing := time.Now()
				if err := r.cg.destroy(); err != nil {
					r.log.Warn("remove the lab's cgroups", "err", err, "took", time.Since(removing).Round(time.Millisecond))
					return
				}
				r.log.Info("cgroups removed", "groups", r.cg.dirs(), "took", time.Since(removing).Round(time.Millisecond))
			}()
		}
	}

	r.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	factory := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + r.cfg.Node }))
	inf := factory.Core().V1().Pods().Informer()
	r.store = inf.GetStore()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch pods on node %s: cache did not sync: %w", r.cfg.Node, ctx.Err())
	}
	var injectorStopped <-chan struct{}
	if r.cfg.Mesh != nil && r.cfg.Mesh.InjectAddr != "" {
		if injectorStopped, err = r.runInjector(ctx); err != nil {
			return err
		}
	}
	r.log.Info("lab runner started", "podCIDR", node.Spec.PodCIDR, "images", len(r.cfg.Images), "mesh", r.cfg.Mesh != nil)

	var wg sync.WaitGroup
	for i := 0; i < r.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.next(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.probeLoop(ctx)
	}()

	<-ctx.Done()
	stopping := time.Now()
	r.queue.ShutDownWithDrain()
	wg.Wait()
	factory.Shutdown()
	if injectorStopped != nil {
		<-injectorStopped
	}
	r.stopAll()
	// The lab's teardown waits for this process; say what its stop took.
	r.log.Info("pods stopped", "took", time.Since(stopping).Round(time.Millisecond))
	if err := r.writeFileSD(); err != nil {
		r.log.Warn("Prometheus targets", "err", err)
	}
	return nil
}

func (r *Runner) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if ctx.Err() != nil {
		return true
	}
	if err := r.sync(ctx, key); err != nil {
		r.log.Warn("sync pod", "pod", key, "err", err)
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	if err := r.writeFileSD(); err != nil {
		r.log.Warn("Prometheus targets", "err", err)
	}
	return true
}

// sync makes the local processes and the pod's status match the pod.
func (r *Runner) sync(ctx context.Context, key string) error {
	obj, exists, err := r.store.GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		r.teardown(ctx, key, "")
		return nil
	}
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		r.teardown(ctx, key, pod.UID)
		// No kubelet confirms the deletion: finish it, as kwok does.
		err := r.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("finish deleting pod %s: %w", key, err)
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}

	st, err := r.ensure(ctx, key, pod)
	if err != nil {
		return err
	}
	r.actuateResize(key, pod, st)
	return r.writeStatus(ctx, pod, st)
}

// ensure creates the pod's state (address, processes) or restarts exited
// processes.
func (r *Runner) ensure(ctx context.Context, key string, pod *corev1.Pod) (*podState, error) {
	r.mu.Lock()
	st := r.pods[key]
	r.mu.Unlock()
	if st != nil && st.uid != pod.UID {
		r.teardown(ctx, key, st.uid)
		st = nil
	}
	if st == nil {
		var err error
		if st, err = r.assign(ctx, key, pod); err != nil {
			return nil, err
		}
		for _, c := range pod.Spec.Containers {
			cs := &containerState{spec: c, applied: appliedResources(c), apiAccess: r.servesAPIAccess(pod, c)}
			argv, tag, ok, err := r.cfg.Images.lookup(c.Image)
			switch {
			case st.meshed && c.Name == ProxyContainer:
				cs.argv, cs.tag, cs.sidecar = r.cfg.Mesh.sidecarArgv(pod), tag, true
			case err != nil:
				cs.badImage = err
			case ok:
				cs.argv, cs.tag = append(append([]string{}, argv...), c.Args...), tag
			}
			st.containers = append(st.containers, cs)
		}
		r.mu.Lock()
		r.pods[key] = st
		r.mu.Unlock()
		r.log.Info("pod assigned", "pod", key, "ip", st.ip, "hostNetwork", st.hostNet)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cs := range st.containers {
		if cs.argv == nil || (cs.proc != nil && !cs.proc.exited()) {
			continue
		}
		if cs.proc != nil { // exited: restart (restartPolicy Always) with back-off
			if cs.lastExit.IsZero() {
				cs.lastExit = time.Now()
				cs.restarts++
				cs.ready = false
				oom := st.cgroup != nil && st.cgroup.oomKills(cs.spec.Name) > cs.oomKills
				r.log.Warn("container exited", "pod", key, "container", cs.spec.Name, "err", cs.proc.err,
					"oomKilled", oom, "log", r.logPath(pod, cs.spec.Name))
			}
			backoff := min(time.Duration(cs.restarts)*time.Second, 10*time.Second)
			if wait := time.Until(cs.lastExit.Add(backoff)); wait > 0 {
				r.queue.AddAfter(key, wait)
				continue
			}
		}
		env, dir, argv := r.env(pod, cs, st), st.dir, cs.argv
		if cs.sidecar {
			// A new token and the current root certificate at every start.
			var err error
			if dir, env, err = r.prepareSidecar(ctx, pod, st.ip); err != nil {
				return nil, fmt.Errorf("pod %s: %w", key, err)
			}
		}
		if cs.apiAccess {
			saDir := filepath.Join(st.dir, "serviceaccount")
			if err := r.writeServiceAccount(ctx, pod, saDir); err != nil {
				return nil, fmt.Errorf("pod %s container %s: %w", key, cs.spec.Name, err)
			}
			// HOME too: a client finding the host's ~/.kube/config would
			// use it before the in-cluster config.
			env = append(append(env, r.apiAccessEnv()...), "HOME="+st.dir)
			argv = withServiceAccountMount(saDir, argv)
		}
		if !st.hostNet {
			argv = r.cfg.Network.Command(argv)
		}
		if st.cgroup != nil {
			argv = joinCgroups(st.cgroup.procsFiles(cs.spec.Name), argv)
			cs.oomKills = st.cgroup.oomKills(cs.spec.Name)
		}
		proc, err := startProcess(argv, env, r.logPath(pod, cs.spec.Name), dir)
		if err != nil {
			return nil, fmt.Errorf("pod %s container %s: %w", key, cs.spec.Name, err)
		}
		cs.proc, cs.lastExit, cs.ready, cs.nextProb = proc, time.Time{}, false, time.Time{}
		r.log.Info("container started", "pod", key, "container", cs.spec.Name, "image", cs.spec.Image,
			"pid", proc.cmd.Process.Pid, "ip", st.ip)
		go func() { // notice exits promptly
			<-proc.done
			r.queue.Add(key)
		}()
	}
	return st, nil
}

// assign gives a new pod its address (one of the pod CIDR's on the pod
// network, or the host's for spec.hostNetwork), its cgroups and its working
// directory.
func (r *Runner) assign(ctx context.Context, key string, pod *corev1.Pod) (*podState, error) {
	st := &podState{uid: pod.UID, started: time.Now(), meshed: r.meshed(pod), hostNet: pod.Spec.HostNetwork}
	if st.hostNet {
		var err error
		if st.ip, err = netip.ParseAddr(r.cfg.HostIP); err != nil {
			return nil, fmt.Errorf("pod %s: spec.hostNetwork needs the runner's host IP (--host-ip): %w", key, err)
		}
	} else {
		prefer, _ := netip.ParseAddr(pod.Status.PodIP)
		ip, err := r.ipam.allocate(key, prefer)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", key, err)
		}
		if err := r.cfg.Network.AddAddress(ctx, ip); err != nil {
			r.ipam.release(ip)
			return nil, fmt.Errorf("pod %s: add address %s: %w", key, ip, err)
		}
		st.ip = ip
	}
	undo := func() { r.releaseAddress(ctx, key, st) }
	if r.cfg.WorkDir != "" {
		st.dir = filepath.Join(r.cfg.WorkDir, pod.Namespace+"_"+pod.Name)
		if err := os.MkdirAll(st.dir, 0o755); err != nil {
			undo()
			return nil, fmt.Errorf("pod %s: working dir: %w", key, err)
		}
	}
	if r.cg != nil {
		var err error
		if st.cgroup, err = r.createPodCgroup(key, pod); err != nil {
			undo()
			return nil, err
		}
	}
	return st, nil
}

func (r *Runner) logPath(pod *corev1.Pod, container string) string {
	return filepath.Join(r.cfg.LogDir, pod.Namespace+"_"+pod.Name+"_"+container+".log")
}

// env is the process environment: a few host variables (PATH, HOME, …),
// what the runner knows (VERSION from the image tag, PORT, BIND_ADDRESS,
// POD_*), then the container's own env, which wins. In a meshed pod the
// sidecar owns the declared ports: PORT (and METRICS_PORT, for a port
// named metrics, as the gRPC sample app reads it) are moved by the mesh's
// offset.
func (r *Runner) env(pod *corev1.Pod, cs *containerState, st *podState) []string {
	ip := st.ip
	env := hostEnv()
	env = append(env, "VERSION="+cs.tag, "BIND_ADDRESS="+ip.String(), "POD_IP="+ip.String(),
		"POD_NAME="+pod.Name, "POD_NAMESPACE="+pod.Namespace, "NODE_NAME="+r.cfg.Node)
	if len(cs.spec.Ports) > 0 {
		env = append(env, "PORT="+strconv.Itoa(int(r.appPort(st.meshed, cs.spec.Ports[0].ContainerPort))))
	}
	if st.meshed {
		for _, p := range cs.spec.Ports {
			if p.Name == "metrics" {
				env = append(env, "METRICS_PORT="+strconv.Itoa(int(r.appPort(true, p.ContainerPort))))
			}
		}
	}
	for _, e := range cs.spec.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			if v, ok := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, ip, r.cfg); ok {
				env = append(env, e.Name+"="+v)
				continue
			}
			fallthrough
		default:
			r.log.Warn("env var source not supported by the lab runner; skipped", "pod", pod.Namespace+"/"+pod.Name,
				"container", cs.spec.Name, "env", e.Name)
		}
	}
	return env
}

func fieldValue(pod *corev1.Pod, path string, ip netip.Addr, cfg Config) (string, bool) {
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "spec.nodeName":
		return cfg.Node, true
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, true
	case "status.podIP":
		return ip.String(), true
	case "status.hostIP":
		return cfg.HostIP, true
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		v, found := pod.Labels[strings.TrimSuffix(k, "']")]
		return v, found
	}
	return "", false
}

// teardown stops the pod's processes and releases its address. With uid
// set, only state of that pod incarnation is torn down.
func (r *Runner) teardown(ctx context.Context, key string, uid types.UID) {
	r.mu.Lock()
	st := r.pods[key]
	if st == nil || (uid != "" && st.uid != uid) {
		r.mu.Unlock()
		return
	}
	delete(r.pods, key)
	r.mu.Unlock()
	r.stopPod(ctx, key, st)
}

func (r *Runner) stopPod(ctx context.Context, key string, st *podState) {
	for _, cs := range st.containers {
		if cs.proc != nil {
			cs.proc.stop(r.cfg.StopGrace)
		}
	}
	if st.cgroup != nil {
		r.removePodCgroup(key, st.cgroup)
	}
	if st.meshed {
		ns, name, _ := strings.Cut(key, "/")
		dir := r.cfg.Mesh.agentDir(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		if err := os.RemoveAll(dir); err != nil {
			r.log.Warn("remove sidecar working dir", "pod", key, "err", err)
		}
	}
	if st.dir != "" {
		if err := os.RemoveAll(st.dir); err != nil {
			r.log.Warn("remove pod working dir", "pod", key, "err", err)
		}
	}
	r.releaseAddress(ctx, key, st)
	r.log.Info("pod stopped", "pod", key, "ip", st.ip)
}

// releaseAddress undoes assign's address: the pod network's is removed and
// freed; a host-network pod's is the host's, not the runner's to release.
func (r *Runner) releaseAddress(ctx context.Context, key string, st *podState) {
	if st.hostNet {
		return
	}
	if err := r.cfg.Network.RemoveAddress(ctx, st.ip); err != nil {
		r.log.Warn("remove pod address", "pod", key, "ip", st.ip, "err", err)
	}
	r.ipam.release(st.ip)
}

// actuateResize applies an in-place resize (pods/resize changed the
// containers' resources in the spec) as kubelet does: the pod's and its
// containers' cgroups and the burstable group's summed requests take the
// new values, and the container statuses report them (resources). The
// running processes are not restarted. The lab has
// one node that the scheduler already fits pods onto, so a resize is never
// deferred here.
func (r *Runner) actuateResize(key string, pod *corev1.Pod, st *podState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, c := range pod.Spec.Containers {
		for _, cs := range st.containers {
			if cs.spec.Name == c.Name && !equality.Semantic.DeepEqual(cs.applied, appliedResources(c)) {
				changed = true
			}
		}
	}
	if !changed {
		return
	}
	if st.cgroup != nil {
		v := cgroupValuesFor(pod)
		old := st.cgroup.values.CPURequestMilli
		if err := st.cgroup.resize(v); err != nil {
			r.log.Warn("resize pod", "pod", key, "err", err)
			return
		}
		if v.QoS == corev1.PodQOSBurstable {
			if err := r.cg.setBurstableShares(v.CPURequestMilli - old); err != nil {
				r.log.Warn("burstable QoS group's cpu.shares", "err", err)
			}
		}
		r.log.Info("pod resized", "pod", key, "cpu.shares", v.Pod.Shares, "cpu.cfs_quota_us", v.Pod.QuotaUs,
			"memory.limit_in_bytes", v.Pod.MemoryBytes)
	}
	for _, c := range pod.Spec.Containers {
		for _, cs := range st.containers {
			if cs.spec.Name == c.Name {
				cs.spec.Resources = c.Resources
				cs.applied = appliedResources(c)
			}
		}
	}
}

// appliedResources is what a container runs with: its requests (defaulted
// from limits, as the API server does) and limits.
func appliedResources(c corev1.Container) corev1.ResourceRequirements {
	requests, limits := effectiveResources(c)
	out := corev1.ResourceRequirements{}
	if len(requests) > 0 {
		out.Requests = requests
	}
	if len(limits) > 0 {
		out.Limits = limits.DeepCopy()
	}
	return out
}

// createPodCgroup creates the pod's groups with the values kubelet would
// give it, before any of its processes starts.
func (r *Runner) createPodCgroup(key string, pod *corev1.Pod) (*podCgroup, error) {
	v := cgroupValuesFor(pod)
	pc, err := r.cg.createPod(pod.UID, v)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", key, err)
	}
	if v.QoS == corev1.PodQOSBurstable {
		if err := r.cg.setBurstableShares(v.CPURequestMilli); err != nil {
			r.log.Warn("burstable QoS group's cpu.shares", "err", err)
		}
	}
	r.log.Info("pod cgroup", "pod", key, "qos", v.QoS, "group", pc.rel, "cpu.shares", v.Pod.Shares,
		"cpu.cfs_quota_us", v.Pod.QuotaUs, "memory.limit_in_bytes", v.Pod.MemoryBytes)
	return pc, nil
}

// removePodCgroup removes the pod's groups once its processes stopped.
func (r *Runner) removePodCgroup(key string, pc *podCgroup) {
	if err := pc.remove(); err != nil {
		r.log.Warn("remove pod cgroup", "pod", key, "err", err)
	}
	if pc.values.QoS == corev1.PodQOSBurstable {
		if err := r.cg.setBurstableShares(-pc.values.CPURequestMilli); err != nil {
			r.log.Warn("burstable QoS group's cpu.shares", "err", err)
		}
	}
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	pods := r.pods
	r.pods = map[string]*podState{}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.StopGrace+5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for key, st := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.stopPod(ctx, key, st)
		}()
	}
	wg.Wait()
}

// writeStatus reports the pod's state through the status subresource.
func (r *Runner) writeStatus(ctx context.Context, pod *corev1.Pod, st *podState) error {
	r.mu.Lock()
	want := r.status(pod, st)
	r.mu.Unlock()
	if equality.Semantic.DeepEqual(pod.Status, want) {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := r.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != st.uid {
			return nil // replaced meanwhile; the new one gets its own sync
		}
		r.mu.Lock()
		cur.Status = r.status(cur, st)
		r.mu.Unlock()
		if _, err := r.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	})
}

// status is the pod status a kubelet would report for st. Caller holds r.mu.
func (r *Runner) status(pod *corev1.Pod, st *podState) corev1.PodStatus {
	s := *pod.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.Reason, s.Message = "", ""
	s.PodIP = st.ip.String()
	s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	if r.cfg.HostIP != "" {
		s.HostIP = r.cfg.HostIP
		s.HostIPs = []corev1.HostIP{{IP: r.cfg.HostIP}}
	}
	if s.StartTime == nil {
		t := metav1.NewTime(st.started.Truncate(time.Second))
		s.StartTime = &t
	}
	allReady := true
	statuses := make([]corev1.ContainerStatus, 0, len(st.containers))
	for _, cs := range st.containers {
		cstat := corev1.ContainerStatus{Name: cs.spec.Name, Image: cs.spec.Image, ImageID: "danki-lab://" + cs.spec.Image,
			RestartCount: cs.restarts}
		running := cs.argv == nil && cs.badImage == nil || cs.proc != nil && !cs.proc.exited()
		switch {
		case cs.badImage != nil:
			cstat.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName", Message: cs.badImage.Error()}}
		case !running:
			cstat.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("process exited; see %s", r.logPath(pod, cs.spec.Name))}}
		default:
			started := st.started
			id := "danki-lab://fake"
			if cs.proc != nil {
				started = cs.proc.started
				id = "danki-lab://" + strconv.Itoa(cs.proc.cmd.Process.Pid)
			}
			cstat.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started.Truncate(time.Second))}}
			for _, old := range pod.Status.ContainerStatuses {
				if old.Name == cs.spec.Name && old.ContainerID == id && old.State.Running != nil {
					cstat.State.Running = old.State.Running // keep the reported start time stable
				}
			}
			cstat.ContainerID = id
		}
		if cs.applied.Requests != nil || cs.applied.Limits != nil {
			res := *cs.applied.DeepCopy()
			// As kubelet reports them (allocatedResources is behind an
			// alpha feature gate the API server drops it without).
			cstat.Resources = &res
		}
		ready := running && (cs.argv == nil || cs.ready)
		cstat.Ready = ready
		cstat.Started = &running
		allReady = allReady && ready
		statuses = append(statuses, cstat)
	}
	s.ContainerStatuses = statuses
	setCondition(&s, corev1.PodScheduled, true)
	setCondition(&s, corev1.PodReadyToStartContainers, true)
	setCondition(&s, corev1.PodInitialized, true)
	setCondition(&s, corev1.ContainersReady, allReady)
	// As the kubelet does: a pod with readiness gates is Ready only when
	// its containers are and every gate's condition (set by whoever owns
	// it, e.g. danki's warm gate) is True; until then its Services'
	// EndpointSlices list it as not ready.
	setCondition(&s, corev1.PodReady, allReady && readinessGatesTrue(pod.Spec.ReadinessGates, s.Conditions))
	return s
}

// readinessGatesTrue reports whether every readiness gate's condition is
// True in conds.
func readinessGatesTrue(gates []corev1.PodReadinessGate, conds []corev1.PodCondition) bool {
	for _, g := range gates {
		ok := false
		for _, c := range conds {
			if c.Type == g.ConditionType {
				ok = c.Status == corev1.ConditionTrue
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status = status
				s.Conditions[i].LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status,
		LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))})
}
