package wellknown

// On a VirtualService (pkg/shift).
const (
	// RampAnnotation holds the gated ramp's state (JSON, shift.State).
	// Written by the danki/istio traffic router and `danki shift ramp` at
	// every move; read by the same (a restarted plugin carries on where the
	// last one stopped) and by `danki shift get`.
	RampAnnotation = "danki.dev/ramp"

	// ExtrasAnnotation lists the additional destinations danki added to the
	// managed routes (JSON [{host, subset}]), so it removes them, and only
	// them, once they are no longer asked for. Written and read by the
	// danki/istio traffic router (pkg/shift).
	ExtrasAnnotation = "danki.dev/extra-destinations"

	// MirrorAnnotation holds the warm-up mirror's state (JSON,
	// shift.MirrorState). Written by the danki/warmup step's mirror block
	// and `danki warmup mirror` (pkg/mirror through pkg/shift); read by the
	// same, by an abort and by a restarted plugin, to remove exactly what
	// was added.
	MirrorAnnotation = "danki.dev/warmup-mirror"
)

// On a DestinationRule (pkg/shift).
const (
	// ExtraSubsetsAnnotation lists the subsets danki added for additional
	// destinations (JSON [name]). Written and read by the danki/istio
	// traffic router (pkg/shift), to remove only its own subsets.
	ExtraSubsetsAnnotation = "danki.dev/extra-subsets"
)

// On a Rollout (pkg/capacity).
const (
	// CapacityKneesAnnotation holds the capacity knees the danki/warmup
	// step measured, one per revision (pod-template hash) that passed the
	// check as a canary. Written by the danki/warmup step's capacity check;
	// read by the same check at the next rollout, to compare its canary with
	// the revision it replaces.
	CapacityKneesAnnotation = "danki.dev/capacity-knees"
)

// On a pod (pkg/gate, the warm gate).
const (
	// WarmUpAnnotation opts a pod in to the warm gate: "true", or its
	// warm-up config as JSON or YAML; "false" opts out. Written by users
	// (the pod template); read by the gate's webhook and reconciler.
	WarmUpAnnotation = "danki.dev/warm-up"

	// WarmCondition is the readiness gate and pod condition of the warm
	// gate. The readiness gate is written by the gate's webhook at
	// admission, the condition (True once warm) by the gate's reconciler;
	// read by the kubelet (the pod is Ready only then) and by the
	// danki/warmup step, which skips pods where it is True.
	WarmCondition = "danki.dev/warm"

	// GatedLabel ("true") marks the pods the gate's webhook gated. Written
	// by the webhook; read by the gate, whose pod cache holds only pods with
	// it (a pod given the readiness gate some other way needs it too).
	GatedLabel = "danki.dev/gated"

	// CPURequestsAnnotation records the pod's CPU requests at admission.
	// Written by the gate's webhook on every pod it gates (a value the pod
	// came with is replaced); read by the gate's reconciler, which never
	// restores a lowered request (yieldCPU) above it.
	CPURequestsAnnotation = "danki.dev/cpu-requests"

	// CPURequestsSignatureAnnotation signs CPURequestsAnnotation (HMAC with
	// the gate's record key), so a tenant cannot forge it. Written by the
	// gate's webhook; read by the gate's reconciler.
	CPURequestsSignatureAnnotation = "danki.dev/cpu-requests-signature"

	// CPUYieldCondition is True while the gate has the pod's CPU request
	// lowered during its warm-up (its message is the signed record of what
	// was lowered). Written by the gate's reconciler; read by the same (a
	// restarted gate restores the request) and by users. It is not a
	// readiness gate.
	CPUYieldCondition = "danki.dev/cpu-yield"
)

// On a namespace (deploy/gate/webhook.yaml).
const (
	// WarmGateNamespaceLabel, set to "disabled" on a namespace, keeps the
	// gate's webhook away from the namespace's pods (istio-system should
	// carry it). Written by cluster operators; read by the API server,
	// through the webhook's namespaceSelector.
	WarmGateNamespaceLabel = "danki.dev/warm-gate"
)

// On the wire.
const (
	// MarkerHeader, with value "1", is on every warm-up request (HTTP
	// header; gRPC metadata, lower-cased), so the application or a mesh
	// filter can tell warm-up traffic apart and keep it free of side
	// effects; it is the default of the warm-up config's markerHeader.
	// Written by every warm-up (`danki warmup`, the danki/warmup step, the
	// gate, the load source, the capacity check); read by applications. The
	// routes danki adds to a VirtualService remove it from users' requests.
	MarkerHeader = "X-Danki-Warmup"
)
