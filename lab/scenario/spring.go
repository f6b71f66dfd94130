package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/danki-dev/danki/lab/traffic"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Spring app's users reach it through the lab's gateway with this host
// (lab/manifests/spring/20-virtualservice.yaml).
const springHost = "spring.lab"

// springWarmStable and springWarmQPS warm the two fresh v1 pods before each
// Spring rollout, as TestLabSpringRollout does: ≈ 6,000 requests each
// (issue 37 measured a Spring service's latency reaching its plateau after
// 3,600–11,000 requests), so stable is warm as a service that has served
// users for a while is.
const (
	springWarmStable = 12000
	springWarmQPS    = 200
)

// springScenarios are the Spring app's rollouts, in order: the fixed count
// first, then danki.
var springScenarios = []scenario{{name: SpringFixed100, dir: "spring-fixed100"}, {name: SpringDanki, dir: "spring-danki"}}

// spring rolls the Spring Boot sample app v1 → v2 with a fixed warm-up of
// 100 requests per pod, then with danki's default warm-up, under its own
// steady users (Config.SpringQPS through the gateway, host spring.lab). The
// sample app's Rollout goes first: its JVMs would take CPU from the Spring
// pods on the lab's shared cores. It returns the runs, their measured
// phases and the users' traffic.
func (l *lab) spring(ctx context.Context, manifests string) ([]Run, [][]traffic.Phase, traffic.Result, error) {
	cfg := l.cfg
	if err := l.kubectl(ctx, "delete", "rollout", mainApp.rollout, "--ignore-not-found", "--wait"); err != nil {
		return nil, nil, traffic.Result{}, err
	}
	if err := wait(ctx, 2*time.Minute, "the sample app's pods to go", func() (bool, error) {
		pods, err := l.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: mainApp.selector})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		return nil, nil, traffic.Result{}, err
	}
	if err := l.kubectl(ctx, "apply", "-f", filepath.Join(manifests, "spring", "10-services.yaml"), "-f", filepath.Join(manifests, "spring", "20-virtualservice.yaml")); err != nil {
		return nil, nil, traffic.Result{}, err
	}
	headers := map[string]string{"Host": springHost}
	var (
		users  *traffic.Traffic
		runs   []Run
		phases [][]traffic.Phase
	)
	defer func() {
		if users != nil {
			users.Stop()
		}
	}()
	for _, sc := range springScenarios {
		if err := l.install(ctx, springApp, filepath.Join(manifests, sc.dir)); err != nil {
			return nil, nil, traffic.Result{}, err
		}
		if users == nil {
			// The users arrive once the first v1 pods serve, and stay.
			cfg.Log.Info("Spring users: steady traffic through the gateway", "host", springHost, "qps", cfg.SpringQPS)
			u, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: cfg.GatewayURL, QPS: cfg.SpringQPS, Connections: 4, Headers: headers})
			if err != nil {
				return nil, nil, traffic.Result{}, fmt.Errorf("start the Spring users: %w", err)
			}
			users = u
		}
		if err := l.warmSpringStable(ctx, headers); err != nil {
			return nil, nil, traffic.Result{}, fmt.Errorf("%s: %w", sc.name, err)
		}
		if err := sleep(ctx, cfg.Before); err != nil {
			return nil, nil, traffic.Result{}, err
		}
		run, err := l.rollout(ctx, springApp, sc.name, "v2", nil)
		if err != nil {
			return nil, nil, traffic.Result{}, err
		}
		if run.Outcome != "promoted" {
			return nil, nil, traffic.Result{}, fmt.Errorf("%s: the good version was %s, not promoted: see `kubectl describe rollout %s`", sc.name, run.Outcome, springApp.rollout)
		}
		if err := sleep(ctx, cfg.After); err != nil {
			return nil, nil, traffic.Result{}, err
		}
		runs = append(runs, *run)
		phases = append(phases, cfg.phases(run))
	}
	t := users.Stop()
	users = nil
	return runs, phases, t, nil
}

// warmSpringStable sends springWarmStable requests through the gateway to
// the fresh v1 pods (not measured: the users' own requests are).
func (l *lab) warmSpringStable(ctx context.Context, headers map[string]string) error {
	l.cfg.Log.Info("warming the Spring app's stable pods (not measured)", "requests", springWarmStable, "qps", springWarmQPS)
	warm, err := traffic.StartTraffic(ctx, traffic.TrafficConfig{URL: l.cfg.GatewayURL, QPS: springWarmQPS, Connections: 8, Headers: headers})
	if err != nil {
		return fmt.Errorf("warm the stable pods: %w", err)
	}
	err = sleep(ctx, time.Duration(springWarmStable/springWarmQPS)*time.Second)
	r := warm.Stop()
	if err != nil {
		return err
	}
	l.cfg.Log.Info("Spring stable warmed", "requests", r.Requests, "qps", r.AchievedQPS, "errors", r.Errors)
	if float64(r.Errors) > 0.01*float64(r.Requests) || r.Requests < springWarmStable/2 {
		return fmt.Errorf("warming stable through the gateway: %d requests, %d errors: the Spring app or its route does not serve", r.Requests, r.Errors)
	}
	return nil
}
