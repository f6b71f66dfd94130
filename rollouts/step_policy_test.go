package rollouts

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/danki-dev/danki/pkg/policy"
	"github.com/danki-dev/danki/pkg/warmup"
)

// TestUsersOnStableHeldToThePolicy: the warm-up's neighbour guard reads
// the users' latency on stable through the Rollout's gate config, a
// tenant's: a foreign Prometheus is not watched (and not queried), and the
// gate's bearerTokenSecret is the Rollout namespace's.
func TestUsersOnStableHeldToThePolicy(t *testing.T) {
	evil, allowed := latencyProm(t), latencyProm(t)
	gate := func(address, extra string) string {
		return `{"virtualService": {"name": "reviews"}, "gate": {"source": "istio",
		  "prometheus": {"address": "` + address + `"` + extra + `},
		  "istio": {"canary": {"service": "app-canary.default.svc.cluster.local"}, "stable": {"service": "app-stable.default.svc.cluster.local"}},
		  "slo": {"p99": "250ms"}}}`
	}
	s := newTestWarmupStep(t)
	s.step.Policy = policy.Policy{Prometheus: []policy.Prometheus{{Address: allowed.URL}}}
	kube := kubefake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom", Namespace: trNS}, Data: map[string][]byte{"token": []byte("shop-token")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom", Namespace: "kube-system"}, Data: map[string][]byte{"token": []byte("admin-token")}})
	s.kube = kube
	cfg := warmup.Config{}.WithDefaults()

	if sig := s.step.UsersOnStable(s.rollout(trRollout(gate(evil.URL, ""))), cfg); sig != nil {
		_, err := sig.Latency(context.Background())
		t.Errorf("a foreign Prometheus is watched (err %v)", err)
	}
	if sig := s.step.UsersOnStable(s.rollout(trRollout(gate(allowed.URL, `, "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"`))), cfg); sig != nil {
		t.Error("a gate naming the controller's token file is watched")
	}
	if n := len(evil.Queries()); n != 0 {
		t.Fatalf("the foreign Prometheus got %d queries", n)
	}

	sig := s.step.UsersOnStable(s.rollout(trRollout(gate(allowed.URL, `, "bearerTokenSecret": {"name": "prom", "key": "token"}`))), cfg)
	if sig == nil {
		t.Fatal("the allowed Prometheus is not watched")
	}
	if _, err := sig.Latency(context.Background()); err != nil && !strings.Contains(err.Error(), "stable requests") {
		t.Fatalf("Latency: %v", err)
	}
	auth := allowed.Authorizations()
	if len(auth) == 0 {
		t.Fatal("nothing queried")
	}
	for _, a := range auth {
		if a != "Bearer shop-token" {
			t.Fatalf("Authorization %q, want the Rollout namespace's Secret", a)
		}
	}
}
