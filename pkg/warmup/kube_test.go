package warmup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/danki-dev/danki/test/testenv"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestKubeTargetsAgainstAPIServer resolves targets from real Pods and
// EndpointSlices stored in a real kube-apiserver (envtest). No traffic goes
// to the pod IPs: only resolution is tested here.
func TestKubeTargetsAgainstAPIServer(t *testing.T) {
	e := testenv.Start(t)
	ctx := context.Background()
	ns := "warmup-resolve"
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// canary-a/b run the new hash, b is not Ready yet; stable-a runs the
	// old hash; canary-gone is being deleted (has a finalizer).
	mkPod(t, e.Kube, ns, "canary-a", "new", "10.1.0.5", true, nil)
	mkPod(t, e.Kube, ns, "canary-b", "new", "10.1.0.6", false, nil)
	mkPod(t, e.Kube, ns, "stable-a", "old", "10.1.0.7", true, nil)
	mkPod(t, e.Kube, ns, "canary-gone", "new", "10.1.0.8", true, []string{"danki.dev/test"})
	if err := e.Kube.CoreV1().Pods(ns).Delete(ctx, "canary-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // let the namespace go
		p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, "canary-gone", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = e.Kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		}
	})

	t.Run("selector and hash over pods", func(t *testing.T) {
		k := KubeTargets{Namespace: ns, Selector: "app=shop", PodTemplateHash: "new", Port: intstr.FromString("http")}
		got := resolveNames(t, k, e.Kube)
		if got != "canary-a=http://10.1.0.5:8080" {
			t.Errorf("targets %s, want only the running, ready, not deleting canary-a", got)
		}
		k.Port = intstr.FromInt32(9999)
		if got := resolveNames(t, k, e.Kube); got != "canary-a=http://10.1.0.5:9999" {
			t.Errorf("port by number: %s", got)
		}
		k.Port = intstr.FromString("grpc")
		if _, err := k.Resolve(ctx, e.Kube); err == nil || !strings.Contains(err.Error(), `no container port named "grpc"`) || !strings.Contains(err.Error(), "http=8080") {
			t.Errorf("unknown port name: err = %v", err)
		}
		k = KubeTargets{Namespace: ns, Selector: "app=shop", PodTemplateHash: "old"}
		if got := resolveNames(t, k, e.Kube); got != "stable-a=http://10.1.0.7:8080" {
			t.Errorf("stable hash, only port: %s", got)
		}
	})

	t.Run("service endpoint slices", func(t *testing.T) {
		mkSlice(t, e.Kube, ns, "shop-canary-1", "shop-canary", []endpoint{
			{ip: "10.1.0.5", pod: "canary-a", ready: ptr(true)},
			{ip: "10.1.0.6", pod: "canary-b", ready: ptr(false)},
			{ip: "10.1.0.9", pod: "canary-c"}, // ready unset: counts as ready
		})
		mkSlice(t, e.Kube, ns, "shop-canary-2", "shop-canary", []endpoint{
			{ip: "10.1.0.5", pod: "canary-a", ready: ptr(true)}, // duplicate across slices
			{ip: "10.1.0.7", pod: "stable-a", ready: ptr(true)}, // Service not yet re-pointed
		})
		k := KubeTargets{Namespace: ns, Service: "shop-canary", Port: intstr.FromString("http")}
		if got := resolveNames(t, k, e.Kube); got != "canary-a=http://10.1.0.5:8080,canary-c=http://10.1.0.9:8080,stable-a=http://10.1.0.7:8080" {
			t.Errorf("service targets: %s", got)
		}
		k.PodTemplateHash = "old"
		if got := resolveNames(t, k, e.Kube); got != "stable-a=http://10.1.0.7:8080" {
			t.Errorf("service + hash filter: %s", got)
		}
		k.Port = intstr.FromString("admin")
		if _, err := k.Resolve(ctx, e.Kube); err == nil || !strings.Contains(err.Error(), `no port named "admin"`) {
			t.Errorf("unknown slice port: err = %v", err)
		}
	})

	t.Run("wait for pods to appear", func(t *testing.T) {
		k := KubeTargets{Namespace: ns, Selector: "app=late"}
		go func() {
			time.Sleep(300 * time.Millisecond)
			p := podSpec(ns, "late-a", "x", map[string]string{"app": "late"}, nil)
			created, err := e.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err == nil {
				setReady(ctx, e.Kube, created, "10.1.0.20", true)
			}
		}()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ts, err := k.Wait(wctx, e.Kube, 1, 100*time.Millisecond)
		if err != nil || len(ts) != 1 || ts[0].Name != "late-a" {
			t.Errorf("Wait = %v, %v", ts, err)
		}
		wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := (KubeTargets{Namespace: ns, Selector: "app=never"}).Wait(wctx, e.Kube, 1, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "found 0 of 1") {
			t.Errorf("Wait for nothing: err = %v", err)
		}
	})

	// The canary ReplicaSet wants two pods; the lookup comes when one is
	// ready. With minPods 1 it must still wait for the second.
	t.Run("wait for every replica of the ReplicaSet", func(t *testing.T) {
		labels := map[string]string{"app": "pair", PodTemplateHashLabel: "two"}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pair-two", Labels: labels},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(ns, "x", "two", nil, nil).Spec}},
		}
		if _, err := e.Kube.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		first, err := e.Kube.CoreV1().Pods(ns).Create(ctx, podSpec(ns, "pair-a", "two", labels, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := setReady(ctx, e.Kube, first, "10.1.0.30", true); err != nil {
			t.Fatal(err)
		}
		k := KubeTargets{Namespace: ns, Selector: "app=pair", PodTemplateHash: "two"}
		wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		defer cancel()
		if _, err := k.Wait(wctx, e.Kube, 1, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "found 1 of 2") || !strings.Contains(err.Error(), "ReplicaSet pair-two") {
			t.Errorf("one of two replicas ready: err = %v, want a wait for 2 naming ReplicaSet pair-two", err)
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			second, err := e.Kube.CoreV1().Pods(ns).Create(ctx, podSpec(ns, "pair-b", "two", labels, nil), metav1.CreateOptions{})
			if err == nil {
				_ = setReady(ctx, e.Kube, second, "10.1.0.31", true)
			}
		}()
		wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ts, err := k.Wait(wctx, e.Kube, 1, 100*time.Millisecond)
		if err != nil || len(ts) != 2 {
			t.Errorf("Wait = %v, %v; want both replicas", ts, err)
		}
	})

	t.Run("readinessProbe is the default health check", func(t *testing.T) {
		labels := map[string]string{"app": "probed", PodTemplateHashLabel: "p"}
		mk := func(name, ip string, probe *corev1.Probe) {
			p := podSpec(ns, name, "p", labels, nil)
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 8081})
			p.Spec.Containers[0].ReadinessProbe = probe
			created, err := e.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := setReady(ctx, e.Kube, created, ip, true); err != nil {
				t.Fatal(err)
			}
		}
		httpGet := func(port intstr.IntOrString, path string, scheme corev1.URIScheme) *corev1.Probe {
			return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: port, Path: path, Scheme: scheme}}}
		}
		mk("probed-named", "10.1.0.40", httpGet(intstr.FromString("admin"), "/actuator/health/readiness", ""))
		mk("probed-number", "10.1.0.41", httpGet(intstr.FromInt32(8080), "ready", corev1.URISchemeHTTP))
		mk("probed-https", "10.1.0.42", httpGet(intstr.FromInt32(8443), "/ready", corev1.URISchemeHTTPS))
		mk("probed-tcp", "10.1.0.43", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}})
		ts, err := KubeTargets{Namespace: ns, Selector: "app=probed", PodTemplateHash: "p", Port: intstr.FromString("http")}.Resolve(ctx, e.Kube)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, x := range ts {
			got[x.Name] = x.healthURL("")
			if x.healthURL("/custom") != x.URL+"/custom" {
				t.Errorf("%s: a configured healthPath must win: %s", x.Name, x.healthURL("/custom"))
			}
		}
		want := map[string]string{
			"probed-named":  "http://10.1.0.40:8081/actuator/health/readiness",
			"probed-number": "http://10.1.0.41:8080/ready",
			"probed-https":  "http://10.1.0.42:8080/", // danki probes over http only: back to /
			"probed-tcp":    "http://10.1.0.43:8080/",
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: health check %q, want %q", name, got[name], w)
			}
		}
	})
}

func resolveNames(t *testing.T, k KubeTargets, kube kubernetes.Interface) string {
	t.Helper()
	ts, err := k.Resolve(context.Background(), kube)
	if err != nil {
		t.Fatalf("resolve %s: %v", k, err)
	}
	var parts []string
	for _, x := range ts {
		parts = append(parts, x.Name+"="+x.URL)
	}
	return strings.Join(parts, ",")
}

func ptr[T any](v T) *T { return &v }

func podSpec(ns, name, hash string, labels map[string]string, finalizers []string) *corev1.Pod {
	if labels == nil {
		labels = map[string]string{"app": "shop", PodTemplateHashLabel: hash}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: finalizers},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "shop:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

func mkPod(t *testing.T, kube kubernetes.Interface, ns, name, hash, ip string, ready bool, finalizers []string) {
	t.Helper()
	ctx := context.Background()
	p, err := kube.CoreV1().Pods(ns).Create(ctx, podSpec(ns, name, hash, nil, finalizers), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := setReady(ctx, kube, p, ip, ready); err != nil {
		t.Fatal(err)
	}
}

// setReady sets the pod's status through the status subresource, as the
// kubelet would.
func setReady(ctx context.Context, kube kubernetes.Interface, p *corev1.Pod, ip string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
	}
	_, err := kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

type endpoint struct {
	ip, pod string
	ready   *bool
}

func mkSlice(t *testing.T, kube kubernetes.Interface, ns, name, service string, eps []endpoint) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ep.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ep.ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: ep.pod},
		})
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaSetLookupForbidden: a Forbidden on the ReplicaSets list (how
// many canary pods to wait for) ends Wait at once with an error that names
// the call, who was refused and the rule to grant, where danki ships it; it
// never falls back to waiting for minPods alone. Another API error is asked
// again and, while it lasts, is the error; NotFound means no ReplicaSet.
func TestReplicaSetLookupForbidden(t *testing.T) {
	ctx := context.Background()
	pod := podSpec("shop", "cart-a", "new", nil, nil)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.5",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	k := KubeTargets{Namespace: "shop", Selector: "app=shop", PodTemplateHash: "new", Port: intstr.FromString("http")}
	const user = "system:serviceaccount:argo-rollouts:argo-rollouts"
	refuse := func(err error) *fake.Clientset {
		kube := fake.NewClientset(pod)
		kube.PrependReactor("list", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, err
		})
		return kube
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "",
		errors.New(`User "`+user+`" cannot list resource "replicasets" in API group "apps" in the namespace "shop"`))

	t.Run("Forbidden", func(t *testing.T) {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ts, err := k.Wait(wctx, refuse(forbidden), 1, 50*time.Millisecond)
		if err == nil {
			t.Fatalf("Wait = %v, nil; want the Forbidden, not a warm-up of minPods", ts)
		}
		var fe *ForbiddenError
		if !errors.As(err, &fe) || !apierrors.IsForbidden(err) {
			t.Errorf("err %v (%T): want a ForbiddenError wrapping the API's Forbidden", err, err)
		}
		for _, want := range []string{
			"list replicasets.apps in namespace shop is forbidden for " + user,
			`grant "list" on "replicasets" in apiGroup "apps"`,
			"ClusterRole danki-plugins", "deploy/rbac/clusterrole.yaml", "templates/plugins-rbac.yaml",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err %q\ndoes not say %q", err, want)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("Wait took %s: it polled on a refusal no wait changes", took)
		}
	})
	t.Run("Forbidden without a user", func(t *testing.T) {
		_, _, err := k.wantedReplicas(ctx, refuse(apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "", errors.New("no RBAC policy matched"))))
		if err == nil || !strings.Contains(err.Error(), "list replicasets.apps in namespace shop is forbidden (") || !strings.Contains(err.Error(), "no RBAC policy matched") {
			t.Errorf("err %v: want the rule and the API's own words", err)
		}
	})
	t.Run("another API error", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := k.Wait(wctx, refuse(apierrors.NewInternalError(errors.New("etcd unavailable"))), 1, 50*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "list replicasets.apps in namespace shop") || !strings.Contains(err.Error(), "etcd unavailable") {
			t.Errorf("err %v: want the failed ReplicaSets list, not a warm-up of minPods", err)
		}
	})
	t.Run("another API error, then a list cut short by the deadline", func(t *testing.T) {
		// The first list fails; the next one outlasts ctx. The answer is the
		// failed list, not "found 1 of 1 ready pods" from the pass that the
		// deadline cut between its pods and its ReplicaSets.
		kube := fake.NewClientset(pod)
		calls := 0
		kube.PrependReactor("list", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
			if calls++; calls > 1 {
				time.Sleep(400 * time.Millisecond)
			}
			return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
		})
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := k.Wait(wctx, kube, 1, 10*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "etcd unavailable") {
			t.Errorf("err %v: want the failed ReplicaSets list", err)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ts, err := k.Wait(wctx, refuse(apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "")), 1, 50*time.Millisecond)
		if err != nil || len(ts) != 1 {
			t.Errorf("Wait = %v, %v; want the one pod (no ReplicaSet: minPods decides)", ts, err)
		}
	})
	t.Run("pods list Forbidden", func(t *testing.T) {
		kube := fake.NewClientset(pod)
		kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
				errors.New(`User "`+user+`" cannot list resource "pods" in API group "" in the namespace "shop"`))
		})
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := k.Wait(wctx, kube, 1, 50*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "list pods in namespace shop is forbidden for "+user) || !strings.Contains(err.Error(), `grant "list" on "pods" in apiGroup ""`) {
			t.Errorf("err %v: want the pods rule named", err)
		}
	})
}

// TestOptionalStableLookupForbidden: stable pods the warm-up only wants
// (StableOptional: the gate's neighbours, rejectSlowerVersion's default)
// may be missing — it then judges without them — but a Forbidden on their
// lookup is a missing RBAC rule, not "no stable pods": FindTargets says so
// instead of judging every warm-up without its reference.
func TestOptionalStableLookupForbidden(t *testing.T) {
	canary := podSpec("shop", "cart-a", "new", nil, nil)
	canary.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.5",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	query := func(kube *fake.Clientset) TargetQuery {
		return TargetQuery{
			Canary:          TargetSource{Pods: KubeTargets{Namespace: "shop", Selector: "app=shop", PodTemplateHash: "new", Port: intstr.FromString("http")}},
			Stable:          TargetSource{Pods: KubeTargets{Namespace: "shop", Service: "cart-stable", Port: intstr.FromString("http")}},
			CompareToStable: true, StableOptional: true, MinPods: 1, Timeout: 5 * time.Second,
			Kube: func() (kubernetes.Interface, error) { return kube, nil },
		}
	}
	refuse := func(err error) *fake.Clientset {
		kube := fake.NewClientset(canary)
		kube.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, err
		})
		return kube
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "",
		errors.New(`User "system:serviceaccount:argo-rollouts:argo-rollouts" cannot list resource "endpointslices"`))
	c, s, err := FindTargets(context.Background(), query(refuse(forbidden)))
	var fe *ForbiddenError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "the stable pods: ") || !strings.Contains(err.Error(), "ClusterRole danki-plugins") {
		t.Errorf("canary %v, stable %v, err %v: want a ForbiddenError for the stable pods naming the rule", c, s, err)
	}
	// Another failure leaves the stable pods out, as before.
	c, s, err = FindTargets(context.Background(), query(refuse(apierrors.NewInternalError(errors.New("etcd unavailable")))))
	if err != nil || len(c) != 1 || len(s) != 0 {
		t.Errorf("canary %v, stable %v, err %v: want the canary and no stable pods", c, s, err)
	}
}
