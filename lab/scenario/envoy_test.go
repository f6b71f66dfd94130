package scenario

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// envoyDump is Envoy 1.40's /config_dump?resource=dynamic_active_clusters
// as the lab's gateway served it with lab/manifests/slowstart applied
// (istiod 1.27; trimmed), one DynamicCluster per config: both of the
// Rollout's clusters with slow start on ROUND_ROBIN (lb_policy left out:
// the proto default), and a cluster with none. The stable cluster is
// changed to LEAST_REQUEST to cover that policy too.
const envoyDump = `{"configs": [
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump.DynamicCluster", "version_info": "2026-11-24T14:16:45Z/1",
  "cluster": {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "BlackHoleCluster", "type": "STATIC", "connect_timeout": "10s", "alt_stat_name": "BlackHoleCluster;"}},
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump.DynamicCluster", "version_info": "2026-11-24T14:19:37Z/9",
  "cluster": {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "outbound|8080||app-canary.default.svc.cluster.local", "type": "EDS",
   "eds_cluster_config": {"eds_config": {"ads": {}, "initial_fetch_timeout": "0s", "resource_api_version": "V3"}, "service_name": "outbound|8080||app-canary.default.svc.cluster.local"},
   "connect_timeout": "10s", "common_lb_config": {}, "alt_stat_name": "outbound|8080||app-canary.default.svc.cluster.local;",
   "round_robin_lb_config": {"slow_start_config": {"slow_start_window": "60s"}}}, "last_updated": "2026-11-24T14:19:37.510Z"},
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump.DynamicCluster", "version_info": "2026-11-24T14:19:37Z/9",
  "cluster": {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "outbound|8080||app-stable.default.svc.cluster.local", "type": "EDS", "lb_policy": "LEAST_REQUEST",
   "connect_timeout": "10s", "common_lb_config": {}, "alt_stat_name": "outbound|8080||app-stable.default.svc.cluster.local;",
   "least_request_lb_config": {"slow_start_config": {"slow_start_window": "60s", "aggression": {"default_value": 1, "runtime_key": "x"}}}}, "last_updated": "2026-11-24T14:19:37.513Z"},
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump.DynamicCluster", "version_info": "2026-11-24T14:16:45Z/1",
  "cluster": {"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "outbound|443||kubernetes.default.svc.cluster.local", "type": "EDS", "lb_policy": "LEAST_REQUEST"}}
]}`

// wholeDump is the same canary cluster in /config_dump without ?resource:
// a ClustersConfigDump that nests the clusters.
const wholeDump = `{"configs": [
 {"@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump", "bootstrap": {"node": {"id": "router~127.0.0.1~gw.istio-system~istio-system.svc.cluster.local"}}},
 {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump", "version_info": "2026-11-24T14:19:37Z/9",
  "dynamic_active_clusters": [{"version_info": "2026-11-24T14:19:37Z/9", "cluster": {"name": "outbound|8080||app-canary.default.svc.cluster.local", "type": "EDS",
   "round_robin_lb_config": {"slow_start_config": {"slow_start_window": "60s"}}}}]}
]}`

func TestSlowStartConfig(t *testing.T) {
	for _, c := range []struct {
		cluster, want string
		ok            bool
	}{
		{"outbound|8080||app-canary.default.svc.cluster.local", `ROUND_ROBIN, round_robin_lb_config.slow_start_config {"slow_start_window":"60s"}`, true},
		{"outbound|8080||app-stable.default.svc.cluster.local", `LEAST_REQUEST, least_request_lb_config.slow_start_config {"aggression":{"default_value":1,"runtime_key":"x"},"slow_start_window":"60s"}`, true},
		{"outbound|443||kubernetes.default.svc.cluster.local", "LEAST_REQUEST, no slow_start_config", false},
		{"outbound|8080||gone.default.svc.cluster.local", "cluster not in Envoy's config", false},
	} {
		got, ok, err := slowStartConfig([]byte(envoyDump), c.cluster)
		if err != nil || got != c.want || ok != c.ok {
			t.Errorf("%s: %q, %t, %v; want %q, %t", c.cluster, got, ok, err, c.want, c.ok)
		}
	}
	if got, ok, err := slowStartConfig([]byte(wholeDump), rolloutClusters[1]); err != nil || !ok || !strings.Contains(got, "round_robin_lb_config.slow_start_config") {
		t.Errorf("whole config dump: %q, %t, %v", got, ok, err)
	}
	// A slow_start_config without a window is no slow start.
	empty := strings.Replace(envoyDump, `{"slow_start_window": "60s"}`, `{}`, 1)
	if _, ok, _ := slowStartConfig([]byte(empty), rolloutClusters[1]); ok {
		t.Error("an empty slow_start_config counts as slow start")
	}
	if _, _, err := slowStartConfig([]byte("<html>"), rolloutClusters[0]); err == nil {
		t.Error("no error for a config dump that is not JSON")
	}
}

// istiod pushes the DestinationRule a moment after it is applied: the
// check waits for it rather than reporting the config from before.
func TestEnvoySlowStartWaitsForThePush(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/config_dump" || r.URL.Query().Get("resource") != "dynamic_active_clusters" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 { // before the push: no slow start yet
			_, _ = io.WriteString(w, strings.ReplaceAll(envoyDump, "slow_start_config", "other_config"))
			return
		}
		_, _ = io.WriteString(w, envoyDump)
	}))
	defer srv.Close()
	l := &lab{cfg: Config{Common: Common{EnvoyAdminURL: srv.URL, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}}
	got := l.envoySlowStart(context.Background())
	if calls.Load() < 3 || !strings.Contains(got, "app-canary.default.svc.cluster.local: ROUND_ROBIN, round_robin_lb_config.slow_start_config") ||
		!strings.Contains(got, "app-stable.default.svc.cluster.local: LEAST_REQUEST, least_request_lb_config.slow_start_config") {
		t.Errorf("after %d reads: %q", calls.Load(), got)
	}
}
