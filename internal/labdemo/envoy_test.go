package labdemo

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

// envoyDump is the shape of Envoy's /config_dump?resource=dynamic_active_clusters
// with istiod 1.27's clusters (trimmed): the canary cluster with slow start
// on ROUND_ROBIN (lb_policy left out: the proto default), the stable one on
// LEAST_REQUEST, and an unrelated cluster with none.
const envoyDump = `{"configs":[{"@type":"type.googleapis.com/envoy.admin.v3.ClustersConfigDump","version_info":"2026-11-24T14:00:00Z/12",
 "dynamic_active_clusters":[
  {"version_info":"2026-11-24T14:00:00Z/12","cluster":{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster",
   "name":"outbound|8080||app-canary.default.svc.cluster.local","type":"EDS",
   "eds_cluster_config":{"eds_config":{"ads":{},"initial_fetch_timeout":"0s","resource_api_version":"V3"},"service_name":"outbound|8080||app-canary.default.svc.cluster.local"},
   "connect_timeout":"10s","round_robin_lb_config":{"slow_start_config":{"slow_start_window":"60s"}},
   "common_lb_config":{"locality_weighted_lb_config":{}}}},
  {"cluster":{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster",
   "name":"outbound|8080||app-stable.default.svc.cluster.local","type":"EDS","lb_policy":"LEAST_REQUEST",
   "least_request_lb_config":{"slow_start_config":{"slow_start_window":"60s","aggression":{"default_value":1,"runtime_key":"x"}}}}},
  {"cluster":{"name":"BlackHoleCluster","type":"STATIC"}},
  {"cluster":{"name":"outbound|9090||other.default.svc.cluster.local","type":"EDS","lb_policy":"LEAST_REQUEST"}}
 ]}]}`

func TestSlowStartConfig(t *testing.T) {
	for _, c := range []struct {
		cluster, want string
		ok            bool
	}{
		{"outbound|8080||app-canary.default.svc.cluster.local", `ROUND_ROBIN, round_robin_lb_config.slow_start_config {"slow_start_window":"60s"}`, true},
		{"outbound|8080||app-stable.default.svc.cluster.local", `LEAST_REQUEST, least_request_lb_config.slow_start_config {"aggression":{"default_value":1,"runtime_key":"x"},"slow_start_window":"60s"}`, true},
		{"outbound|9090||other.default.svc.cluster.local", "LEAST_REQUEST, no slow_start_config", false},
		{"outbound|8080||gone.default.svc.cluster.local", "cluster not in Envoy's config", false},
	} {
		got, ok, err := slowStartConfig([]byte(envoyDump), c.cluster)
		if err != nil || got != c.want || ok != c.ok {
			t.Errorf("%s: %q, %t, %v; want %q, %t", c.cluster, got, ok, err, c.want, c.ok)
		}
	}
	// A slow_start_config without a window is no slow start.
	empty := strings.Replace(envoyDump, `{"slow_start_window":"60s"}`, `{}`, 1)
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
	l := &lab{cfg: Config{EnvoyAdminURL: srv.URL, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	got := l.envoySlowStart(context.Background())
	if calls.Load() < 3 || !strings.Contains(got, "app-canary.default.svc.cluster.local: ROUND_ROBIN, round_robin_lb_config.slow_start_config") ||
		!strings.Contains(got, "app-stable.default.svc.cluster.local: LEAST_REQUEST, least_request_lb_config.slow_start_config") {
		t.Errorf("after %d reads: %q", calls.Load(), got)
	}
}
