package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Prometheus file_sd: the lab's Prometheus (Debian's build has no
// kubernetes_sd) scrapes the pods listed in this file. Pods opt in with the
// usual annotations prometheus.io/scrape: "true", prometheus.io/port and
// prometheus.io/path.

type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// writeFileSD rewrites Config.FileSD when the set of scrape targets changed.
func (r *Runner) writeFileSD() error {
	if r.cfg.FileSD == "" {
		return nil
	}
	groups := []sdGroup{}
	r.mu.Lock()
	for _, obj := range r.store.List() {
		pod := obj.(*corev1.Pod)
		st := r.pods[pod.Namespace+"/"+pod.Name]
		if st == nil || st.uid != pod.UID || pod.DeletionTimestamp != nil || pod.Annotations["prometheus.io/scrape"] != "true" {
			continue
		}
		port := pod.Annotations["prometheus.io/port"]
		if port == "" && len(pod.Spec.Containers) > 0 && len(pod.Spec.Containers[0].Ports) > 0 {
			port = fmt.Sprint(pod.Spec.Containers[0].Ports[0].ContainerPort)
		}
		if port == "" {
			continue
		}
		if shift := r.portShift(st); shift != 0 {
			// A meshed pod's app listens past its sidecar: scrape it there,
			// in plaintext, as Istio's metrics merging does.
			if n, err := strconv.Atoi(port); err == nil {
				port = strconv.Itoa(n + int(shift))
			}
		}
		path := pod.Annotations["prometheus.io/path"]
		if path == "" {
			path = "/metrics"
		}
		labels := map[string]string{"namespace": pod.Namespace, "pod": pod.Name, "__metrics_path__": path}
		for _, l := range []string{"app", "rollouts-pod-template-hash"} {
			if v, ok := pod.Labels[l]; ok {
				labels[sanitizeLabel(l)] = v
			}
		}
		groups = append(groups, sdGroup{Targets: []string{st.ip.String() + ":" + port}, Labels: labels})
	}
	r.mu.Unlock()
	sort.Slice(groups, func(i, j int) bool { return groups[i].Targets[0] < groups[j].Targets[0] })
	data, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return err
	}
	r.sdMu.Lock()
	defer r.sdMu.Unlock()
	if bytes.Equal(data, r.sdLast) {
		return nil
	}
	// Write then rename: Prometheus must never read a half-written file.
	tmp := filepath.Join(filepath.Dir(r.cfg.FileSD), "."+filepath.Base(r.cfg.FileSD)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write Prometheus file_sd %s: %w", r.cfg.FileSD, err)
	}
	if err := os.Rename(tmp, r.cfg.FileSD); err != nil {
		return fmt.Errorf("write Prometheus file_sd %s: %w", r.cfg.FileSD, err)
	}
	r.sdLast = data
	return nil
}

func sanitizeLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}
