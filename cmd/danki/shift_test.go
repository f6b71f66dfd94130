package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"istio.io/client-go/pkg/clientset/versioned/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func shiftVS() *networkingv1.VirtualService {
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop"}}
	vs.Spec.Hosts = []string{"reviews"}
	d := func(host string, w int32) *networking.HTTPRouteDestination {
		return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Port: &networking.PortSelector{Number: 8080}}, Weight: w}
	}
	vs.Spec.Http = []*networking.HTTPRoute{
		{Name: "other", Route: []*networking.HTTPRouteDestination{d("ratings", 100)}},
		{Name: "primary", Route: []*networking.HTTPRouteDestination{d("reviews-stable", 100), d("reviews-canary", 0)}},
	}
	return vs
}

// runShift runs `danki shift ARGS` against a fake Istio clientset.
func runShift(t *testing.T, client istioclient.Interface, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithIstio(t, client, append([]string{"shift"}, args...)...)
}

// runWithIstio runs `danki ARGS` with client as the Istio API.
func runWithIstio(t *testing.T, client istioclient.Interface, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	saved := newIstioClient
	newIstioClient = func(*shiftOptions) (istioclient.Interface, error) { return client, nil }
	t.Cleanup(func() { newIstioClient = saved })
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

var hostFlags = []string{"-n", "shop", "--virtual-service", "reviews", "--stable-host", "reviews-stable", "--canary-host", "reviews-canary"}

func canaryWeightOf(t *testing.T, client istioclient.Interface) int32 {
	t.Helper()
	vs, err := client.NetworkingV1().VirtualServices("shop").Get(context.Background(), "reviews", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vs.Spec.Http[1].Route[1].Weight
}

func TestShiftSetAndGet(t *testing.T) {
	client := fake.NewSimpleClientset(shiftVS())
	out, _, err := runShift(t, client, append([]string{"set", "--canary-weight", "25"}, hostFlags...)...)
	if err != nil {
		t.Fatal(err)
	}
	if out != "VirtualService shop/reviews: canary 25%, stable 75%\n" {
		t.Fatalf("set printed %q", out)
	}
	if w := canaryWeightOf(t, client); w != 25 {
		t.Fatalf("canary weight %d, want 25", w)
	}
	out, _, err = runShift(t, client, append([]string{"get"}, hostFlags...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"VirtualService shop/reviews  canary weight 25%",
		"KIND  ROUTE        MANAGED  DESTINATION          ROLE    WEIGHT",
		"http  [0] other    -        ratings:8080         other   100",
		"http  [1] primary  primary  reviews-stable:8080  stable  75",
		"http  [1] primary  primary  reviews-canary:8080  canary  25",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Fatalf("get output lacks %q:\n%s", want, out)
		}
	}
	// Without roles, get still prints the table.
	out, _, err = runShift(t, client, "get", "-n", "shop", "--virtual-service", "reviews")
	if err != nil || !strings.Contains(out, "reviews-canary:8080  -     25") {
		t.Fatalf("role-less get: %v\n%s", err, out)
	}
}

func TestShiftRampReachesTheTargetWithProgress(t *testing.T) {
	client := fake.NewSimpleClientset(shiftVS())
	out, errOut, err := runShift(t, client, append([]string{"ramp", "--canary-weight", "60", "--weights", "10,30", "--interval", "0", "--poll", "1ms"}, hostFlags...)...)
	if err != nil {
		t.Fatalf("ramp: %v\n%s", err, errOut)
	}
	if w := canaryWeightOf(t, client); w != 60 {
		t.Fatalf("canary weight %d after ramp, want 60", w)
	}
	var moves []string
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if strings.Contains(line, "move") {
			moves = append(moves, line)
		}
	}
	if len(moves) != 3 || !strings.Contains(moves[0], "0% →  10%") || !strings.Contains(moves[2], "30% →  60%") {
		t.Fatalf("progress lines:\n%s", errOut)
	}
	if !strings.Contains(out, "VirtualService shop/reviews: canary at 60% (reached 60%, gate passes)") {
		t.Fatalf("ramp printed %q", out)
	}
}

func TestShiftFlagErrors(t *testing.T) {
	client := fake.NewSimpleClientset(shiftVS())
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"set", "--canary-weight", "10", "-n", "shop"}, "--virtual-service: required"},
		{[]string{"set", "-n", "shop", "--virtual-service", "reviews", "--canary-weight", "10"}, "--stable-host and --canary-host (host-level routing) or --destination-rule"},
		{append([]string{"set"}, hostFlags...), "--canary-weight: required"},
		{append([]string{"set", "--canary-weight", "10", "--destination-rule", "reviews"}, hostFlags...), "use one (host-level or subset-level routing)"},
		{append([]string{"set", "--canary-weight", "10", "--route", "nope"}, hostFlags...), `http route "nope"`},
		{append([]string{"set", "--canary-weight", "10", "--tls-route", "x:y"}, hostFlags...), `--tls-route "x:y"`},
		{append([]string{"ramp", "--canary-weight", "10", "--weights", "30,20"}, hostFlags...), "--weights[1]: 20 must be greater than weights[0] = 30"},
		{append([]string{"ramp", "--canary-weight", "10", "--max-hold", "-1s"}, hostFlags...), "--max-hold: must be positive, got -1s"},
		{append([]string{"ramp", "--canary-weight", "10", "--step", "5", "--weights", "30"}, hostFlags...), "--step and --weights: set one of them"},
	}
	for _, c := range cases {
		_, _, err := runShift(t, client, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("danki shift %v: error %v, want it to mention %q", c.args, err, c.want)
		}
	}
	if w := canaryWeightOf(t, client); w != 0 {
		t.Fatalf("a refused command changed the weight to %d", w)
	}
}

// TestShiftGateConfigJSONOrYAML: --gate-config takes the danki/latency
// config as JSON or YAML; errors name the file and the field.
func TestShiftGateConfigJSONOrYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for name, text := range map[string]string{
		"gate.json": `{"source":"envoy","prometheus":{"address":"http://p:9090"},"envoy":{"canaryCluster":"c"},"slo":{"p99":"100ms"}}`,
		"gate.yaml": "source: envoy\nprometheus:\n  address: http://p:9090\nenvoy:\n  canaryCluster: c\nslo:\n  p99: 100ms\n",
	} {
		g := gateOptions{configFile: write(name, text)}
		if gate, err := g.gate(); err != nil || gate == nil {
			t.Errorf("%s: gate %v, %v; want a gate", name, gate, err)
		}
	}
	bad := write("bad.yaml", "source: envoy\nslo:\n  p99: 100ms\n  p99: 200ms\n")
	if _, err := (&gateOptions{configFile: bad}).gate(); err == nil || !strings.Contains(err.Error(), "--gate-config "+bad) || !strings.Contains(err.Error(), "not valid YAML") {
		t.Errorf("duplicate YAML key: %v, want an error naming the file", err)
	}
	// YAML goes through the same strict decoder as JSON: a typo names its
	// field path.
	typo := write("typo.yaml", "source: envoy\nslo:\n  p99x: 100ms\n")
	if _, err := (&gateOptions{configFile: typo}).gate(); err == nil || !strings.Contains(err.Error(), "--gate-config "+typo) || !strings.Contains(err.Error(), "slo.p99x: unknown field") {
		t.Errorf("misspelt YAML field: %v, want an error naming the file and slo.p99x", err)
	}
}

// TestShiftWithACorruptRampAnnotation: `shift get` shows what is wrong
// instead of failing, and `shift ramp --canary-weight 0` still aborts.
func TestShiftWithACorruptRampAnnotation(t *testing.T) {
	vs := shiftVS()
	vs.Spec.Http[1].Route[0].Weight, vs.Spec.Http[1].Route[1].Weight = 60, 40
	vs.Spec.Http[0].Route[0].Weight = 0 // a lone destination: Istio sends it everything
	vs.Annotations = map[string]string{"danki.dev/ramp": "{not json"}
	client := fake.NewSimpleClientset(vs)
	out, _, err := runShift(t, client, append([]string{"get"}, hostFlags...)...)
	if err != nil {
		t.Fatalf("get with a corrupt ramp annotation: %v", err)
	}
	for _, want := range []string{"canary weight 40%", "ramp state: annotation danki.dev/ramp", "http  [0] other    -        ratings:8080         other   100"} {
		if !strings.Contains(out, want) {
			t.Fatalf("get output lacks %q:\n%s", want, out)
		}
	}
	if _, errOut, err := runShift(t, client, append([]string{"ramp", "--canary-weight", "0"}, hostFlags...)...); err != nil {
		t.Fatalf("ramp --canary-weight 0 with a corrupt ramp annotation: %v\n%s", err, errOut)
	}
	if w := canaryWeightOf(t, client); w != 0 {
		t.Fatalf("canary weight %d after the abort, want 0", w)
	}
}

// TestShiftRefusesBadFlagValuesBeforeAnyAPICall: an out-of-range weight is
// a typo, not a question for the cluster: it is refused, naming the flag
// and the fix, before the Istio client is even built.
func TestShiftRefusesBadFlagValuesBeforeAnyAPICall(t *testing.T) {
	saved := newIstioClient
	t.Cleanup(func() { newIstioClient = saved })
	called := 0
	newIstioClient = func(*shiftOptions) (istioclient.Interface, error) {
		called++
		return fake.NewSimpleClientset(shiftVS()), nil
	}
	cases := []struct {
		args []string
		want []string
	}{
		{append([]string{"set", "--canary-weight", "150"}, hostFlags...), []string{"--canary-weight 150", "0", "100"}},
		{append([]string{"set", "--canary-weight", "-1"}, hostFlags...), []string{"--canary-weight -1", "0", "100"}},
		{append([]string{"ramp", "--canary-weight", "150"}, hostFlags...), []string{"--canary-weight 150", "0", "100"}},
		{append([]string{"ramp", "--canary-weight", "-5"}, hostFlags...), []string{"--canary-weight -5", "0", "100"}},
		{append([]string{"ramp", "--canary-weight", "50", "--poll", "-1s"}, hostFlags...), []string{"--poll -1s", "positive"}},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		root := newRootCmd()
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"shift"}, c.args...))
		err := root.Execute()
		if err == nil {
			t.Errorf("danki shift %v: no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("danki shift %v: error %q does not mention %q", c.args, err, w)
			}
		}
	}
	if called != 0 {
		t.Fatalf("the Istio client was built %d times for flags that were refused", called)
	}
}
