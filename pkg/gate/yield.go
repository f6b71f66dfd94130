package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/danki-dev/danki/pkg/podcpu"
	"github.com/danki-dev/danki/pkg/wellknown"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The gate's records of a pod's CPU requests (Config.YieldCPU).
//
// The gate lowers a warming pod's CPU request with its own, cluster-wide
// pods/resize right and later puts a request back: what it puts back must
// never be more than the pod's own container asked for, or a pod's author
// could have the gate raise their pod's request (e.g. to 32 CPUs, past
// their quota) by writing the value it restores. So the gate restores only
// from records a pod's author cannot write, and both survive a restart of
// the gate mid-warm-up, since they live on the pod:
//
//   - wellknown.CPURequestsAnnotation, the requests at admission, is always written
//     by the webhook (a value the pod came with is replaced) and signed
//     with the gate's RecordKey over the namespace, the value and the time
//     it signed (wellknown.CPURequestsSignatureAnnotation), which must be
//     within admissionRecordWindow of the pod's creation (so an answer of
//     the webhook to another caller is worthless later). A pod whose record does not verify
//     — written or changed by hand, or created while the webhook was down —
//     is refused: a Warning Event and a log line, and it warms at its full
//     weight, never resized. A signed record copied from another pod of the
//     same namespace verifies, but only bounds the restore (below).
//   - wellknown.CPUYieldCondition, written by the gate through pods/status (which a
//     pod's author cannot write; a pod's status is reset when it is
//     created) before it lowers a request: the requests it lowered them
//     from, as the pod's spec had them at that moment (the resize is
//     conditional on the pod being unchanged since), signed over the pod's
//     namespace, name and UID.
//
// A restore sets each container lowered to YieldCPURequest back to the
// request it was lowered from, and no higher than its signed admission
// record (so with yieldCPU fromStart, lowered as soon as the pod is
// scheduled, it is bounded by the request the pod was admitted with). A
// gate restarted mid-warm-up reads both from the pod and does the same.

// wellknown.CPUYieldCondition's reasons.
const (
	ReasonLowered  = "Lowered"
	ReasonRestored = "Restored"
)

// ReasonRecordRefused is the Warning Event of a pod whose record of its CPU
// requests is not the gate's own: it keeps its full CPU weight.
const ReasonRecordRefused = "CPURecordRefused"

// The purposes a RecordKey signs for: no signature of one is valid for the
// other.
const (
	signAdmission = "danki.dev/cpu-requests/v2" // v2: bound to the time of admission
	signLowered   = "danki.dev/cpu-yield/v1"
)

// YieldCPURequest is the CPU request a warming pod's containers have while
// the gate warms it (Config.YieldCPU): podcpu.YieldRequest, the kernel's
// least CPU weight.
const YieldCPURequest = podcpu.YieldRequest

// recordCPURequests is the webhook's value of wellknown.CPURequestsAnnotation for
// pod, "" when no container requests CPU.
func recordCPURequests(pod *corev1.Pod) string {
	m := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
			m[c.Name] = q.String()
		}
	}
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of strings always marshals
	return string(b)
}

// stampCPURequests is the webhook's part: it replaces whatever
// wellknown.CPURequestsAnnotation and its signature the pod came with by the pod's
// own CPU requests, signed with key for namespace (the admission request's:
// the pod's may be empty). A pod that requests no CPU gets neither.
func stampCPURequests(pod *corev1.Pod, namespace string, key RecordKey) {
	stampCPURequestsAt(pod, namespace, key, time.Now())
}

// admissionRecordWindow is how far apart the time the webhook signed a
// record and the pod's creation (its creationTimestamp, set by the API
// server after admission) may be for the record to verify: the webhook's
// call (timeoutSeconds: 5) and the clocks of the gate's replicas and the
// API server. The webhook answers whoever reaches its port unless
// --webhook-client-ca is set; bound to the moment, what it signed for one
// caller is worthless on a pod created later, and a pod created through the
// webhook carries the webhook's own record, whatever it came with.
const admissionRecordWindow = time.Minute

// admissionSignature is the record's signature as the webhook writes it:
// the time it signed (Unix seconds), ".", the key's MAC over the
// namespace, the record and that time.
func admissionSignature(key RecordKey, namespace, rec string, at time.Time) string {
	t := strconv.FormatInt(at.Unix(), 10)
	return t + "." + key.sign(signAdmission, namespace, rec, t)
}

// stampCPURequestsAt is stampCPURequests signing at now.
func stampCPURequestsAt(pod *corev1.Pod, namespace string, key RecordKey, now time.Time) {
	delete(pod.Annotations, wellknown.CPURequestsAnnotation)
	delete(pod.Annotations, wellknown.CPURequestsSignatureAnnotation)
	rec := recordCPURequests(pod)
	if rec == "" {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[wellknown.CPURequestsAnnotation] = rec
	if len(key) > 0 {
		pod.Annotations[wellknown.CPURequestsSignatureAnnotation] = admissionSignature(key, namespace, rec, now)
	}
}

// errNotSigned: a record that does not verify against the gate's key.
var errNotSigned = errors.New("not signed by this gate (written or changed by hand, or the pod was created while the webhook was not called)")

// verifiedCPURequests reads wellknown.CPURequestsAnnotation if its signature verifies
// against key: nil, nil without a record; an error wrapping errNotSigned
// for a record that does not verify.
func verifiedCPURequests(pod *corev1.Pod, key RecordKey) (map[string]resource.Quantity, error) {
	v, ok := pod.Annotations[wellknown.CPURequestsAnnotation]
	if !ok {
		return nil, nil
	}
	at, mac, _ := strings.Cut(pod.Annotations[wellknown.CPURequestsSignatureAnnotation], ".")
	if !key.verify(mac, signAdmission, pod.Namespace, v, at) {
		return nil, fmt.Errorf("annotation %s: %w", wellknown.CPURequestsAnnotation, errNotSigned)
	}
	unix, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", wellknown.CPURequestsAnnotation, errNotSigned)
	}
	signed, created := time.Unix(unix, 0), pod.CreationTimestamp.Time
	if d := created.Sub(signed); d > admissionRecordWindow || d < -admissionRecordWindow {
		return nil, fmt.Errorf("annotation %s: %w: signed at %s, the pod created at %s — another admission's record",
			wellknown.CPURequestsAnnotation, errNotSigned, signed.UTC().Format(time.RFC3339), created.UTC().Format(time.RFC3339))
	}
	return parseRequests("annotation "+wellknown.CPURequestsAnnotation, v)
}

func parseRequests(what, v string) (map[string]resource.Quantity, error) {
	var raw map[string]string
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := map[string]resource.Quantity{}
	for name, s := range raw {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, fmt.Errorf("%s: container %s: %w", what, name, err)
		}
		out[name] = q
	}
	return out, nil
}

// yieldRecord is wellknown.CPUYieldCondition's message: the requests the gate lowered
// the containers from, and its signature.
type yieldRecord struct {
	From map[string]string `json:"from"`
	Sig  string            `json:"sig"`
}

// loweredFrom reads wellknown.CPUYieldCondition: the requests the gate lowered the
// pod's containers from, nil when it has none lowered; an error wrapping
// errNotSigned when the record does not verify against key for this pod.
func loweredFrom(pod *corev1.Pod, key RecordKey) (map[string]resource.Quantity, error) {
	c := podCondition(pod, wellknown.CPUYieldCondition)
	if c == nil || c.Status != corev1.ConditionTrue {
		return nil, nil
	}
	var rec yieldRecord
	if err := json.Unmarshal([]byte(c.Message), &rec); err != nil {
		return nil, fmt.Errorf("condition %s: %w", wellknown.CPUYieldCondition, err)
	}
	from, _ := json.Marshal(rec.From) // keys sorted: as signed
	if !key.verify(rec.Sig, signLowered, pod.Namespace, pod.Name, string(pod.UID), string(from)) {
		return nil, fmt.Errorf("condition %s: %w", wellknown.CPUYieldCondition, errNotSigned)
	}
	return parseRequests("condition "+string(wellknown.CPUYieldCondition), string(from))
}

// loweredRecord is wellknown.CPUYieldCondition's message for from on pod.
func loweredRecord(pod *corev1.Pod, key RecordKey, from map[string]resource.Quantity) string {
	m := map[string]string{}
	for name, q := range from {
		m[name] = q.String()
	}
	b, _ := json.Marshal(m)
	rec := yieldRecord{From: m, Sig: key.sign(signLowered, pod.Namespace, pod.Name, string(pod.UID), string(b))}
	out, _ := json.Marshal(rec)
	return string(out)
}

// restoreTargets are the requests a restore puts back: each container's
// lowered-from request, no higher than its signed admission record (adm,
// nil when none verifies).
func restoreTargets(from, adm map[string]resource.Quantity) map[string]resource.Quantity {
	out := map[string]resource.Quantity{}
	for name, q := range from {
		if a, ok := adm[name]; ok && a.Cmp(q) < 0 {
			q = a
		}
		out[name] = q
	}
	return out
}

// withRecordedRequests is pod with the requests a restore would put back
// in its spec while the gate has them lowered: what the warm-up's CPU
// budget is a share of, even when the pod's request is lowered already (a
// warm-up retried, yieldCPU fromStart, or a gate restarted mid-warm-up).
func withRecordedRequests(pod *corev1.Pod, key RecordKey) *corev1.Pod {
	from, err := loweredFrom(pod, key)
	if err != nil || len(from) == 0 {
		return pod
	}
	adm, _ := verifiedCPURequests(pod, key)
	rec := restoreTargets(from, adm)
	p := pod.DeepCopy()
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if q, ok := rec[c.Name]; ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[corev1.ResourceCPU] = q
		}
	}
	return p
}

// yieldPlan says whether the pod's CPU request can be lowered while it
// warms: its verified admission record, or why not (refused: the record is
// not the gate's own).
func yieldPlan(pod *corev1.Pod, key RecordKey) (rec map[string]resource.Quantity, why string, refused bool) {
	rec, err := verifiedCPURequests(pod, key)
	switch {
	case errors.Is(err, errNotSigned):
		return nil, err.Error(), true
	case err != nil:
		return nil, err.Error(), false
	case rec == nil:
		return nil, "no " + wellknown.CPURequestsAnnotation + " annotation (the webhook records it; a pod given the gate by hand keeps its CPU weight)", false
	case len(rec) == 0:
		return nil, "no container requests CPU", false
	}
	if why := podcpu.CannotYield(pod, rec); why != "" {
		return nil, why, false
	}
	return rec, "", false
}

// lowerCPU lowers the pod's recorded containers' CPU request to
// YieldCPURequest through the pods/resize subresource (nothing to do when
// it is lowered already) and reports whether it is low. First it records
// what it lowers them from (wellknown.CPUYieldCondition, signed) on the pod as it is
// now, and the resize applies only to that version of the pod: what a
// restore puts back is what the spec had. When the pod cannot yield (see
// yieldPlan: a record that is not the gate's own is refused with a Warning
// Event) or the resize is refused (an API server before Kubernetes 1.33,
// RBAC without pods/resize, a LimitRange's minimum), it keeps its full
// weight: said in the log and, for a refusal, in an Event.
func (r *Reconciler) lowerCPU(ctx context.Context, log *slog.Logger, pod *corev1.Pod, why string) bool {
	rec, not, refused := yieldPlan(pod, r.RecordKey)
	if refused {
		log.Warn("refusing the pod's record of its CPU requests; it keeps its full CPU weight", "while", why, "why", not)
		r.Events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonRecordRefused, eventAction,
			"not lowering the CPU request while %s (full weight): %s", why, not)
		return false
	}
	if rec == nil {
		log.Info("the pod keeps its full CPU weight", "while", why, "why", not)
		return false
	}
	low := resource.MustParse(YieldCPURequest)
	lowered := map[string]resource.Quantity{}
	for name := range rec {
		lowered[name] = low
	}
	var from map[string]resource.Quantity
	// Conflicts: the pod changed since it was read (the kubelet's status,
	// or a cache a little behind): read it again.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var cur corev1.Pod
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return fmt.Errorf("get pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return errGone
		}
		if podcpu.HasRequests(&cur, lowered) {
			from = nil
			return nil
		}
		from = map[string]resource.Quantity{}
		for _, c := range cur.Spec.Containers {
			if _, ok := rec[c.Name]; !ok {
				continue
			}
			if q, has := c.Resources.Requests[corev1.ResourceCPU]; has && q.Cmp(low) > 0 {
				from[c.Name] = q
			}
		}
		if len(from) == 0 {
			return nil
		}
		// Containers the gate lowered before and that are still low keep
		// their record.
		record := maps.Clone(from)
		if prev, err := loweredFrom(&cur, r.RecordKey); err == nil {
			for _, c := range cur.Spec.Containers {
				q, ok := prev[c.Name]
				if got, has := c.Resources.Requests[corev1.ResourceCPU]; ok && has && got.Cmp(low) == 0 {
					record[c.Name] = q
				}
			}
		}
		// Write ahead: the record first, then the resize, each only if the
		// pod did not change since it was read.
		if err := r.patchCondition(ctx, &cur, true, wellknown.CPUYieldCondition, corev1.ConditionTrue, ReasonLowered, loweredRecord(&cur, r.RecordKey, record)); err != nil {
			return err
		}
		only := map[string]resource.Quantity{}
		for name := range from {
			only[name] = low
		}
		return r.resizeCPU(ctx, &cur, only, cur.ResourceVersion)
	})
	switch {
	case errors.Is(err, errGone):
		return false
	case err != nil:
		log.Warn("lower the CPU request; the pod keeps its full weight", "while", why, "error", err)
		r.Events.Eventf(pod, nil, corev1.EventTypeWarning, ReasonYieldRefused, eventAction,
			"could not lower the CPU request to %s while %s (full weight): %v", YieldCPURequest, why, err)
		return false
	case len(from) == 0:
		return true // low already
	}
	log.Info("CPU request lowered", "while", why, "to", YieldCPURequest, "from", podcpu.Format(from))
	return true
}

// errGone: the pod was deleted or replaced meanwhile.
var errGone = errors.New("pod gone")

// restoreCPU puts back the CPU request of each container the gate lowered
// (wellknown.CPUYieldCondition; its request is still YieldCPURequest: another value
// is someone else's resize, left alone) — the request it was lowered from,
// no higher than the signed admission record — and waits for the kubelet
// to apply it. A pod gone or going needs nothing back.
func (r *Reconciler) restoreCPU(ctx context.Context, log *slog.Logger, pod *corev1.Pod) {
	var cur corev1.Pod
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
	if apierrors.IsNotFound(err) || err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil) {
		return
	}
	if err != nil {
		log.Error("read the pod to restore its CPU request", "error", err)
		return
	}
	from, err := loweredFrom(&cur, r.RecordKey)
	if err != nil {
		log.Warn("refusing the pod's record of its lowered CPU request; not resizing it", "error", err)
		r.Events.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonRecordRefused, eventAction,
			"not restoring the CPU request: %v", err)
		return
	}
	if len(from) == 0 {
		return // not lowered by the gate
	}
	adm, err := verifiedCPURequests(&cur, r.RecordKey)
	if err != nil {
		// Changed since the gate lowered the request: what it was lowered
		// from bounds the restore alone.
		log.Warn("the pod's admission record of its CPU requests does not verify; restoring what the gate lowered them from", "error", err)
		adm = nil
	}
	back := map[string]resource.Quantity{}
	low := resource.MustParse(YieldCPURequest)
	for name, q := range restoreTargets(from, adm) {
		for _, c := range cur.Spec.Containers {
			if got, has := c.Resources.Requests[corev1.ResourceCPU]; c.Name == name && has && got.Cmp(low) == 0 && q.Cmp(low) != 0 {
				back[name] = q
			}
		}
	}
	if len(back) > 0 {
		if err := r.resizeCPU(ctx, &cur, back, ""); err != nil {
			log.Error("restore the CPU request", "to", podcpu.Format(back), "error", err)
			r.Events.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonRestoreFailed, eventAction,
				"could not restore the CPU request to %s: %v", podcpu.Format(back), err)
			return // the record stays, for the next restore
		}
	}
	// The record goes only if the pod is as read (and resized): a pod read
	// from a cache a little behind, still showing its request unlowered,
	// keeps its record for the next restore.
	if err := r.patchCondition(ctx, &cur, true, wellknown.CPUYieldCondition, corev1.ConditionFalse, ReasonRestored, "restored: "+podcpu.Format(back)); err != nil {
		log.Info("the record of the lowered CPU request stays (the pod changed meanwhile)", "error", err)
	}
	if len(back) == 0 {
		return
	}
	get := func(ctx context.Context) (*corev1.Pod, error) {
		var p corev1.Pod
		return &p, r.Client.Get(ctx, client.ObjectKeyFromObject(&cur), &p)
	}
	if err := podcpu.AwaitActuated(ctx, get, back); err != nil {
		// Deferred (the node filled meanwhile) or slow: the kubelet
		// applies it when it can; the pod is warm either way.
		log.Warn("CPU request restored in the spec, not yet applied by the kubelet", "error", err)
		r.Events.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonRestorePending, eventAction,
			"CPU request restored to %s; the kubelet has not applied it yet: %v", podcpu.Format(back), err)
		return
	}
	log.Info("CPU request restored", "to", podcpu.Format(back))
}

// resizeCPU sets the CPU requests of the named containers through the
// pods/resize subresource (a strategic merge patch: other resources and
// containers are left alone), only if the pod is still at resourceVersion
// when one is given (a Conflict otherwise). pod's resourceVersion becomes
// the resized pod's.
func (r *Reconciler) resizeCPU(ctx context.Context, pod *corev1.Pod, requests map[string]resource.Quantity, resourceVersion string) error {
	body, err := podcpu.ResizePatch(requests, resourceVersion)
	if err != nil {
		return err
	}
	target := &corev1.Pod{}
	target.Namespace, target.Name, target.UID = pod.Namespace, pod.Name, pod.UID
	if err := r.Client.SubResource("resize").Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, body)); err != nil {
		return fmt.Errorf("resize pod %s/%s to CPU requests %s: %w", pod.Namespace, pod.Name, podcpu.Format(requests), err)
	}
	pod.ResourceVersion = target.ResourceVersion // as resized
	return nil
}
