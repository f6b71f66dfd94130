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
// kubernetes_sd) scrapes the pods listed in Config.FileSD. Pods opt in with
// the usual annotations prometheus.io/scrape: "true", prometheus.io/port and
// prometheus.io/path.
//
// Beside it, SidecarFileSD lists every sidecar's Envoy Prometheus listener
// (Istio's 15090 /stats/prometheus; here shifted per pod, proxyPortsFor),
// as Istio's envoy-stats PodMonitor or a kubernetes-pods job would find it,
// labelled as kubernetes_sd relabelling does in the standard setups:
// namespace, pod, and every pod label with its name sanitized
// (rollouts-pod-template-hash → rollouts_pod_template_hash: the
// labelmap __meta_kubernetes_pod_label_(.+) of Istio's and the Prometheus
// Helm chart's kubernetes-pods job; Prometheus Operator's PodMonitor gives
// namespace and pod itself and a pod label with podTargetLabels).

type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// SidecarFileSD is the file_sd file of the sidecars' Envoy stats, beside
// fileSD: envoy-stats.json in its directory.
func SidecarFileSD(fileSD string) string {
	return filepath.Join(filepath.Dir(fileSD), "envoy-stats.json")
}

// writeFileSD rewrites Config.FileSD and SidecarFileSD when the set of
// scrape targets changed.
func (r *Runner) writeFileSD() error {
	if r.cfg.FileSD == "" {
		return nil
	}
	groups, sidecars := []sdGroup{}, []sdGroup{}
	r.mu.Lock()
	for _, obj := range r.store.List() {
		pod := obj.(*corev1.Pod)
		st := r.pods[pod.Namespace+"/"+pod.Name]
		if st == nil || st.uid != pod.UID || pod.DeletionTimestamp != nil {
			continue
		}
		if st.meshed {
			if ports, err := proxyPortsFor(st.ip); err == nil {
				sidecars = append(sidecars, sdGroup{Targets: []string{fmt.Sprintf("%s:%d", st.ip, ports.EnvoyProm)}, Labels: sidecarLabels(pod)})
			}
		}
		if pod.Annotations["prometheus.io/scrape"] != "true" {
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
	podsData, err := sdJSON(groups)
	if err != nil {
		return err
	}
	sidecarsData, err := sdJSON(sidecars)
	if err != nil {
		return err
	}
	// r.sdLast holds both files' content, NUL-separated.
	both := append(append(podsData, 0), sidecarsData...)
	r.sdMu.Lock()
	defer r.sdMu.Unlock()
	if bytes.Equal(both, r.sdLast) {
		return nil
	}
	if err := writeSDFile(r.cfg.FileSD, podsData); err != nil {
		return err
	}
	if err := writeSDFile(SidecarFileSD(r.cfg.FileSD), sidecarsData); err != nil {
		return err
	}
	r.sdLast = both
	return nil
}

// sidecarLabels are a sidecar target's labels: the pod's labels sanitized
// (labelmap), then namespace and pod, which win over a pod label of that
// name as in the kubernetes-pods job.
func sidecarLabels(pod *corev1.Pod) map[string]string {
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[sanitizeLabel(k)] = v
	}
	labels["namespace"], labels["pod"] = pod.Namespace, pod.Name
	return labels
}

// sdJSON is groups, sorted by target, as a file_sd file.
func sdJSON(groups []sdGroup) ([]byte, error) {
	sort.Slice(groups, func(i, j int) bool { return groups[i].Targets[0] < groups[j].Targets[0] })
	return json.MarshalIndent(groups, "", "  ")
}

// writeSDFile writes data to file, then renames: Prometheus must never read
// a half-written file.
func writeSDFile(file string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write Prometheus file_sd %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("write Prometheus file_sd %s: %w", file, err)
	}
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
