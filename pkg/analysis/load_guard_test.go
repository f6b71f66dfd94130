package analysis

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/pkg/policy"
)

// A source: load measurement pins the pods it found: once its pod is
// deleted (its address free for another pod), no new connection goes there.
// The server closes every connection, so each request needs a new dial.
func TestLoadSourceStopsLoadingADeletedPod(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Connection", "close")
	}))
	t.Cleanup(srv.Close)
	_, portText, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-1", Namespace: "shop", UID: "uid-1", Labels: map[string]string{"app": "app"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	kube := kubefake.NewClientset(pod)
	cfg, err := ParseConfig([]byte(`{"source": "load", "load": {"selector": "app=app", "namespace": "shop", "port": "http",
		"duration": "40s", "qps": 20, "connections": 1, "warmUp": false}, "slo": {"maxErrorRate": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAnalyzer(cfg, WithLogger(quietLoadLog), WithPolicy(policy.Local()),
		WithKube(func() (kubernetes.Interface, error) { return kube, nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.source.Fetch(ctx, 0)
	}()
	waitUntil(t, 10*time.Second, "the measurement to load the pod", func() bool { return requests.Load() >= 10 })
	if err := kube.CoreV1().Pods("shop").Delete(context.Background(), "app-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The guard reads the pods again within warmup.GuardRefresh; from then
	// on the count stands still.
	var last int64 = -1
	waitUntil(t, 20*time.Second, "the deleted pod's load to stop", func() bool {
		now := requests.Load()
		still := now == last
		last = now
		return still
	})
	stopped := requests.Load()
	time.Sleep(2 * time.Second)
	if got := requests.Load(); got != stopped {
		t.Fatalf("%d requests after the load had stopped at %d: the deleted pod still gets load", got-stopped, stopped)
	}
	cancel()
	<-done
}

// waitUntil polls cond every second until it holds, failing after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(time.Second)
	}
}
