package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"time"

	"github.com/danki-dev/danki/lab/runner"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func newRunnerCmd() *cobra.Command {
	var (
		kubeconfig, node, netns, device, logDir, hostIP, fileSD string
		workDir                                                 string
		images                                                  = runner.ImageCommands{}
		imageSpecs                                              []string
		stopGrace                                               time.Duration
		mesh                                                    runner.Mesh
		meshOn                                                  bool
	)
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "Run the lab node's pods as local processes (a stand-in for the kubelet)",
		Long: `Watch the pods bound to --node and run each container as a local process:
the image's repository selects a command (--image), its tag becomes $VERSION.
Each pod gets an IP from the node's podCIDR, on --device inside the network
namespace --netns (root; lab/scripts/up.sh creates both), and the process runs
there with the pod's env plus PORT (first container port), BIND_ADDRESS and
POD_IP. The pod turns Running, then Ready once its HTTP readiness probe
answers. Images with no mapping are marked Running/Ready without a process.
Deleted pods are stopped (SIGTERM, then SIGKILL after --stop-grace).

With --mesh the runner is also the lab's Istio sidecar injector (a mutating
webhook on --inject-addr for namespaces labelled istio-injection=enabled) and
runs each injected pod's istio-proxy container as pilot-agent + Envoy in the
pod's network and cgroups; the app's ports move by --app-port-offset behind
the sidecar (lab/README.md, "The mesh").`,
		Example: `  danki-lab runner --kubeconfig .cache/lab/kubeconfig --node danki-lab-node \
    --netns danki-lab --device danki-lab1 --log-dir .cache/lab/run/logs/pods \
    --image 'danki.dev/sample-app=java -Xmx256m -Dsun.net.httpserver.nodelay=true -jar .cache/lab/bin/sample-app.jar' \
    --image 'danki.dev/sample-app-grpc=java -Xmx256m -jar .cache/lab/bin/sample-app-grpc.jar'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range imageSpecs {
				if err := images.Set(s); err != nil {
					return fmt.Errorf("--image: %w", err)
				}
			}
			if kubeconfig == "" {
				return errors.New("--kubeconfig is required (the lab's is .cache/lab/kubeconfig)")
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("client for %s: %w", cfg.Host, err)
			}
			var network runner.Network = runner.Loopback{}
			if netns != "" {
				if device == "" {
					return errors.New("--device is required with --netns: the namespace's end of the veth (the lab's is danki-lab1)")
				}
				n, err := client.CoreV1().Nodes().Get(cmd.Context(), node, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("get node %s: %w", node, err)
				}
				cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
				if err != nil {
					return fmt.Errorf("node %s: spec.podCIDR %q: %w (set it, e.g. 10.244.0.0/24)", node, n.Spec.PodCIDR, err)
				}
				network = runner.Netns{Name: netns, Device: device, PrefixLen: cidr.Bits()}
			}
			var meshCfg *runner.Mesh
			if meshOn {
				for flag, v := range map[string]string{"--pilot-agent": mesh.PilotAgent, "--envoy": mesh.Envoy,
					"--istio-bootstrap": mesh.BootstrapTemplate, "--mesh-dir": mesh.Dir, "--istiod": mesh.Discovery} {
					if v == "" {
						return fmt.Errorf("%s is required with --mesh", flag)
					}
				}
				meshCfg = &mesh
			}
			r, err := runner.New(runner.Config{
				Client: client, Node: node, Network: network, Images: images, LogDir: logDir,
				HostIP: hostIP, FileSD: fileSD, StopGrace: stopGrace, Logger: slog.Default(), Mesh: meshCfg,
				WorkDir: workDir, APIServer: apiServerAddress(cfg.Host),
			})
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			return r.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the lab's API server")
	f.StringVar(&node, "node", "danki-lab-node", "node whose pods to run")
	f.StringVar(&netns, "netns", "", "network namespace holding the pod IPs (empty: loopback addresses on the host, no Services)")
	f.StringVar(&device, "device", "", "interface inside --netns that gets the pod IPs")
	f.StringVar(&hostIP, "host-ip", "", "address reported as the pods' hostIP (the host end of the veth)")
	f.StringVar(&logDir, "log-dir", "", "directory for the containers' logs (<namespace>_<pod>_<container>.log)")
	f.StringVar(&fileSD, "prometheus-file-sd", "", "write the pods annotated prometheus.io/scrape=\"true\" to this Prometheus file_sd JSON file")
	f.StringArrayVar(&imageSpecs, "image", nil, "REPO=COMMAND ARGS…: run containers of image REPO:TAG with this command, VERSION=TAG (repeatable)")
	f.DurationVar(&stopGrace, "stop-grace", 10*time.Second, "time between SIGTERM and SIGKILL when a pod stops")
	f.BoolVar(&meshOn, "mesh", false, "run injected pods' istio-proxy containers as Istio sidecars and serve the sidecar injector")
	f.StringVar(&mesh.PilotAgent, "pilot-agent", "", "pilot-agent binary (--mesh)")
	f.StringVar(&mesh.Envoy, "envoy", "", "Envoy binary the sidecars' agents start (--mesh)")
	f.StringVar(&mesh.BootstrapTemplate, "istio-bootstrap", "", "istio's envoy_bootstrap.json template (--mesh)")
	f.StringVar(&mesh.Dir, "mesh-dir", "", "directory for the sidecars' working directories (--mesh)")
	f.StringVar(&mesh.Discovery, "istiod", "", "istiod's secure gRPC address (xDS and CA) as the pods reach it, e.g. 10.244.0.1:15012 (--mesh)")
	f.StringVar(&mesh.InjectAddr, "inject-addr", "127.0.0.1:15017", "where the sidecar injection webhook listens (--mesh; empty: no injector)")
	f.Int32Var(&mesh.AppPortOffset, "app-port-offset", 10000, "a meshed pod's app listens on containerPort + this; the sidecar on containerPort (--mesh)")
	f.StringVar(&workDir, "work-dir", "", "one working directory per pod below this one (<namespace>_<pod>); with it, host-network pods get their service-account volume and in-cluster environment")
	_ = cmd.MarkFlagRequired("log-dir")
	return cmd
}

// apiServerAddress is the API server's host:port from the kubeconfig's
// server URL (the lab's: https://127.0.0.1:16443), as host-network pods
// reach it; "" if the URL names none.
func apiServerAddress(server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Port() == "" {
		return ""
	}
	return u.Host
}
