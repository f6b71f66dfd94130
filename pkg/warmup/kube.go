package warmup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// PodTemplateHashLabel is the label Argo Rollouts puts on the pods of each
// ReplicaSet (and into the canary/stable Service selectors).
const PodTemplateHashLabel = "rollouts-pod-template-hash"

// KubeTargets finds pods to warm in Kubernetes: the ready endpoints of a
// Service (through its EndpointSlices), or the Running and Ready pods matching
// a label selector. Either way each pod is addressed directly at its pod IP.
type KubeTargets struct {
	Namespace string
	// Service, if set, selects the ready endpoints of this Service's
	// EndpointSlices.
	Service string
	// Selector is a label selector ("app=shop,tier=web"), used when Service
	// is empty.
	Selector string
	// PodTemplateHash, if set, keeps only pods labelled
	// rollouts-pod-template-hash=<hash> (with Service too, which covers the
	// moment before Argo has pointed the Service at the new hash).
	PodTemplateHash string
	// Port is the container / EndpointSlice port, by name ("http") or
	// number. Empty: the only port there is.
	Port intstr.IntOrString
}

func (k KubeTargets) String() string {
	what := "pods matching " + strconv.Quote(k.selector().String())
	if k.Service != "" {
		what = "ready endpoints of Service " + k.Service
	}
	return fmt.Sprintf("%s in namespace %s", what, k.Namespace)
}

func (k KubeTargets) selector() labels.Selector {
	sel, err := labels.Parse(k.Selector)
	if err != nil {
		sel = labels.Nothing()
	}
	if k.PodTemplateHash != "" {
		req, err := labels.NewRequirement(PodTemplateHashLabel, "=", []string{k.PodTemplateHash})
		if err == nil {
			sel = sel.Add(*req)
		}
	}
	return sel
}

func (k KubeTargets) validate() error {
	var errs []error
	if k.Namespace == "" {
		errs = append(errs, errors.New("namespace: required"))
	}
	if k.Service == "" && k.Selector == "" && k.PodTemplateHash == "" {
		errs = append(errs, errors.New("give a Service or a label selector (and/or a pod-template hash) to find the pods"))
	}
	if _, err := labels.Parse(k.Selector); err != nil {
		errs = append(errs, fmt.Errorf("selector %q: %w", k.Selector, err))
	}
	if k.Port.Type == intstr.Int && (k.Port.IntVal < 0 || k.Port.IntVal > 65535) {
		errs = append(errs, fmt.Errorf("port %d: must be 1-65535 or a port name", k.Port.IntVal))
	}
	return errors.Join(errs...)
}

// Resolve lists the current targets, sorted by name. No pods is not an
// error: Wait polls until there are some.
func (k KubeTargets) Resolve(ctx context.Context, kube kubernetes.Interface) ([]Target, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	var targets []Target
	var err error
	if k.Service != "" {
		targets, err = k.fromEndpointSlices(ctx, kube)
	} else {
		targets, err = k.fromPods(ctx, kube)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(targets, func(a, b Target) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return targets, nil
}

// Wait polls Resolve until at least minTargets targets exist or ctx ends.
// With a PodTemplateHash it also waits for every replica its ReplicaSet
// wants (spec.replicas, read again at every poll): catching the Service
// when it lists one of two new pods would leave the second to meet users
// cold. A lookup the API server forbids (ForbiddenError) ends the wait at
// once, naming the missing rule: no wait grants it, and waiting for fewer
// pods than the ReplicaSet wants would be a different warm-up.
func (k KubeTargets) Wait(ctx context.Context, kube kubernetes.Interface, minTargets int, poll time.Duration) ([]Target, error) {
	minTargets = max(minTargets, 1)
	var targets []Target
	var lastErr error
	want, wantWhy := minTargets, ""
	err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		found, err := k.Resolve(ctx, kube)
		if endOfContext(ctx, err) {
			return false, nil // cut short by the end of ctx: keep the last full answer
		}
		if err != nil {
			targets, lastErr = found, err
			if terminal(err) {
				return false, err // no wait changes it
			}
			return false, nil
		}
		replicas, rs, err := k.wantedReplicas(ctx, kube)
		if endOfContext(ctx, err) {
			// Not this pass's Resolve alone: an earlier pass's failed
			// ReplicaSets list stays the answer.
			return false, nil
		}
		targets, lastErr = found, err
		if err != nil {
			if terminal(err) {
				return false, err
			}
			return false, nil // a passing API error: ask again at the next poll
		}
		if replicas > minTargets {
			want, wantWhy = replicas, fmt.Sprintf(", the replicas ReplicaSet %s wants", rs)
		} else {
			want, wantWhy = minTargets, ""
		}
		return len(found) >= want, nil
	})
	switch {
	case err == nil:
		return targets, nil
	case lastErr != nil:
		return nil, fmt.Errorf("find %s: %w", k, lastErr)
	}
	return targets, fmt.Errorf("found %d of %d ready pods (%s%s) before giving up: %w", len(targets), want, k, wantWhy, ctx.Err())
}

// terminal reports whether a lookup error is one no wait changes: a
// host-network pod, or a call the API server forbids.
func terminal(err error) bool {
	var hn *HostNetworkError
	var fe *ForbiddenError
	return errors.As(err, &hn) || errors.As(err, &fe)
}

// wantedReplicas is spec.replicas of the ReplicaSet of PodTemplateHash, and
// its name: 0 when there is no hash or no such ReplicaSet (then minPods
// alone decides). Any other failure is an error, a refusal a ForbiddenError
// naming the rule: the list decides how many pods are warmed, so it never
// falls back to minPods silently.
func (k KubeTargets) wantedReplicas(ctx context.Context, kube kubernetes.Interface) (int, string, error) {
	if k.PodTemplateHash == "" {
		return 0, "", nil
	}
	list, err := kube.AppsV1().ReplicaSets(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k.selector().String()})
	switch {
	case apierrors.IsNotFound(err):
		return 0, "", nil
	case err != nil:
		return 0, "", apiError(err, "list", "apps", "replicasets", k.Namespace,
			"danki lists them to learn how many canary pods to wait for")
	}
	for _, rs := range list.Items {
		if rs.DeletionTimestamp == nil && rs.Spec.Replicas != nil {
			return int(*rs.Spec.Replicas), rs.Name, nil
		}
	}
	return 0, "", nil
}

// ForbiddenError is a lookup the API server refused: it names the call, who
// was refused and the RBAC rule that grants it, and where danki ships it.
type ForbiddenError struct {
	Verb, Group, Resource, Namespace string
	// User is who the API server refused ("system:serviceaccount:ns:name"),
	// "" when its answer does not say.
	User string
	// Why says what danki needs the call for ("danki lists them to …").
	Why string
	Err error
}

func (e *ForbiddenError) Error() string {
	res := e.Resource
	if e.Group != "" {
		res += "." + e.Group
	}
	who := ""
	if e.User != "" {
		who = " for " + e.User
	}
	msg := fmt.Sprintf("%s %s in namespace %s is forbidden%s", e.Verb, res, e.Namespace, who)
	if e.Why != "" {
		msg += " (" + e.Why + ")"
	}
	msg += fmt.Sprintf(": grant %q on %q in apiGroup %q (%s)", e.Verb, e.Resource, e.Group, PluginsRBAC)
	if e.User == "" {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ForbiddenError) Unwrap() error { return e.Err }

// PluginsRBAC is where danki ships the rules its plugins need, for the
// identity they run as: the Argo Rollouts controller's ServiceAccount.
// The CLI runs as the kubeconfig's user, which its cluster's admin grants.
const PluginsRBAC = "for danki's plugins the ClusterRole danki-plugins in deploy/rbac/clusterrole.yaml or the Helm chart's templates/plugins-rbac.yaml, bound to the Argo Rollouts controller's ServiceAccount"

// refusedUser reads who was refused from the API server's Forbidden message
// (`User "system:serviceaccount:ns:sa" cannot list resource …`).
var refusedUser = regexp.MustCompile(`User "([^"]*)" cannot`)

// apiError wraps a failed call of verb on group/resource in ns: a
// Forbidden becomes a ForbiddenError naming the rule, anything else says
// which call failed.
func apiError(err error, verb, group, resource, ns, why string) error {
	if apierrors.IsForbidden(err) {
		fe := &ForbiddenError{Verb: verb, Group: group, Resource: resource, Namespace: ns, Why: why, Err: err}
		if m := refusedUser.FindStringSubmatch(err.Error()); m != nil {
			fe.User = m[1]
		}
		return fe
	}
	res := resource
	if group != "" {
		res += "." + group
	}
	return fmt.Errorf("%s %s in namespace %s: %w", verb, res, ns, err)
}

// endOfContext reports whether a lookup failed only because ctx is ending:
// ctx is done, or client-go's rate limiter refused the request because it
// would end after ctx's deadline (it says so before ctx ends, in an error
// that wraps no sentinel).
func endOfContext(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) ||
		(err != nil && strings.Contains(err.Error(), "would exceed context deadline"))
}

func (k KubeTargets) fromEndpointSlices(ctx context.Context, kube kubernetes.Interface) ([]Target, error) {
	slicesList, err := kube.DiscoveryV1().EndpointSlices(k.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + k.Service,
	})
	if err != nil {
		return nil, fmt.Errorf("EndpointSlices of Service %s/%s: %w", k.Namespace, k.Service,
			apiError(err, "list", "discovery.k8s.io", "endpointslices", k.Namespace, "danki lists them to find the Service's ready endpoints"))
	}
	// The endpoints' pods, by name: with a hash, only those are targets;
	// either way a target keeps its pod (its readinessProbe, gRPC port,
	// and for Istio mTLS its ServiceAccount and sidecar).
	byName := map[string]*corev1.Pod{}
	pods, err := kube.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k.selector().String()})
	if err != nil {
		return nil, fmt.Errorf("pods matching %q: %w", k.selector(), apiError(err, "list", "", "pods", k.Namespace, "danki lists them to find the pods to warm"))
	}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	var targets []Target
	seen := map[string]bool{}
	for _, s := range slicesList.Items {
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		port, isGRPC, err := k.slicePort(s)
		if err != nil {
			return nil, err
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
				continue // unset Ready means ready (EndpointSlice API)
			}
			name := ep.Addresses[0]
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
				name = ep.TargetRef.Name
			}
			pod := byName[name]
			if k.PodTemplateHash != "" && pod == nil {
				continue
			}
			if err := refuseHostNetwork(pod); err != nil {
				return nil, err
			}
			url := "http://" + net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port)))
			if !seen[url] {
				seen[url] = true
				targets = append(targets, Target{Name: name, URL: url, HealthURL: readinessURL(pod, ep.Addresses[0], port), Warmed: gateWarmed(pod), GRPC: isGRPC || podGRPCPort(pod, port), pod: pod})
			}
		}
	}
	return targets, nil
}

// slicePort finds the port in the slice, and whether it is a gRPC port
// (grpcPort).
func (k KubeTargets) slicePort(s discoveryv1.EndpointSlice) (int32, bool, error) {
	byNumber := k.Port.Type == intstr.Int && k.Port.IntVal != 0
	var names []string
	for _, p := range s.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		names = append(names, strconv.Quote(name))
		if byNumber && p.Port != nil && *p.Port == k.Port.IntVal {
			return k.Port.IntVal, grpcPort(name, p.AppProtocol), nil
		}
		if !byNumber && p.Port != nil && (name == k.Port.StrVal || (k.Port.StrVal == "" && len(s.Ports) == 1)) {
			return *p.Port, grpcPort(name, p.AppProtocol), nil
		}
	}
	switch {
	case byNumber:
		return k.Port.IntVal, false, nil
	case k.Port.StrVal == "":
		return 0, false, fmt.Errorf("EndpointSlice %s/%s has %d ports (%v): set port to a name or number", s.Namespace, s.Name, len(s.Ports), names)
	}
	return 0, false, fmt.Errorf("EndpointSlice %s/%s has no port named %q (ports: %v): set port to one of them or a number", s.Namespace, s.Name, k.Port.StrVal, names)
}

func (k KubeTargets) fromPods(ctx context.Context, kube kubernetes.Interface) ([]Target, error) {
	sel := k.selector()
	pods, err := kube.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("pods matching %q: %w", sel, apiError(err, "list", "", "pods", k.Namespace, "danki lists them to find the pods to warm"))
	}
	var targets []Target
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !podReady(&p) {
			continue
		}
		t, err := PodTarget(&p, k.Port)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	return targets, nil
}

// HostNetworkError refuses a pod with spec.hostNetwork as a target: its IP
// is its node's, so the load would reach whatever listens on the node at
// that port (the kubelet, another tenant's host-network pod), not the pod
// alone. Waiting does not change it.
type HostNetworkError struct{ Namespace, Name string }

func (e *HostNetworkError) Error() string {
	return fmt.Sprintf("pod %s/%s runs with spec.hostNetwork: its IP is its node's, so the warm-up's load would reach the node (whatever listens there on that port), not the pod alone; danki warms no host-network pod: run it on the pod network", e.Namespace, e.Name)
}

// refuseHostNetwork is the HostNetworkError of p, nil for a pod on the pod
// network.
func refuseHostNetwork(p *corev1.Pod) error {
	if p != nil && p.Spec.HostNetwork {
		return &HostNetworkError{Namespace: p.Namespace, Name: p.Name}
	}
	return nil
}

// PodTarget addresses one pod at its pod IP: port by name or number (empty:
// its only container port), the health URL from its readinessProbe. A
// host-network pod is refused (HostNetworkError).
func PodTarget(p *corev1.Pod, port intstr.IntOrString) (Target, error) {
	if err := refuseHostNetwork(p); err != nil {
		return Target{}, err
	}
	if p.Status.PodIP == "" {
		return Target{}, fmt.Errorf("pod %s/%s has no IP yet", p.Namespace, p.Name)
	}
	n, err := KubeTargets{Port: port}.podPort(p)
	if err != nil {
		return Target{}, err
	}
	return Target{Name: p.Name, URL: "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(n))),
		HealthURL: readinessURL(p, p.Status.PodIP, n), Warmed: gateWarmed(p), GRPC: podGRPCPort(p, n),
		CPURequest: servingCPURequest(p, n), pod: p}, nil
}

// servingCPURequest is the CPU request, in cores, of the container of p
// that declares the container port n (0 when none does or it requests no
// CPU): the share of the node the pod is promised, which its warm-up
// stays within by default (Config.CPUBudget). A sidecar's request is not
// the app's to spend.
func servingCPURequest(p *corev1.Pod, n int32) float64 {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort == n {
				return c.Resources.Requests.Cpu().AsApproximateFloat64()
			}
		}
	}
	return 0
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (k KubeTargets) podPort(p *corev1.Pod) (int32, error) {
	if k.Port.Type == intstr.Int && k.Port.IntVal != 0 {
		return k.Port.IntVal, nil
	}
	var all []corev1.ContainerPort
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if k.Port.StrVal != "" && cp.Name == k.Port.StrVal {
				return cp.ContainerPort, nil
			}
			all = append(all, cp)
		}
	}
	if k.Port.StrVal == "" && len(all) == 1 {
		return all[0].ContainerPort, nil
	}
	var names []string
	for _, cp := range all {
		names = append(names, fmt.Sprintf("%s=%d", cp.Name, cp.ContainerPort))
	}
	if k.Port.StrVal == "" {
		return 0, fmt.Errorf("pod %s/%s declares %d container ports %v: set port to a name or number", p.Namespace, p.Name, len(all), names)
	}
	return 0, fmt.Errorf("pod %s/%s has no container port named %q (ports: %v): set port to one of them or a number", p.Namespace, p.Name, k.Port.StrVal, names)
}

// readinessURL is the pod's readinessProbe as a URL at ip: the httpGet probe
// of the container serving port (else the first container's that has one),
// on http only; "" when there is none.
func readinessURL(p *corev1.Pod, ip string, port int32) string {
	if p == nil {
		return ""
	}
	var chosen *corev1.Container
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
			continue
		}
		serves := slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == port })
		if chosen == nil || serves {
			chosen = c
		}
		if serves {
			break
		}
	}
	if chosen == nil {
		return ""
	}
	get := chosen.ReadinessProbe.HTTPGet
	if get.Scheme != "" && get.Scheme != corev1.URISchemeHTTP {
		return ""
	}
	probePort := get.Port.IntVal
	if get.Port.Type == intstr.String {
		probePort = 0
		for _, cp := range chosen.Ports {
			if cp.Name == get.Port.StrVal {
				probePort = cp.ContainerPort
			}
		}
		if probePort == 0 {
			return ""
		}
	}
	path := get.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(int(probePort))) + path
}
