package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/danki-dev/danki/pkg/metrics"
	"github.com/danki-dev/danki/pkg/wellknown"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WebhookPath is where the mutating webhook is served.
const WebhookPath = "/mutate-pods"

// Injector is the mutating admission webhook: it adds the readiness gate
// wellknown.WarmCondition to pods created with wellknown.WarmUpAnnotation, so users never edit
// readinessGates by hand, and records their containers' CPU requests,
// signed (wellknown.CPURequestsAnnotation; stampCPURequests), for the gate to restore:
// on every pod with the gate, also one that lists it already, replacing any
// record the pod came with. Every pod it leaves with the gate gets the label
// wellknown.GatedLabel, so that the gate's cache holds it. Other pods pass unchanged
// (the API server sends it none: deploy/gate/webhook.yaml's
// matchConditions). It never denies a pod: a bad warm-up configuration shows
// on the pod's condition and in an Event, where the Reconciler finds it.
type Injector struct {
	decoder admission.Decoder
	// RecordKey signs the record (the Reconciler's key); without one the
	// record is unsigned, and the gate never resizes the pod.
	RecordKey RecordKey
	// Metrics counts the answers (nil: not counted).
	Metrics *metrics.Gate
}

// NewInjector returns the webhook's handler.
func NewInjector(d admission.Decoder) *Injector { return &Injector{decoder: d} }

// Handle implements admission.Handler.
func (i *Injector) Handle(_ context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := i.decoder.Decode(req, &pod); err != nil {
		i.Metrics.Admission("error")
		return admission.Errored(http.StatusBadRequest, err)
	}
	gated := HasGate(&pod)
	if !OptedIn(pod.Annotations) && !gated {
		i.Metrics.Admission("passed")
		return admission.Allowed("")
	}
	if !gated {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: wellknown.WarmCondition})
	}
	// The CPU requests as created, for the gate to put back after it
	// lowered them while warming (Config.YieldCPU): always the webhook's
	// own, never one the pod came with.
	stampCPURequests(&pod, req.Namespace, i.RecordKey)
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[wellknown.GatedLabel] = "true"
	mutated, err := json.Marshal(&pod)
	if err != nil {
		i.Metrics.Admission("error")
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode the gated pod: %w", err))
	}
	i.Metrics.Admission("gated")
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated)
}
