package runner

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A host-network pod mounting its kube-api-access volume gets, as from a
// kubelet, a token of its ServiceAccount bound to it, the cluster's CA and
// its namespace at the fixed in-cluster path (in a mount namespace of its
// own: the host's directory stays empty), the in-cluster environment and a
// working directory of its own, removed when it stops. A pod on the pod
// network (no route to the API server) gets neither.
func TestRunnerGivesHostNetworkPodsTheirServiceAccount(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes (skipped with -short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("bind-mounts in a mount namespace of its own: needs root (make test runs as root)")
	}
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	const node = "lab-node"
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{PodCIDR: "127.78.0.0/24"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "ops"}, Data: map[string]string{"ca.crt": "CA-PEM"}})
	var requested []string
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := a.(k8stesting.CreateAction)
		if c.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := c.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		ref := tr.Spec.BoundObjectRef
		requested = append(requested, c.GetNamespace()+"/"+a.(k8stesting.CreateActionImpl).Name+" bound to "+ref.Kind+" "+ref.Name)
		tr.Status.Token = "token-of-" + ref.Name
		return true, tr, nil
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	r, err := New(Config{
		Client: client, Node: node, Network: Loopback{}, LogDir: t.TempDir(), HostIP: "127.78.0.1",
		Images: ImageCommands{"test.local/app": {self}}, StopGrace: 2 * time.Second, ProbeEvery: 50 * time.Millisecond,
		NoCgroups: true, WorkDir: work, APIServer: "127.0.0.1:16443", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runInBackground(t, r)
	mk := func(name string, port int32, hostNetwork bool) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ops", UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork, ServiceAccountName: "controller",
				Volumes: []corev1.Volume{{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
				Containers: []corev1.Container{{
					Name: "app", Image: "test.local/app:v1",
					Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
					Env:          []corev1.EnvVar{{Name: "LABRUNNER_TEST_SERVE", Value: "1"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x", MountPath: ServiceAccountMountPath}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/healthz", Port: intstr.FromString("http")}}},
				}}},
		}
		if _, err := client.CoreV1().Pods("ops").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("controller", 18088, true)
	mk("app", 18089, false)
	ctrl := waitReadyIn(t, ctx, client, "ops", "controller")
	if ctrl.Status.PodIP != "127.78.0.1" {
		t.Errorf("host-network pod IP %s, want the host's 127.78.0.1", ctrl.Status.PodIP)
	}
	podDir := filepath.Join(work, "ops_controller")
	want := "host=127.0.0.1 port=16443 home=" + podDir + " wd=" + podDir +
		" token=token-of-controller namespace=ops ca=CA-PEM"
	if got := get(t, "http://127.78.0.1:18088/in-cluster"); got != want {
		t.Errorf("the host-network pod sees\n  %s\nwant\n  %s", got, want)
	}
	if len(requested) != 1 || requested[0] != "ops/controller bound to Pod controller" {
		t.Errorf("token requests %v, want one for ops/controller bound to its pod", requested)
	}
	if _, err := os.Stat(filepath.Join(ServiceAccountMountPath, "token")); err == nil {
		t.Errorf("the host's %s has a token: the bind mount leaked out of the pod's mount namespace", ServiceAccountMountPath)
	}
	app := waitReadyIn(t, ctx, client, "ops", "app")
	got := get(t, "http://"+app.Status.PodIP+":18089/in-cluster")
	if !strings.HasPrefix(got, "host= port= ") || !strings.Contains(got, "token=none") {
		t.Errorf("a pod-network pod (no route to the API server) sees %q: want no in-cluster environment or token", got)
	}
	if err := client.CoreV1().Pods("ops").Delete(ctx, "controller", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(podDir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped pod's working dir %s is still there", podDir)
		}
	}
}

func waitReadyIn(t *testing.T, ctx context.Context, client *fake.Clientset, ns, name string) *corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return p
			}
		}
	}
	t.Fatalf("pod %s/%s not Ready after 30 s", ns, name)
	return nil
}
