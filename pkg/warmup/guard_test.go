package warmup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/danki-dev/danki/internal/testutil"
)

func guardPod(name, hash, ip string, uid types.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: uid,
			Labels: map[string]string{"app": "cart", PodTemplateHashLabel: hash}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

func guardTarget(name, ip string) Target {
	return Target{Name: name, URL: "http://" + ip + ":8080"}
}

var quietGuardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func mustAllow(t *testing.T, g *PodGuard, ip string) {
	t.Helper()
	if err := g.Check(netip.MustParseAddr(ip)); err != nil {
		t.Fatalf("Check(%s): %v; want allowed", ip, err)
	}
}

func mustRefuse(t *testing.T, g *PodGuard, ip, want string) {
	t.Helper()
	err := g.Check(netip.MustParseAddr(ip))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Check(%s) = %v; want refused saying %q", ip, err, want)
	}
}

func TestPodGuardRefusesPodsThatAreGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset(
		guardPod("cart-h1-a", "h1", "10.0.0.1", "a1"),
		guardPod("cart-h1-b", "h1", "10.0.0.2", "b1"),
		guardPod("cart-h1-c", "h1", "10.0.0.3", "c1"),
		guardPod("cart-h0-s", "h0", "10.0.1.1", "s1"),
		// Another app's pod with the same hash label: not the Rollout's.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other", UID: "o1",
			Labels: map[string]string{"app": "other", PodTemplateHashLabel: "h1"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9"}},
	)
	q := PodGuardQuery{Namespace: "shop", Selector: "app=cart", Hashes: []string{"h1", "h0"}}
	pods := []Target{guardTarget("cart-h1-a", "10.0.0.1"), guardTarget("cart-h1-b", "10.0.0.2"), guardTarget("cart-h1-c", "10.0.0.3"),
		guardTarget("cart-h0-s", "10.0.1.1"), guardTarget("other", "10.0.0.9")}
	urls := []Target{{Name: "192.0.2.7:80", URL: "http://192.0.2.7:80"}}
	// A refresh interval far beyond the test: refreshes are explicit.
	g, err := NewPodGuard(ctx, kube, q, pods, urls, time.Hour, quietGuardLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1", "192.0.2.7", "::ffff:10.0.0.1"} {
		mustAllow(t, g, ip)
	}
	mustRefuse(t, g, "10.0.0.9", "not among the pods")           // matches the hash, not the Rollout's selector
	mustRefuse(t, g, "10.0.0.4", "not a target pod of this run") // never a target

	pods1 := kube.CoreV1().Pods("shop")
	// a: deleted, its IP handed to a new pod of the same ReplicaSet.
	if err := pods1.Delete(ctx, "cart-h1-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods1.Create(ctx, guardPod("cart-h1-z", "h1", "10.0.0.1", "z1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// b: deleted and created again under its name (another UID).
	if err := pods1.Delete(ctx, "cart-h1-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods1.Create(ctx, guardPod("cart-h1-b", "h1", "10.0.0.2", "b2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// c: terminating.
	c, _ := pods1.Get(ctx, "cart-h1-c", metav1.GetOptions{})
	now := metav1.Now()
	c.DeletionTimestamp = &now
	if _, err := pods1.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the next refresh the guard answers from what it read.
	mustAllow(t, g, "10.0.0.1")
	if err := g.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, g, "10.0.0.1", "pod shop/cart-h1-a is gone")
	mustRefuse(t, g, "10.0.0.2", "pod shop/cart-h1-b was replaced (UID b2, was b1)")
	mustRefuse(t, g, "10.0.0.3", "pod shop/cart-h1-c is terminating")
	mustAllow(t, g, "10.0.1.1")  // the stable pod is still there
	mustAllow(t, g, "192.0.2.7") // explicit URLs are no pods
	if got := g.Allowed(); len(got) != 2 {
		t.Errorf("Allowed() = %v; want the stable pod and the URL", got)
	}
}

// The loop re-reads the pods by itself, and a guard that cannot read them
// for guardStaleAfter refreshes refuses every pod address.
func TestPodGuardRefreshesAndFailsClosed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset(guardPod("cart-h1-a", "h1", "10.0.0.1", "a1"), guardPod("cart-h1-b", "h1", "10.0.0.2", "b1"))
	// The API server goes away when away is set (reactors are installed
	// before the guard lists: the fake's reactor chain is not safe to
	// change while it is used).
	var away atomic.Bool
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if away.Load() {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	q := PodGuardQuery{Namespace: "shop", Selector: "app=cart", Hashes: []string{"h1"}}
	g, err := NewPodGuard(ctx, kube, q, []Target{guardTarget("cart-h1-a", "10.0.0.1"), guardTarget("cart-h1-b", "10.0.0.2")}, nil, 10*time.Millisecond, quietGuardLog)
	if err != nil {
		t.Fatal(err)
	}
	mustAllow(t, g, "10.0.0.1")
	if err := kube.CoreV1().Pods("shop").Delete(ctx, "cart-h1-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.Check(netip.MustParseAddr("10.0.0.1")) != nil })
	mustAllow(t, g, "10.0.0.2")

	away.Store(true)
	testutil.WaitFor(t, 5*time.Second, func() bool { return g.Check(netip.MustParseAddr("10.0.0.2")) != nil })
	mustRefuse(t, g, "10.0.0.2", "could not be read from the API server")
}

// A target whose pod is already gone when the guard starts is never
// allowed; a guard that cannot read the pods at all fails to start.
func TestPodGuardStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := fake.NewClientset(guardPod("cart-h1-a", "h1", "10.0.0.1", "a1"), guardPod("cart-h1-new", "h1", "10.0.0.2", "n1"))
	q := PodGuardQuery{Namespace: "shop", Selector: "app=cart", Hashes: []string{"h1"}}
	g, err := NewPodGuard(ctx, kube, q, []Target{guardTarget("cart-h1-a", "10.0.0.1"), guardTarget("cart-h1-old", "10.0.0.2")}, nil, time.Hour, quietGuardLog)
	if err != nil {
		t.Fatal(err)
	}
	mustAllow(t, g, "10.0.0.1")
	mustRefuse(t, g, "10.0.0.2", "pod shop/cart-h1-old with address 10.0.0.2 is not among")

	// Without the right to list pods, the error names the rule to grant.
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "system:serviceaccount:argo-rollouts:argo-rollouts" cannot list resource "pods"`))
	})
	_, err = NewPodGuard(ctx, kube, q, []Target{guardTarget("cart-h1-a", "10.0.0.1")}, nil, time.Hour, quietGuardLog)
	var fe *ForbiddenError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), `grant "list" on "pods"`) || !strings.Contains(err.Error(), "pin the run's pods") {
		t.Fatalf("NewPodGuard without pod access: %v; want a ForbiddenError naming the rule and why", err)
	}
}
