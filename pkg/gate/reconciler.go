package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// DefaultMaxConcurrent caps the warm-ups running at once: each sends load
// from this process, and a scale-up of many pods should not all land at
// once on the nodes the users' pods share.
const DefaultMaxConcurrent = 10

// DefaultMaxPerNode caps the warm-ups running at once on one node: a cold
// JVM's JIT compiles on the node's cores as it is warmed, and two at once
// take them from the pods serving users there. Measured in the lab (one
// 2-core node, scale 2 → 4): users' p99 in the minute after 5.89× steady
// with both new pods warmed at once, 1.67× one at a time — and the first
// new pod was Ready sooner (38 s instead of 66 s).
const DefaultMaxPerNode = 1

// progressEvery throttles the condition updates that show a warm-up's
// progress: each is a write to the API server.
const progressEvery = 5 * time.Second

// eventRecorder is what the Reconciler needs of client-go's EventRecorder.
type eventRecorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// eventAction is the Events' action: what the gate was doing.
const eventAction = "WarmUp"

// Reconciler warms pods that carry the readiness gate wellknown.WarmCondition and
// sets the condition (see the package documentation).
type Reconciler struct {
	Client client.Client
	Events eventRecorder
	Log    *slog.Logger
	// MaxConcurrent caps warm-ups running at once (DefaultMaxConcurrent).
	MaxConcurrent int
	// MaxPerNode caps warm-ups running at once on one node
	// (DefaultMaxPerNode; negative: no cap). Pods with no node name are
	// not capped per node.
	MaxPerNode int
	// MaxTotalQPS is the load budget of all warm-ups together
	// (DefaultMaxTotalQPS; negative: none): each gets an equal share.
	MaxTotalQPS float64
	// MaxPerNamespace caps the warm-ups of one namespace running at once
	// (0: none beyond the fair share of the MaxConcurrent slots; see
	// slots).
	MaxPerNamespace int
	// MaxHealthWait bounds a warm-up's wait for its pod's health check
	// while it holds a slot (DefaultMaxHealthWait; negative: only the
	// pod's own healthTimeout): a pod that never answers gives its slot
	// back after it, its attempt failed.
	MaxHealthWait time.Duration
	// RecordKey signs and verifies the records of CPU requests.
	RecordKey RecordKey
	// Policy is the operator's: pods' annotations are parsed under it
	// (caps, files, addresses dialled). The zero Policy is the strictest.
	Policy policy.Policy
	// Metrics records the gate's metrics (nil: none; Run registers them
	// on controller-runtime's registry).
	Metrics *metrics.Gate

	// testParseTimeout replaces ParseTimeout in tests (0: ParseTimeout);
	// testParse, if set, replaces ParseConfig (a parse that never ends,
	// whatever the template engine bounds).
	testParseTimeout time.Duration
	testParse        func(annotation string) (Config, error)

	once      sync.Once
	slots     *slots
	parseMu   sync.Mutex
	parses    map[[32]byte]*parsing    // guarded by parseMu; bounds.go
	nodeSlots map[string]chan struct{} // guarded by mu
	// requeue asks for a pod's reconcile when its warm-up ended: the
	// outcome may call for a retry after a back-off.
	requeue chan event.GenericEvent
	mu      sync.Mutex
	jobs    map[types.UID]*job
	tries   map[types.UID]*attempts
	// warmed remembers the pods this process has set warm (or seen warm):
	// the informer cache can lag behind our own status patch, and a pod
	// that looks not-yet-warm there must not be warmed again — a second
	// warm-up's progress would set the condition False and take a serving
	// pod out of load balancing.
	warmed map[types.UID]bool
}

// nodeSlot is the per-node cap's semaphore for node, nil when there is no
// cap or no node.
func (r *Reconciler) nodeSlot(node string) chan struct{} {
	n := r.MaxPerNode
	if n == 0 {
		n = DefaultMaxPerNode
	}
	if node == "" || n < 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodeSlots[node] == nil {
		r.nodeSlots[node] = make(chan struct{}, n)
	}
	return r.nodeSlots[node]
}

// job is one pod's warm-up in progress.
type job struct {
	pod    types.NamespacedName
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Why a warm-up is stopped (its context's cause): the outcome it is
// counted under.
var (
	errPodDeleted         = errors.New("pod deleted")
	errContainersNotReady = errors.New("containers not ready")
)

// attempts remembers a pod's failed warm-ups, for retries and back-off.
type attempts struct {
	failed int
	next   time.Time
	gaveUp bool
}

func (r *Reconciler) init() {
	r.once.Do(func() {
		n := r.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		r.slots = newSlots(n, r.MaxPerNamespace)
		r.Metrics.Slots(n)
		r.nodeSlots = map[string]chan struct{}{}
		r.requeue = make(chan event.GenericEvent, 1024)
		r.jobs = map[types.UID]*job{}
		r.tries = map[types.UID]*attempts{}
		r.warmed = map[types.UID]bool{}
		r.parses = map[[32]byte]*parsing{}
		if r.Log == nil {
			r.Log = slog.Default()
		}
	})
}

// Reconcile brings one pod's warm-up in line with the pod.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.init()
	// A reconcile holds one of the controller's few workers: everything
	// it waits for is bounded, so that no pod — whatever its annotation —
	// keeps another's reconcile from running (a warm-up itself runs in
	// the background).
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	var pod corev1.Pod
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.stopPod(req.NamespacedName, errPodDeleted)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get pod %s: %w", req, err)
	}
	if !HasGate(&pod) {
		return reconcile.Result{}, nil
	}
	if pod.DeletionTimestamp != nil {
		r.stop(pod.UID, errPodDeleted)
		r.forget(pod.UID)
		return reconcile.Result{}, nil
	}
	if !containersReady(&pod) || pod.Status.PodIP == "" {
		// Not started yet, or a container restarted: a restarted JVM is
		// cold again, so the pod goes out of load balancing (condition
		// False) and is warmed afresh once its containers are ready; any
		// load stops, old failures are forgotten.
		r.stop(pod.UID, errContainersNotReady)
		r.forget(pod.UID)
		// yieldCPU fromStart: the JVM starts at the least CPU weight too.
		if cfg, err := r.parseConfig(ctx, pod.Annotations[wellknown.WarmUpAnnotation]); err == nil && cfg.YieldCPU == YieldFromStart && pod.Spec.NodeName != "" && !pod.Spec.HostNetwork {
			r.lowerCPU(ctx, r.Log.With("pod", pod.Namespace+"/"+pod.Name), &pod, "starting")
		}
		if c := condition(&pod); c != nil && c.Status == corev1.ConditionFalse && c.Reason == ReasonWaiting {
			return reconcile.Result{}, nil // said so already (keep why: start or restart)
		}
		msg := "waiting for the containers to be ready before warming"
		if IsWarm(&pod) {
			msg = "a container restarted: cold again; warming once the containers are ready"
		}
		return reconcile.Result{}, r.setCondition(ctx, &pod, corev1.ConditionFalse, ReasonWaiting, msg)
	}
	r.mu.Lock()
	if IsWarm(&pod) {
		r.warmed[pod.UID] = true // e.g. warmed before this process started
	}
	done := r.warmed[pod.UID]
	r.mu.Unlock()
	if done {
		return reconcile.Result{}, nil
	}
	if pod.Spec.HostNetwork {
		return reconcile.Result{}, r.refuseHostNetwork(ctx, &pod)
	}
	cfg, err := r.parseConfig(ctx, pod.Annotations[wellknown.WarmUpAnnotation])
	var target warmup.Target
	if err == nil {
		// The budget is a share of the request the pod was created with,
		// even while the gate has it lowered.
		target, err = warmup.PodTarget(withRecordedRequests(&pod, r.RecordKey), cfg.Port)
	}
	if err != nil {
		if c := condition(&pod); c == nil || c.Reason != ReasonInvalidConfig {
			r.Events.Eventf(&pod, nil, corev1.EventTypeWarning, ReasonInvalidConfig, eventAction, "%v", err)
			r.Metrics.WarmupEnded(metrics.OutcomeRejected, 0, 0)
		}
		return reconcile.Result{}, r.setCondition(ctx, &pod, corev1.ConditionFalse, ReasonInvalidConfig, err.Error())
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, running := r.jobs[pod.UID]; running {
		return reconcile.Result{}, nil
	}
	if a := r.tries[pod.UID]; a != nil {
		if a.gaveUp {
			return reconcile.Result{}, nil
		}
		if wait := time.Until(a.next); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	r.start(&pod, cfg, target, r.neighbours(ctx, &pod, cfg))
	return reconcile.Result{}, nil
}

// neighbours are the Ready pods of the same workload (the same controller,
// e.g. ReplicaSet or StatefulSet) as pod: they serve the users the new pod
// will join, often on the same nodes. The warm-up's neighbour guard probes
// them at a low rate (stableQPS, 10 a second in all) and lowers the pace of
// the warm-up when their latency rises, so warming a pod does not slow the
// users on its siblings. Lookup errors leave the guard without neighbours.
func (r *Reconciler) neighbours(ctx context.Context, pod *corev1.Pod, cfg Config) []warmup.Target {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		r.Log.Warn("list the pod's neighbours for the neighbour guard", "pod", pod.Namespace+"/"+pod.Name, "error", err)
		return nil
	}
	var out []warmup.Target
	for i := range list.Items {
		p := &list.Items[i]
		o := metav1.GetControllerOf(p)
		// A host-network sibling's address is its node's: never probed.
		if p.UID == pod.UID || o == nil || o.UID != owner.UID || p.DeletionTimestamp != nil || !podReady(p) || p.Spec.HostNetwork {
			continue
		}
		if t, err := warmup.PodTarget(p, cfg.Port); err == nil {
			out = append(out, t)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool { return conditionTrue(p, corev1.PodReady) }

// start runs the pod's warm-up in the background. Caller holds r.mu.
func (r *Reconciler) start(pod *corev1.Pod, cfg Config, target warmup.Target, neighbours []warmup.Target) {
	ctx, cancel := context.WithCancelCause(context.Background())
	j := &job{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, cancel: cancel, done: make(chan struct{})}
	r.jobs[pod.UID] = j
	pod = pod.DeepCopy()
	go func() {
		defer close(j.done)
		defer cancel(nil)
		r.warm(ctx, pod, cfg, target, neighbours)
		r.mu.Lock()
		mine := r.jobs[pod.UID] == j
		if mine {
			delete(r.jobs, pod.UID)
		}
		r.mu.Unlock()
		r.mu.Lock()
		warm := r.warmed[pod.UID]
		r.mu.Unlock()
		if mine && ctx.Err() == nil && !warm {
			select {
			case r.requeue <- event.GenericEvent{Object: pod}:
			default: // full: the back-off's own requeue or the next pod event comes
			}
		}
	}()
}

func (r *Reconciler) warm(ctx context.Context, pod *corev1.Pod, cfg Config, target warmup.Target, neighbours []warmup.Target) {
	log := r.Log.With("pod", pod.Namespace+"/"+pod.Name)
	// What the metrics count: the attempt's outcome (empty: none), and
	// whether it waits in the queue.
	var (
		outcome  string
		elapsed  time.Duration
		requests int64
		queued   bool
	)
	enqueue := func() {
		if !queued {
			queued = true
			r.Metrics.Queued(1)
		}
	}
	dequeue := func() {
		if queued {
			queued = false
			r.Metrics.Queued(-1)
		}
	}
	defer func() {
		dequeue()
		if outcome == "" && ctx.Err() != nil {
			outcome = stoppedOutcome(ctx)
		}
		if outcome != "" {
			r.Metrics.WarmupEnded(outcome, elapsed, requests)
		}
	}()
	if node := r.nodeSlot(pod.Spec.NodeName); node != nil {
		select {
		case node <- struct{}{}:
		default:
			enqueue()
			_ = r.setCondition(ctx, pod, corev1.ConditionFalse, ReasonQueued, fmt.Sprintf("queued: %d warm-up(s) already running on node %s, the most at once there (--max-per-node)", cap(node), pod.Spec.NodeName))
			select {
			case node <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		defer func() { <-node }()
	}
	w := r.slots.wait(pod.Namespace)
	select {
	case <-w.ready:
	default:
		enqueue()
		_ = r.setCondition(ctx, pod, corev1.ConditionFalse, ReasonQueued, r.slots.queued(pod.Namespace))
	}
	if r.slots.acquire(ctx, w) != nil {
		return
	}
	dequeue()
	r.Metrics.SlotHeld(1)
	defer func() {
		r.slots.release(pod.Namespace)
		r.Metrics.SlotHeld(-1)
	}()

	if cfg.YieldCPU != YieldOff {
		lctx, lowered := context.WithTimeout(ctx, apiCallTimeout)
		r.lowerCPU(lctx, log, pod, "warming")
		lowered()
	}
	var first time.Duration
	var lastPatch time.Time
	log.Info("warming pod", "target", target.URL, "neighbours", len(neighbours), "cpuRequest", target.CPURequest)
	// The neighbours — Ready pods of the same workload, so the same
	// version, warm — are the warm answer: a pod as fast as they are is
	// warm (warmup.Options.JudgeAgainstStable); nothing is rejected. They
	// also feed the neighbour guard, which keeps the warm-up from hurting
	// them. A lone pod is judged on its own plateau.
	run := cfg.Config
	off := false
	run.RejectSlowerVersion = &off
	run = r.withinBudget(run)
	run, healthBound := r.withinHealthWait(run)
	r.Metrics.Running(1)
	started := time.Now()
	res, err := warmup.Run(ctx, run, []warmup.Target{target}, warmup.Options{Stable: neighbours, JudgeAgainstStable: true, Logger: log, OnProgress: func(p warmup.Progress) {
		if p.Phase != warmup.PhaseLoad || p.Target == "" || p.Stable {
			return
		}
		if first == 0 {
			first = p.Window.P99
		}
		if time.Since(lastPatch) < progressEvery {
			return
		}
		lastPatch = time.Now()
		msg := fmt.Sprintf("warming: %d requests, p99 %s → %s", p.Requests, ms(first), ms(p.Window.P99))
		if p.Waiting != "" {
			msg += "; " + p.Waiting
		}
		_ = r.setCondition(ctx, pod, corev1.ConditionFalse, ReasonWarming, msg)
	}})
	r.Metrics.Running(-1)
	elapsed = time.Since(started)
	if res != nil {
		requests = res.Requests()
	}
	if ctx.Err() != nil {
		// Deleted, or a container restarted: the latter is warmed again,
		// and its CPU request goes back after that warm-up.
		log.Info("warm-up stopped", "reason", context.Cause(ctx))
		return
	}
	// The outcome is written even if the pod changed meanwhile: a fresh
	// context, since ctx may end right after. The CPU request goes back
	// first: a pod never becomes Ready at the lowered weight.
	wctx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	r.restoreCPU(wctx, log, pod)
	outcome = warmup.OutcomeOf(err)
	if err == nil {
		msg := fmt.Sprintf("warm: %s", res.Summary())
		log.Info("pod warm", "summary", res.Summary())
		r.Events.Eventf(pod, nil, corev1.EventTypeNormal, ReasonWarm, eventAction, "%s", msg)
		r.mu.Lock()
		delete(r.tries, pod.UID)
		r.warmed[pod.UID] = true // before the patch: a reconcile from a stale cache must not warm it again
		r.mu.Unlock()
		if err := r.setCondition(wctx, pod, corev1.ConditionTrue, ReasonWarm, msg); err != nil {
			log.Error("set the warm condition", "error", err)
		}
		return
	}
	if healthBound > 0 && errors.Is(err, warmup.ErrUnhealthy) {
		err = fmt.Errorf("%w (the gate waits at most %s for a pod's health while it holds a warm-up slot: --max-health-wait; its slot went to the next in line)", err, healthBound)
	}
	r.failed(wctx, log, pod, cfg, err)
}

// stoppedOutcome is the outcome of a warm-up whose context ended: why the
// gate stopped it.
func stoppedOutcome(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errContainersNotReady) {
		return metrics.OutcomeRestarted
	}
	return metrics.OutcomeDeleted
}

// failed records a failed attempt: another one after the back-off, or the
// failure policy once none is left.
func (r *Reconciler) failed(ctx context.Context, log *slog.Logger, pod *corev1.Pod, cfg Config, err error) {
	r.mu.Lock()
	a := r.tries[pod.UID]
	if a == nil {
		a = &attempts{}
		r.tries[pod.UID] = a
	}
	a.failed++
	n := a.failed
	backoff := retryBackoff(cfg.RetryBackoff.D(), n)
	a.next = time.Now().Add(backoff)
	a.gaveUp = n >= cfg.Retries
	gaveUp := a.gaveUp
	r.mu.Unlock()
	log.Warn("warm-up failed", "attempt", n, "of", cfg.Retries, "error", err)

	if gaveUp && cfg.OnFailure == BecomeReady {
		r.mu.Lock()
		r.warmed[pod.UID] = true // Ready by policy: not warmed again
		r.mu.Unlock()
	}
	status, reason := corev1.ConditionFalse, ReasonRetrying
	msg := fmt.Sprintf("attempt %d of %d failed: %v; next attempt in %s", n, cfg.Retries, err, backoff)
	switch {
	case !gaveUp:
	case cfg.OnFailure == BecomeReady:
		status, reason = corev1.ConditionTrue, ReasonFailedOpen
		msg = fmt.Sprintf("gave up after %d attempts, ready anyway (onFailure: %s): %v", n, BecomeReady, err)
	default:
		reason = ReasonFailed
		msg = fmt.Sprintf("gave up after %d attempts, pod stays un-ready (onFailure: %s): %v", n, StayUnready, err)
	}
	r.Events.Eventf(pod, nil, corev1.EventTypeWarning, reason, eventAction, "%s", msg)
	if err := r.setCondition(ctx, pod, status, reason, msg); err != nil {
		log.Error("set the warm condition", "error", err)
	}
}

// retryBackoff is the wait after the failed-th failed attempt: base,
// doubled before each further one up to max(base, MaxRetryBackoff). It
// never shifts or multiplies past the cap, so no retry count overflows it
// (base << (failed-1) wrapped to a negative or zero wait for large counts).
func retryBackoff(base time.Duration, failed int) time.Duration {
	if base <= 0 {
		return 0
	}
	limit := max(base, MaxRetryBackoff)
	d := base
	for i := 1; i < failed; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return d
}

// MaxRetryBackoff caps the doubling of a pod's retry back-off: a pod
// configured with many retries waits at most this long between attempts
// (a retryBackoff above it is kept as configured, not doubled).
const MaxRetryBackoff = 10 * time.Minute

// forget drops what the Reconciler remembers of a pod: failures and warmth.
func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.tries, uid)
	delete(r.warmed, uid)
	r.mu.Unlock()
}

// stop cancels a pod's warm-up and waits (briefly) for its load to stop;
// why is the cause its context ends with.
func (r *Reconciler) stop(uid types.UID, why error) bool {
	r.mu.Lock()
	j := r.jobs[uid]
	delete(r.jobs, uid)
	r.mu.Unlock()
	if j == nil {
		return false
	}
	r.Log.Info("stopping warm-up", "pod", j.pod.String(), "reason", why.Error())
	j.cancel(why)
	select {
	case <-j.done:
	case <-time.After(2 * time.Second):
	}
	return true
}

// stopPod stops the warm-up of a pod known only by name (it is gone).
func (r *Reconciler) stopPod(name types.NamespacedName, why error) {
	r.mu.Lock()
	var uids []types.UID
	for uid, j := range r.jobs {
		if j.pod == name {
			uids = append(uids, uid)
		}
	}
	for _, uid := range uids {
		delete(r.tries, uid)
		delete(r.warmed, uid)
	}
	r.mu.Unlock()
	for _, uid := range uids {
		r.stop(uid, why)
	}
}

// Requeue is the channel on which the Reconciler asks for a pod's
// reconcile once its warm-up ended (watch it: source.Channel).
func (r *Reconciler) Requeue() <-chan event.GenericEvent {
	r.init()
	return r.requeue
}

// Running counts warm-ups in progress (metrics, tests).
func (r *Reconciler) Running() int {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// setCondition writes the gate's condition through the pods/status
// subresource with a strategic merge patch (conditions merge by type, so
// the kubelet's own are left alone). Unchanged conditions are not written.
func (r *Reconciler) setCondition(ctx context.Context, pod *corev1.Pod, status corev1.ConditionStatus, reason, message string) error {
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	var cur corev1.Pod
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if cur.UID != pod.UID {
		return nil // a new pod of the same name: not ours to speak for
	}
	if len(message) > 1000 {
		message = message[:1000] + "…"
	}
	return r.patchCondition(ctx, &cur, false, wellknown.WarmCondition, status, reason, message)
}

// patchCondition sets the condition of type t on cur, the pod as read from
// the API server, through the pods/status subresource with a strategic
// merge patch (conditions merge by type, so the kubelet's own are left
// alone); with lock, only if the pod is still as read (a Conflict
// otherwise). Unchanged conditions are not written. cur becomes the pod as
// written.
func (r *Reconciler) patchCondition(ctx context.Context, cur *corev1.Pod, lock bool, t corev1.PodConditionType, status corev1.ConditionStatus, reason, message string) error {
	old := cur.DeepCopy()
	c := podCondition(cur, t)
	if c == nil {
		cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: t})
		c = &cur.Status.Conditions[len(cur.Status.Conditions)-1]
	}
	if c.Status == status && c.Reason == reason && c.Message == message {
		return nil
	}
	now := metav1.Now()
	if c.Status != status {
		c.LastTransitionTime = now
	}
	c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, message, now
	var opts []client.MergeFromOption
	if lock {
		opts = append(opts, client.MergeFromWithOptimisticLock{})
	}
	if err := r.Client.Status().Patch(ctx, cur, client.StrategicMergeFrom(old, opts...)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set condition %s=%s on pod %s/%s: %w", t, status, cur.Namespace, cur.Name, err)
	}
	return nil
}

// HasGate reports whether the pod carries the readiness gate wellknown.WarmCondition.
func HasGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == wellknown.WarmCondition {
			return true
		}
	}
	return false
}

// IsWarm reports whether the gate's condition is True on the pod.
func IsWarm(pod *corev1.Pod) bool {
	c := condition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

func condition(pod *corev1.Pod) *corev1.PodCondition {
	return podCondition(pod, wellknown.WarmCondition)
}

// podCondition is the pod's condition of type t, nil if it has none.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func containersReady(pod *corev1.Pod) bool { return conditionTrue(pod, corev1.ContainersReady) }

// conditionTrue reports whether the pod's condition of type t is True.
func conditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ms(d time.Duration) string {
	if d == 0 {
		return "?"
	}
	return d.Round(10 * time.Microsecond).String()
}
