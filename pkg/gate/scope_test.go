package gate_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/danki-dev/danki/pkg/gate"
	"github.com/danki-dev/danki/pkg/wellknown"
)

// testCABundlePatched: the webhook configuration trusted another CA when
// the gate started; the gate (as its ServiceAccount) patched it to trust its
// own, so the API server's calls get through.
func testCABundlePatched(t *testing.T, ctx context.Context, kube kubernetes.Interface, certDir string, stale []byte) {
	waitWebhook(t, ctx, kube)
	ours, err := gate.ReadCerts(certDir)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := wh.Webhooks[0].ClientConfig.CABundle
	if !bytes.HasPrefix(got, ours.CABundle) {
		t.Fatalf("caBundle does not start with the gate's CA:\n%s", got)
	}
	if !bytes.Contains(got, stale) {
		t.Fatal("the other CA, still valid, was dropped from the caBundle (another replica's)")
	}
}

// webhookCalls counts the admission requests the gate's webhook answered
// (controller-runtime's metric, in this process).
func webhookCalls(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == gate.WebhookPath {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// testWebhookScope: the API server sends the webhook only pods that opted
// in (matchConditions) outside excluded namespaces (namespaceSelector);
// every pod it gates, those gated by their template too, gets wellknown.GatedLabel.
func testWebhookScope(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	before := webhookCalls(t)
	createPod(t, ctx, kube, "scope-plain", "", 8080)
	createPod(t, ctx, kube, "scope-opted-out", "false", 8080)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "tenant-off", Labels: map[string]string{wellknown.WarmGateNamespaceLabel: "disabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	excluded := newPod("scope-excluded", "true", 8080)
	excluded.Namespace = "tenant-off"
	off, err := kube.CoreV1().Pods("tenant-off").Create(ctx, excluded, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gate.HasGate(off) {
		t.Fatal("a pod in a namespace labelled danki.dev/warm-gate=disabled was gated")
	}
	// One opted-in pod: the webhook's count rises by exactly one. Had any
	// pod above been sent, its call (answered before that pod was even
	// stored) would show too.
	on := createPod(t, ctx, kube, "scope-on", "true", 8080)
	if !gate.HasGate(on) || on.Labels[wellknown.GatedLabel] != "true" {
		t.Fatalf("opted-in pod: gate %v, labels %v", gate.HasGate(on), on.Labels)
	}
	deadline := time.Now().Add(10 * time.Second)
	for webhookCalls(t) < before+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := webhookCalls(t) - before; got != 1 {
		t.Fatalf("the webhook answered %g admission requests for four pods of which one opted in; want 1", got)
	}
	// A pod whose template lists the gate, without the annotation, is sent
	// too: it gets the label the cache selects on.
	hand := newPod("scope-hand-gated", "", 8080)
	hand.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}}
	got, err := kube.CoreV1().Pods(ns).Create(ctx, hand, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[wellknown.GatedLabel] != "true" {
		t.Fatalf("a pod gated by its template was not labelled %s: %v", wellknown.GatedLabel, got.Labels)
	}
}

// testCacheScope: the gate's cache (the reconciler's client reads from it)
// holds the gated pods, stripped of managedFields, and no other pod.
func testCacheScope(t *testing.T, ctx context.Context, kube kubernetes.Interface, r *gate.Reconciler) {
	plain := createPod(t, ctx, kube, "cache-plain", "", 8080)
	// A pod with the gate but not the label (made while the webhook was
	// down, say): not the gate's to see.
	unlabelled := newPod("cache-unlabelled", "", 8080)
	unlabelled.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: wellknown.WarmCondition}}
	unlabelled.Namespace = "tenant-off" // the webhook does not see this namespace
	if _, err := kube.CoreV1().Pods("tenant-off").Create(ctx, unlabelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gated := createPod(t, ctx, kube, "cache-gated", "true", 8080)
	// Events reach the cache in order: once the gated pod (created last)
	// is there, the others would be too.
	var cached corev1.Pod
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(gated), &cached)
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("gated pod not in the gate's cache: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(cached.ManagedFields) != 0 {
		t.Fatalf("cached pod keeps %d managedFields entries", len(cached.ManagedFields))
	}
	for _, p := range []*corev1.Pod{plain, unlabelled} {
		var got corev1.Pod
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(p), &got)
		if !apierrors.IsNotFound(err) {
			t.Fatalf("pod %s/%s read from the gate's cache (err %v): the cache holds pods that are not gated", p.Namespace, p.Name, err)
		}
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Labels[wellknown.GatedLabel] != "true" {
			t.Fatalf("the gate's cache lists %s/%s, not labelled %s", p.Namespace, p.Name, wellknown.GatedLabel)
		}
	}
}

// testWebhookConfigRBAC: the ServiceAccount may read and patch its own
// webhook configuration and no other.
func testWebhookConfigRBAC(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	for _, tc := range []struct {
		name, verb string
		want       bool
	}{
		{webhookConfig, "patch", true}, {webhookConfig, "get", true},
		{"someone-elses", "patch", false}, {"someone-elses", "get", false}, {"", "list", false}, {webhookConfig, "delete", false},
	} {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:danki-gate:danki-gate", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:danki-gate", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: tc.name, Verb: tc.verb},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.want {
			t.Errorf("%s mutatingwebhookconfigurations %q: allowed %v, want %v", tc.verb, tc.name, sar.Status.Allowed, tc.want)
		}
	}
}
