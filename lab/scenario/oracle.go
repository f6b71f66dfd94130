package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Oracle is the warm-up length that hindsight gives: a fresh sample-app pod
// loaded with many requests at the warm-up's pace, and the request count
// after which its latency stopped improving.
type Oracle struct {
	Requests int `json:"requests"` // sent in all
	// WarmAfter is the request count after which every later window of
	// Window requests stays within the plateau (the last 10 windows'
	// median): p50 within Tolerance, p99 within 2 × Tolerance, each judged
	// by the median of 5 neighbouring windows.
	WarmAfter  int           `json:"warmAfter"`
	Window     int           `json:"window"`
	Tolerance  float64       `json:"tolerance"`
	PlateauP50 time.Duration `json:"plateauP50"`
	PlateauP99 time.Duration `json:"plateauP99"`
	// Curve is the field reports' table: requests so far vs latency.
	Curve []traffic.WarmupBucket `json:"curve"`
}

// MeasureOracle starts a standalone sample-app pod (not behind the
// Services), sends it n requests at qps over conns connections, straight
// at its pod IP like danki's warm-up, and finds where it stopped improving.
func MeasureOracle(ctx context.Context, kubeconfig string, n int, qps float64, conns int) (*Oracle, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	pod := &corev1.Pod{
		// No sidecar, whatever LAB_MESH: the oracle is the JVM's own warm-up
		// curve (the field reports' table), and its fortio client speaks no
		// Istio mTLS (a STRICT sidecar would reset it).
		ObjectMeta: metav1.ObjectMeta{Name: "warmup-oracle", Namespace: "default", Labels: map[string]string{"app": "warmup-oracle"},
			Annotations: map[string]string{"sidecar.istio.io/inject": "false"}},
		Spec: corev1.PodSpec{
			NodeName: "danki-lab-node",
			Containers: []corev1.Container{{
				Name: "app", Image: "danki.dev/sample-app:oracle",
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 2},
			}},
		},
	}
	pods := kube.CoreV1().Pods("default")
	_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{})
	if err := wait(ctx, time.Minute, "the previous oracle pod to go", func() (bool, error) {
		_, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		return nil, err
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the oracle pod: %w", err)
	}
	defer func() { _ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) }()
	var ip string
	if err := wait(ctx, 2*time.Minute, "the oracle pod ready", func() (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if podConditionTrue(p, corev1.PodReady) {
			ip = p.Status.PodIP
			return true, nil
		}
		return false, nil
	}); err != nil {
		return nil, err
	}
	tr, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: "http://" + ip + ":8080/", QPS: qps, Connections: conns})
	if err != nil {
		return nil, err
	}
	for tr.Count() < n {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			tr.Stop()
			return nil, err
		}
	}
	res := tr.Stop()
	o := findPlateau(res.Samples, 100, 0.2)
	return o, nil
}

// findPlateau computes the oracle from samples in request order.
func findPlateau(samples []traffic.Sample, window int, tol float64) *Oracle {
	o := &Oracle{Requests: len(samples), Window: window, Tolerance: tol, Curve: traffic.WarmupCurve(samples)}
	var p50, p99 []time.Duration
	for i := 0; i+window <= len(samples); i += window {
		lat := make([]time.Duration, window)
		for j, s := range samples[i : i+window] {
			lat[j] = s.Latency
		}
		slices.Sort(lat)
		p50 = append(p50, lat[window/2-1])
		p99 = append(p99, lat[window*99/100-1])
	}
	if len(p50) < 10 {
		return o
	}
	median := func(d []time.Duration) time.Duration {
		c := slices.Clone(d)
		slices.Sort(c)
		return c[len(c)/2]
	}
	o.PlateauP50, o.PlateauP99 = median(p50[len(p50)-10:]), median(p99[len(p99)-10:])
	limit50 := time.Duration(float64(o.PlateauP50) * (1 + tol))
	limit99 := time.Duration(float64(o.PlateauP99) * (1 + 2*tol))
	// Judge each window by the median of it and its neighbours (5 windows):
	// a GC pause or a scheduler hiccup in one or two windows is noise, not
	// a cold pod. Walk back from the end: the last window still out of
	// line marks where warm begins.
	smooth := func(d []time.Duration, i int) time.Duration {
		return median(d[max(0, i-2):min(len(d), i+3)])
	}
	warm := 0
	for i := len(p50) - 1; i >= 0; i-- {
		if smooth(p50, i) > limit50 || smooth(p99, i) > limit99 {
			warm = i + 1
			break
		}
	}
	o.WarmAfter = warm * window
	return o
}
