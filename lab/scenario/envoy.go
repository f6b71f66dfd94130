package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// The Rollout's two clusters on the gateway (Services app-stable and
// app-canary, port 8080).
var rolloutClusters = []string{
	"outbound|8080||app-stable.default.svc.cluster.local",
	"outbound|8080||app-canary.default.svc.cluster.local",
}

// envoySlowStart waits (up to 30 s: istiod pushes in well under a second)
// until Envoy's config for both of the Rollout's clusters has a slow-start
// config and returns it, one cluster per line; when it never appears, it
// says so and returns what Envoy has instead. The bench reports it either
// way: slow start that istiod never emitted is a finding, not an error.
func (l *lab) envoySlowStart(ctx context.Context) string {
	var last string
	err := wait(ctx, 30*time.Second, "slow start in Envoy's cluster config", func() (bool, error) {
		dump, err := l.envoyGet(ctx, "/config_dump?resource=dynamic_active_clusters")
		if err != nil {
			return false, err
		}
		lines, all := make([]string, 0, len(rolloutClusters)), true
		for _, name := range rolloutClusters {
			lb, ok, err := slowStartConfig(dump, name)
			if err != nil {
				return false, err
			}
			all = all && ok
			lines = append(lines, name+": "+lb)
		}
		last = strings.Join(lines, "; ")
		return all, nil
	})
	if err != nil {
		l.cfg.Log.Warn("Envoy has no slow start for the Rollout's clusters", "err", err, "envoy", last)
		if last == "" {
			return "not read: " + err.Error()
		}
		return "NO slow start after 30 s: " + last
	}
	l.cfg.Log.Info("slow start in Envoy's cluster config", "envoy", last)
	return last
}

func (l *lab) envoyGet(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cfg.EnvoyAdminURL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envoy admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %s: %.200s", resp.Status, body)
	}
	if err != nil {
		return nil, fmt.Errorf("envoy admin %s: %w", path, err)
	}
	return body, nil
}

// slowStartConfig finds cluster in an Envoy config dump (admin
// /config_dump, whole or ?resource=dynamic_active_clusters) and describes its load balancing:
// lb_policy (absent means ROUND_ROBIN, the proto default that the dump
// leaves out) and every slow_start_config in it with its path, e.g.
// `ROUND_ROBIN, round_robin_lb_config.slow_start_config {"slow_start_window":"60s"}`.
// ok reports whether there is a slow_start_config with a window.
func slowStartConfig(dump []byte, cluster string) (desc string, ok bool, err error) {
	// With ?resource=dynamic_active_clusters each config is one
	// DynamicCluster ({"cluster": …}); the whole dump nests them in a
	// ClustersConfigDump ({"dynamic_active_clusters": [{"cluster": …}]}).
	type dynamicCluster struct {
		Cluster map[string]any `json:"cluster"`
	}
	var d struct {
		Configs []struct {
			dynamicCluster
			Active []dynamicCluster `json:"dynamic_active_clusters"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(dump, &d); err != nil {
		return "", false, fmt.Errorf("envoy config dump: %w", err)
	}
	for _, c := range d.Configs {
		for _, a := range append(c.Active, c.dynamicCluster) {
			if a.Cluster["name"] != cluster {
				continue
			}
			policy, _ := a.Cluster["lb_policy"].(string)
			if policy == "" {
				policy = "ROUND_ROBIN"
			}
			var found []string
			findKey(a.Cluster, "slow_start_config", "", func(path string, v any) {
				js, _ := json.Marshal(v)
				found = append(found, path+" "+string(js))
				if m, isMap := v.(map[string]any); isMap && m["slow_start_window"] != nil {
					ok = true
				}
			})
			sort.Strings(found)
			if len(found) == 0 {
				return policy + ", no slow_start_config", false, nil
			}
			return policy + ", " + strings.Join(found, ", "), ok, nil
		}
	}
	return "cluster not in Envoy's config", false, nil
}

// findKey calls found for every value under key anywhere in v, with its
// dotted path.
func findKey(v any, key, path string, found func(path string, v any)) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if k == key {
				found(join(k), child)
				continue
			}
			findKey(child, key, join(k), found)
		}
	case []any:
		for i, child := range v {
			findKey(child, key, join(fmt.Sprint(i)), found)
		}
	}
}
