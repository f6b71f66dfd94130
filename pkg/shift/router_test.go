package shift

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func testScope() Scope {
	return Scope{Namespace: ns, StableHost: "reviews-stable", CanaryHost: "reviews-canary", ManagedRoutes: []string{"canary-header"},
		ConfigField: "cfg", HostsField: "services"}
}

func TestBind(t *testing.T) {
	b, err := Bind([]byte("virtualService:\n  name: reviews\n  routes: [primary]\nramp:\n  interval: 0s\ngate:\n  source: envoy\n"), testScope())
	if err != nil {
		t.Fatalf("YAML config: %v", err)
	}
	want := Target{Namespace: ns, VirtualService: "reviews", HTTPRoutes: []string{"primary"}, StableHost: "reviews-stable", CanaryHost: "reviews-canary", ManagedRoutes: []string{"canary-header"}}
	if b.Target.String() != want.String() || b.Target.StableHost != want.StableHost || b.Target.ManagedRoutes[0] != "canary-header" || b.Target.HTTPRoutes[0] != "primary" {
		t.Errorf("target %+v, want %+v", b.Target, want)
	}
	if b.Plan.Interval != 0 || b.Plan.Step != DefaultStep || b.Plan.MaxHold != DefaultMaxHold || !strings.Contains(string(b.Gate), "envoy") {
		t.Errorf("plan %+v gate %s: want interval 0s kept, defaults filled in, the gate's raw config", b.Plan, b.Gate)
	}
	if e := b.Extra("reviews-exp", 10); e.Host != "reviews-exp" || e.Subset != "" {
		t.Errorf("host-level extra %+v", e)
	}
	b, err = Bind([]byte(`{"virtualService": {"name": "reviews", "namespace": "mesh"}, "destinationRule": {"name": "reviews", "stableSubsetName": "stable", "canarySubsetName": "canary"}}`), Scope{Namespace: ns, ConfigField: "cfg", OtherNamespaces: []string{"mesh"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Target.Namespace != "mesh" || b.Target.Subsets.Namespace != ns || b.Plan.Interval != DefaultInterval {
		t.Errorf("subset-level target %+v plan %+v", b.Target, b.Plan)
	}
	if e := b.Extra("exp", 10); e.Subset != "exp" || e.Host != "" {
		t.Errorf("subset-level extra %+v", e)
	}
	for _, c := range []struct{ raw, want string }{
		{"", "cfg: missing"},
		{`{"virtualService": {"name": "reviews"}, "rampp": {}}`, "cfg.rampp: unknown field"},
		{`{"ramp": {"step": 150}}`, "cfg.virtualService.name: required\ncfg.ramp.step: must be 1–100"},
		{`{"virtualService": {"name": "reviews"}, "destinationRule": {"name": "reviews"}}`, "cfg.destinationRule: name, canarySubsetName and stableSubsetName are all required"},
		// Another team's VirtualService: refused unless the operator allows
		// its namespace.
		{`{"virtualService": {"name": "payments", "namespace": "payments"}}`, `cfg.virtualService.namespace: "payments" is not the Rollout's namespace`},
	} {
		if _, err := Bind([]byte(c.raw), testScope()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Bind(%s) = %v, want %q", c.raw, err, c.want)
		}
	}
	if _, err := Bind([]byte(`{"virtualService": {"name": "reviews"}}`), Scope{Namespace: ns, ConfigField: "cfg", HostsField: "services"}); err == nil || !strings.HasPrefix(err.Error(), "services: both required") {
		t.Errorf("no hosts: %v, want the hosts' field named", err)
	}
}

// rolloutLog records a Router's events and aborts.
type rolloutLog struct {
	mu       sync.Mutex
	events   []string
	aborts   int
	abortErr error
}

func (l *rolloutLog) Warn(_ context.Context, reason, msg string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, reason+": "+msg)
	return nil
}

func (l *rolloutLog) Abort(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.aborts++
	return l.abortErr
}

func TestRouterAbortsAFailedRampWithAnEvent(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	r := NewRouter("danki/istio", nil)
	r.Now = c.Now
	var gateRaw string
	r.GateFor = func(raw json.RawMessage) (Gate, error) {
		gateRaw = string(raw)
		return &scriptedGate{answers: []verdict{breach}}, nil
	}
	if err := r.SetWeight(context.Background(), Rollout{Key: "shop/reviews"}, 20); err == nil || !strings.Contains(err.Error(), "no Shifter") {
		t.Fatalf("SetWeight before Use: %v", err)
	}
	r.Use(s)
	b, err := Bind([]byte(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 20, "interval": "1s", "maxBreaches": 1}, "gate": {"x": 1}}`), testScope())
	if err != nil {
		t.Fatal(err)
	}
	log := &rolloutLog{}
	ro := Rollout{Key: "shop/reviews", Canary: "c4n4ry", Binding: b, Events: log, Aborter: log}
	ctx := context.Background()
	if err := r.SetWeight(ctx, ro, 60); err != nil { // 0 → 20
		t.Fatal(err)
	}
	c.Step(time.Second)
	if err := r.SetWeight(ctx, ro, 60); err != nil { // breach at 20: failed, back to 0
		t.Fatal(err)
	}
	if gateRaw != `{"x": 1}` {
		t.Errorf("gate built from %q, want the binding's gate", gateRaw)
	}
	if ok, err := r.VerifyWeight(ctx, ro, 60); ok || err != nil {
		t.Fatalf("VerifyWeight after the breach = %v, %v; want false, no error", ok, err)
	}
	if log.aborts != 1 || len(log.events) != 1 || !strings.HasPrefix(log.events[0], RampFailedReason+": danki/istio aborted the rollout: ") || !strings.Contains(log.events[0], "p99 412ms > 250ms") {
		t.Fatalf("aborts %d, events %q: want one abort and one event naming the breach", log.aborts, log.events)
	}
	// Already aborted: no second abort. An abort that fails says why.
	ro.Aborted = true
	if ok, err := r.VerifyWeight(ctx, ro, 60); ok || err != nil || log.aborts != 1 {
		t.Fatalf("VerifyWeight on an aborted rollout = %v, %v, aborts %d", ok, err, log.aborts)
	}
	ro.Aborted, log.abortErr = false, errors.New("forbidden")
	if ok, err := r.VerifyWeight(ctx, ro, 60); ok || err != nil {
		t.Fatalf("VerifyWeight with a failing abort = %v, %v", ok, err)
	}
	if last := log.events[len(log.events)-1]; !strings.Contains(last, "could not abort the rollout (forbidden)") || !strings.Contains(last, "p99 412ms > 250ms") {
		t.Fatalf("event %q: want the failed abort and the breach named", last)
	}
	if w := canaryWeight(readVS(t, s, "reviews")); w != 0 {
		t.Fatalf("canary at %d after the failed ramp, want 0", w)
	}
}

func TestRouterRateLimitsNoVerdictEvents(t *testing.T) {
	s, _ := newFake(t, virtualService("reviews", hostSpec()))
	c := testingclock.NewFakeClock(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	r := NewRouter("danki/istio", nil)
	r.Now = c.Now
	r.GateFor = func(json.RawMessage) (Gate, error) {
		return &scriptedGate{answers: []verdict{{err: errors.New("connection refused")}}}, nil
	}
	r.Use(s)
	b, err := Bind([]byte(`{"virtualService": {"name": "reviews", "routes": ["primary"]}, "ramp": {"step": 10, "interval": "10s", "maxHold": "5m"}, "gate": {}}`), testScope())
	if err != nil {
		t.Fatal(err)
	}
	log := &rolloutLog{}
	ro := Rollout{Key: "shop/reviews", Binding: b, Events: log, Aborter: log}
	for range 9 { // 0 → 10, then holds for 80 s without a verdict
		if err := r.SetWeight(context.Background(), ro, 20); err != nil {
			t.Fatal(err)
		}
		c.Step(10 * time.Second)
	}
	if len(log.events) != 2 || !strings.HasPrefix(log.events[0], GateNoVerdictReason+": danki/istio: holding 10%") || !strings.Contains(log.events[0], "connection refused") {
		t.Fatalf("events %q: want two (one a minute) naming the outage", log.events)
	}
}
