#!/usr/bin/env bash
# The lab's data plane and rollout machinery, on top of the control plane
# lab/scripts/up.sh starts:
#
#   - a network namespace (danki-lab) + veth pair: host end danki-lab0
#     10.244.0.1/24, namespace end danki-lab1 holding the pod IPs 10.244.0.x
#   - the lab runner (`danki-lab runner`, lab/cmd/danki-lab): runs the lab
#     node's pods as local processes inside that namespace (the sample app's
#     JVM per pod)
#   - istiod (pilot-discovery 1.27.0) out of cluster, and a real Envoy 1.40 as
#     the ingress gateway on 127.0.0.1
#   - with LAB_MESH=permissive|strict (default none): istiod's CA on
#     $HOST_IP:15012, Istio sidecars (pilot-agent + Envoy) in the pods of
#     namespace default (the runner injects and runs them), the gateway under
#     `pilot-agent proxy router` doing mTLS to them, and with strict a
#     mesh-wide PeerAuthentication STRICT
#   - Prometheus on 127.0.0.1 scraping Envoy and the pods every second
#   - the Argo Rollouts controller v1.10.2 with danki's plugins registered
#     (ARGO_VERSION=v1.8.5: the oldest one danki supports, with its own CRDs;
#     `make compat`), as users install it: a pod of upstream's Deployment
#     under its own ServiceAccount, the plugin by URL and sha256 from the
#     lab's release server (start_argo_pod; LAB_ARGO_INSTALL=process: a local
#     process with the admin kubeconfig, start_argo_process)
#
# It builds danki (the plugins) and danki-lab (the runner) on every `up`; a
# failed build stops it.
#
#   lab/scripts/mesh.sh up      # needs root (network namespace); idempotent
#   lab/scripts/mesh.sh down    # stops only what `up` started
#   lab/scripts/mesh.sh info    # prints where things are
#   lab/scripts/mesh.sh check   # LAB_MESH on: the sample app through the gateway
#                               # over mTLS, plaintext refused (strict), no NACKs
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"

HOST_IP=${HOST_IP:-10.244.0.1}
NS_IP=${NS_IP:-10.244.0.2}
ISTIOD_GRPC_PORT=${ISTIOD_GRPC_PORT:-15010}
ISTIOD_HTTP_PORT=${ISTIOD_HTTP_PORT:-15080}
ISTIOD_MONITORING_PORT=${ISTIOD_MONITORING_PORT:-15014}
ISTIOD_SECURE_PORT=${ISTIOD_SECURE_PORT:-15012} # LAB_MESH: xDS + CA over TLS on $HOST_IP
INJECTOR_PORT=${INJECTOR_PORT:-15017}           # LAB_MESH: the runner's sidecar injector
APP_PORT_OFFSET=${APP_PORT_OFFSET:-10000}       # LAB_MESH: a meshed app listens on containerPort + this
# The lab's Istio mesh: strict (the default, as in production: sidecars,
# PeerAuthentication STRICT, plaintext to a pod is refused), permissive
# (sidecars, mTLS between proxies, plaintext still accepted) or none (plain
# Envoy gateway, no sidecars). A running lab keeps the mode it came up with
# ($run/mesh-mode): info, check and down act on that lab, and up refuses
# another mode until it is down.
mesh_mode_file=$run/mesh-mode
running_mesh=$(cat "$mesh_mode_file" 2>/dev/null || true)
LAB_MESH=${LAB_MESH:-${running_mesh:-strict}}
case $LAB_MESH in none | permissive | strict) ;; *) die "LAB_MESH=$LAB_MESH: want none, permissive or strict" ;; esac
ENVOY_ADMIN_PORT=${ENVOY_ADMIN_PORT:-15000}
GATEWAY_PORT=${GATEWAY_PORT:-18080}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-19090}
ARGO_METRICS_PORT=${ARGO_METRICS_PORT:-18090}
ARGO_HEALTHZ_PORT=${ARGO_HEALTHZ_PORT:-18091}
# danki's own metrics (docs/metrics.md): one port per plugin process the
# controller starts, and the warm gate's when a test or the bench runs one
# (lab/scenario.LabGateMetricsAddress).
DANKI_LATENCY_METRICS_PORT=${DANKI_LATENCY_METRICS_PORT:-18094}
DANKI_ISTIO_METRICS_PORT=${DANKI_ISTIO_METRICS_PORT:-18095}
DANKI_WARMUP_METRICS_PORT=${DANKI_WARMUP_METRICS_PORT:-18096}
DANKI_GATE_METRICS_PORT=${DANKI_GATE_METRICS_PORT:-18097}
# How the lab runs the Argo Rollouts controller: pod, the default (as users
# install it: upstream's manifests as a Deployment whose pod the runner runs
# on the host network under ServiceAccount argo-rollouts with in-cluster
# config, bound to upstream's ClusterRole plus deploy/rbac; the plugin
# fetched by URL from the lab's release server, make release's files, and
# checked by sha256), or process (a local process with the admin
# kubeconfig, the plugin registered by file:// to the build: quicker to
# debug, and what make compat runs the oldest controller as).
# A running lab keeps the way it came up with ($run/argo-install-mode).
argo_install_file=$run/argo-install-mode
LAB_ARGO_INSTALL=${LAB_ARGO_INSTALL:-$(cat "$argo_install_file" 2>/dev/null || echo pod)}
case $LAB_ARGO_INSTALL in process | pod) ;; *) die "LAB_ARGO_INSTALL=$LAB_ARGO_INSTALL: want process or pod" ;; esac
DANKI_RELEASE_PORT=${DANKI_RELEASE_PORT:-18098} # LAB_ARGO_INSTALL=pod: the release server on 127.0.0.1
ISTIO_VERSION=1.27.0
ISTIO_MODULE=istio.io/istio@v0.0.0-20250808040725-7359d8be2504 # tag 1.27.0
# The Argo Rollouts controller: v1.10.2 (lab/build/argo), or another version
# build.sh has a wrapper module for (ARGO_VERSION=v1.8.5: lab/build/argo-v1.8,
# `make compat`). Its CRDs come from the same module. Like LAB_MESH, a running
# lab keeps the version it came up with ($run/argo-version).
ARGO_DEFAULT_VERSION=v1.10.2 # as build.sh's (lab/scripts/compat_test.go checks)
argo_version_file=$run/argo-version
running_argo=$(cat "$argo_version_file" 2>/dev/null || true)
ARGO_VERSION=${ARGO_VERSION:-${running_argo:-$ARGO_DEFAULT_VERSION}}
[[ $ARGO_VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "ARGO_VERSION=$ARGO_VERSION: want a release like v1.8.5"
export ARGO_VERSION # build.sh builds this one
ARGO_MODULE=github.com/argoproj/argo-rollouts@$ARGO_VERSION
# build.sh's names: the default keeps the plain one.
if [ "$ARGO_VERSION" = "$ARGO_DEFAULT_VERSION" ]; then ARGO_BIN=rollouts-controller; else ARGO_BIN=rollouts-controller-$ARGO_VERSION; fi
# The sample app's JVM flags: Nagle off (else ~40 ms per keep-alive reply)
# and a realistic heap.
SAMPLE_APP_JAVA=${SAMPLE_APP_JAVA:-java -Xmx256m -Xss512k -XX:+UseG1GC -Dsun.net.httpserver.nodelay=true}

export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

# moddir MODULE@VERSION: the module's directory in the module cache.
moddir() { GOFLAGS=-mod=mod GONOSUMDB=istio.io go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }

netns_up() {
	[ "$(id -u)" = 0 ] || die "the lab's pod network needs root (ip netns, veth): run make lab-up as root"
	if ! ip netns list | grep -qw "$NETNS"; then
		ip netns add "$NETNS"
		log "network namespace $NETNS: created"
	fi
	if ! ip link show "$HOST_DEV" >/dev/null 2>&1; then
		ip link add "$HOST_DEV" type veth peer name "$NS_DEV" netns "$NETNS"
		ip addr add "$HOST_IP/${LAB_POD_CIDR#*/}" dev "$HOST_DEV"
		ip link set "$HOST_DEV" up
		ip -n "$NETNS" addr add "$NS_IP/${LAB_POD_CIDR#*/}" dev "$NS_DEV"
		ip -n "$NETNS" link set "$NS_DEV" up
		ip -n "$NETNS" link set lo up
		ip -n "$NETNS" route add default via "$HOST_IP"
		log "veth $HOST_DEV ($HOST_IP) <-> $NETNS/$NS_DEV ($NS_IP): pods get ${LAB_POD_CIDR%.*}.x"
	fi
}

netns_down() {
	if ip netns list 2>/dev/null | grep -qw "$NETNS"; then
		# Anything still running in the namespace is a pod process the runner
		# started (the namespace is the lab's own).
		local pid left
		left=$(ip netns pids "$NETNS" 2>/dev/null || true)
		for pid in $left; do kill -KILL "$pid" 2>/dev/null || true; done
		[ -z "$left" ] || log "killed leftover pod processes: ${left//$'\n'/ }"
		ip netns del "$NETNS"
		log "network namespace $NETNS: deleted"
	fi
	# Deleting the namespace deletes the veth pair; be sure.
	if ip link show "$HOST_DEV" >/dev/null 2>&1; then ip link del "$HOST_DEV"; fi
}

mesh_on() { [ "$LAB_MESH" != none ]; }

build_parts() {
	local extra=()
	mesh_on && extra=(pilot-agent)
	"$here/build.sh" prometheus istiod "${extra[@]}" argo envoy sample-app sample-app-grpc sample-app-spring
	build_danki danki danki-lab
}

install_crds() {
	local istio argo
	istio=$(moddir "$ISTIO_MODULE")
	argo=$(moddir "$ARGO_MODULE")
	{ [ -d "$istio" ] && [ -d "$argo" ]; } || die "go mod download $ISTIO_MODULE / $ARGO_MODULE (for their CRDs) failed"
	kubectl_lab apply --server-side --force-conflicts -f "$istio/manifests/charts/base/files/crd-all.gen.yaml" >/dev/null
	local f
	for f in "$argo"/manifests/crds/*-crd.yaml; do
		kubectl_lab apply --server-side --force-conflicts -f "$f" >/dev/null
	done
	kubectl_lab wait --for=condition=Established --timeout=60s \
		crd/virtualservices.networking.istio.io crd/gateways.networking.istio.io \
		crd/destinationrules.networking.istio.io crd/rollouts.argoproj.io crd/analysistemplates.argoproj.io >/dev/null
	log "CRDs: Istio ($ISTIO_VERSION, crd-all.gen.yaml) and Argo Rollouts ($ARGO_VERSION manifests/crds) installed"
}

start_runner() {
	mkdir -p "$logs/pods" "$run/prometheus"
	local mesh=()
	if mesh_on; then
		# A running runner's sidecars live in there (tokens, SDS sockets).
		alive lab-runner || rm -rf "$run/mesh"
		mkdir -p "$run/mesh/pods"
		mesh=(--mesh --pilot-agent "$bin/pilot-agent" --envoy "$bin/envoy" --istio-bootstrap "$bin/istio-envoy-bootstrap.json"
			--mesh-dir "$run/mesh/pods" --istiod "$HOST_IP:$ISTIOD_SECURE_PORT" --inject-addr "127.0.0.1:$INJECTOR_PORT"
			--app-port-offset "$APP_PORT_OFFSET")
	fi
	# A working dir of its own for each pod (the controller copies its
	# plugins to ./plugin-bin, the gate keeps its certificate in ./certs).
	start lab-runner "$bin/danki-lab" runner "${mesh[@]}" --kubeconfig "$kubeconfig" --node "$LAB_NODE" \
		--netns "$NETNS" --device "$NS_DEV" --host-ip "$HOST_IP" --log-dir "$logs/pods" --stop-grace 5s \
		--prometheus-file-sd "$run/prometheus/pods.json" --work-dir "$run/pods" \
		--image "quay.io/argoproj/argo-rollouts=$bin/$ARGO_BIN" \
		--image "ghcr.io/danki-dev/danki=$bin/danki" \
		--image "danki.dev/sample-app=$SAMPLE_APP_JAVA -jar $bin/sample-app.jar" \
		--image "danki.dev/sample-app-grpc=$SAMPLE_APP_JAVA -jar $bin/sample-app-grpc.jar" \
		--image "danki.dev/sample-app-spring=$SAMPLE_APP_JAVA -jar $bin/sample-app-spring.jar"
	wait_for lab-runner 30 grep -q "lab runner started" "$logs/lab-runner.log"
}

# start_istiod: istiod out of cluster. LAB_MESH none: no CA, no xDS auth,
# plain-HTTP Envoys; no auto mTLS (the gateway has no SDS certificates:
# its clusters would wait for them forever).
#
# LAB_MESH on: istiod with its CA. It signs workload certificates for the
# sidecars and the gateway (istio-ca-secret, a self-signed root kept in the
# API server), writes ConfigMap istio-ca-root-cert into every namespace,
# and serves xDS + CA over TLS on the veth's host address, which the pods
# (in the netns), the gateway and danki reach. Its serving certificate has
# DNS SANs only: clients dialling the IP verify istiod.istio-system.svc.
# XDS_AUTH=true: with it false istiod's CA authenticates nobody (every
# CSR: "Unauthenticated: request authenticate failure"); plain xDS on
# 127.0.0.1:15010 stays unauthenticated either way.
#
# Either way no Telemetry and the two PILOT_ flags off: upstream Envoy NACKs
# istio.metadata_exchange, istio.alpn and istio.stats (lab-notes;
# check_nacks fails the lab if one slips in).
start_istiod() {
	kubectl_lab create namespace istio-system --dry-run=client -o yaml | kubectl_lab apply -f - >/dev/null
	mkdir -p "$run/istiod"
	local ca=false auto_mtls=false secure_addr="" discovery="127.0.0.1:$ISTIOD_GRPC_PORT"
	if mesh_on; then
		ca=true auto_mtls=true secure_addr="$HOST_IP:$ISTIOD_SECURE_PORT" discovery="$HOST_IP:$ISTIOD_SECURE_PORT"
	fi
	cat >"$run/istiod/mesh.yaml" <<MESH
# Istio mesh config for the out-of-cluster istiod, LAB_MESH=$LAB_MESH.
rootNamespace: istio-system
trustDomain: cluster.local
enableAutoMtls: $auto_mtls
defaultConfig:
  discoveryAddress: $discovery
MESH
	(cd "$run/istiod" && start istiod env POD_NAMESPACE=istio-system ENABLE_CA_SERVER=$ca XDS_AUTH=$ca \
		PILOT_ENABLE_METADATA_EXCHANGE=false PILOT_ENABLE_ALPN_FILTER=false \
		"$bin/pilot-discovery" discovery --kubeconfig "$kubeconfig" \
		--meshConfig "$run/istiod/mesh.yaml" --networksConfig /dev/null --clusterID Kubernetes \
		--grpcAddr "127.0.0.1:$ISTIOD_GRPC_PORT" --httpAddr "127.0.0.1:$ISTIOD_HTTP_PORT" \
		--monitoringAddr "127.0.0.1:$ISTIOD_MONITORING_PORT" --secureGRPCAddr "$secure_addr" --httpsAddr "" \
		--ctrlz_address 127.0.0.1 --log_output_level "default:info,ads:warn")
	wait_for istiod 90 curl -fsS "http://127.0.0.1:$ISTIOD_HTTP_PORT/ready"
	if mesh_on; then
		wait_for "istio-ca-root-cert in default" 30 kubectl_lab get configmap istio-ca-root-cert -n default
	fi
}

# mesh_config: what makes pods meshed (LAB_MESH on). Namespace default is
# injected (the runner's webhook adds an istio-proxy container and the
# tlsMode label to pods whose images it runs). Sidecars capture nothing
# (no iptables): a Sidecar resource per workload kind binds Envoy on
# podIP:<containerPort> (captureMode NONE) and forwards to the app, which
# the runner moved to containerPort + APP_PORT_OFFSET; egress ~/* gives them
# no outbound listeners (pods share one netns: 127.0.0.1:<service port>
# listeners would clash). strict: mesh-wide PeerAuthentication STRICT.
# Both modes: an AuthorizationPolicy admits only the gateway's and danki's
# principals to the pods of namespace default (docs/install.md, "Telling
# warm-up from users"); plaintext has no principal, so under permissive it
# gets 403 too. Probes and Prometheus reach the apps past the sidecars.
mesh_config() {
	kubectl_lab label namespace default istio-injection=enabled --overwrite >/dev/null
	local off=$APP_PORT_OFFSET
	kubectl_lab apply -f - >/dev/null <<SIDECAR
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: default}
spec:
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    defaultEndpoint: 0.0.0.0:$((8080 + off))
    captureMode: NONE
  egress:
  - hosts: ["~/*"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: sample-app-grpc, namespace: default}
spec:
  workloadSelector: {labels: {app: sample-app-grpc}}
  ingress:
  - port: {number: 9090, protocol: GRPC, name: grpc}
    defaultEndpoint: 0.0.0.0:$((9090 + off))
    captureMode: NONE
  - port: {number: 8081, protocol: HTTP, name: metrics}
    defaultEndpoint: 0.0.0.0:$((8081 + off))
    captureMode: NONE
  egress:
  - hosts: ["~/*"]
SIDECAR
	if [ "$LAB_MESH" = strict ]; then
		kubectl_lab apply -f - >/dev/null <<PA
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec:
  mtls: {mode: STRICT}
PA
	else
		kubectl_lab delete peerauthentication default -n istio-system --ignore-not-found >/dev/null
	fi
	kubectl_lab apply -f - >/dev/null <<AUTHZ
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: gateway-and-danki, namespace: default}
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        principals:
        - cluster.local/ns/istio-system/sa/istio-ingressgateway # users, mirrored copies
        - cluster.local/ns/argo-rollouts/sa/danki               # the plugins
        - cluster.local/ns/danki-gate/sa/danki                  # danki gate
        - cluster.local/ns/danki-system/sa/danki                # the CLI, the e2e tests' own requests
AUTHZ
	log "mesh: LAB_MESH=$LAB_MESH: namespace default injected (Sidecar captureMode NONE, apps on containerPort+$off)$([ "$LAB_MESH" = strict ] && echo ', PeerAuthentication STRICT'), AuthorizationPolicy gateway-and-danki"
}

# start_gateway: the ingress gateway under `pilot-agent proxy router`
# (LAB_MESH on), labelled istio=ingressgateway, so it has a workload
# certificate (SDS from the agent) and speaks mTLS to the sidecars. Its
# working dir is laid out as in a gateway pod: bootstrap template, mesh
# root, a token for ServiceAccount istio-system/istio-ingressgateway
# (audience istio-ca), pod labels. Envoy admin stays on
# 127.0.0.1:$ENVOY_ADMIN_PORT (Prometheus scrapes it); the agent's status
# (15020), Envoy's readiness (15021) and Prometheus (15090) listeners use
# Istio's defaults on the host.
start_gateway() {
	local gw=$run/gateway
	if alive gateway; then log "gateway: already running (pid $(cat "$pids/gateway.pid"))"; return; fi
	rm -rf "$gw"
	mkdir -p "$gw/var/lib/istio/envoy" "$gw/var/run/secrets/istio" "$gw/var/run/secrets/tokens" "$gw/etc/istio/pod" "$gw/etc/istio/proxy"
	cp "$bin/istio-envoy-bootstrap.json" "$gw/var/lib/istio/envoy/envoy_bootstrap_tmpl.json"
	kubectl_lab create serviceaccount istio-ingressgateway -n istio-system --dry-run=client -o yaml | kubectl_lab apply -f - >/dev/null
	kubectl --kubeconfig "$kubeconfig" create token istio-ingressgateway -n istio-system --audience istio-ca --duration 24h \
		>"$gw/var/run/secrets/tokens/istio-token" 2>/dev/null || die "gateway: no token for istio-system/istio-ingressgateway"
	wait_for "istio-ca-root-cert in istio-system" 30 kubectl_lab get configmap istio-ca-root-cert -n istio-system
	kubectl --kubeconfig "$kubeconfig" get configmap istio-ca-root-cert -n istio-system -o jsonpath='{.data.root-cert\.pem}' \
		>"$gw/var/run/secrets/istio/root-cert.pem" 2>/dev/null
	printf '%s\n' 'istio="ingressgateway"' 'app="istio-ingressgateway"' >"$gw/etc/istio/pod/labels"
	# All of Envoy's stats, as the plain gateway had: danki and the tests
	# read envoy_cluster_upstream_rq_time_* of the outbound clusters, which
	# Istio's default stats matcher leaves out.
	local proxy_config
	proxy_config='{"binaryPath": "'"$bin/envoy"'", "discoveryAddress": "'"$HOST_IP:$ISTIOD_SECURE_PORT"'", "proxyAdminPort": '"$ENVOY_ADMIN_PORT"', "concurrency": 2, "proxyStatsMatcher": {"inclusionRegexps": [".*"]}}'
	(cd "$gw" && start gateway env POD_NAME=istio-ingressgateway-lab POD_NAMESPACE=istio-system INSTANCE_IP="$HOST_IP" \
		SERVICE_ACCOUNT=istio-ingressgateway ISTIO_META_CLUSTER_ID=Kubernetes ISTIO_META_WORKLOAD_NAME=istio-ingressgateway \
		CA_ADDR="$HOST_IP:$ISTIOD_SECURE_PORT" ISTIOD_SAN=istiod.istio-system.svc PROXY_CONFIG="$proxy_config" \
		"$bin/pilot-agent" proxy router --domain istio-system.svc.cluster.local)
	wait_for gateway 60 curl -fsS "http://127.0.0.1:15021/healthz/ready"
}

# proxies: one line "NAME STATS_URL LOG" per Envoy of the mesh: the gateway
# (its admin port) and every sidecar the runner runs (its proxy.env).
proxies() {
	if alive gateway || alive envoy; then
		local name=gateway
		alive gateway || name=envoy
		echo "$name http://127.0.0.1:$ENVOY_ADMIN_PORT/stats/prometheus $logs/$name.log"
	fi
	local f
	for f in "$run"/mesh/pods/*/proxy.env; do
		[ -e "$f" ] || continue
		(
			# shellcheck disable=SC1090
			source "$f"
			echo "sidecar:$POD $PROMETHEUS_URL $LOG"
		)
	done
}

# check_nacks: fails, naming the proxy and what it rejected, when any Envoy
# refused config from istiod. A NACKed update leaves Envoy serving the
# last config it accepted: only listener_manager.lds.update_rejected and
# cluster_manager.cds.update_rejected (and a "rejected" warning naming the
# extension in its log) show it.
check_nacks() {
	local name url logf stats lds cds bad=0 n=0
	while read -r name url logf; do
		n=$((n + 1))
		if ! stats=$(curl -fsS --max-time 5 "$url"); then
			log "ERROR: NACK check: $name: cannot read $url"
			bad=1
			continue
		fi
		# Istio's bootstrap prints them with empty labels: name{} 0.
		lds=$(awk '$1 ~ /^envoy_listener_manager_lds_update_rejected(\{\})?$/ { print $2 }' <<<"$stats")
		cds=$(awk '$1 ~ /^envoy_cluster_manager_cds_update_rejected(\{\})?$/ { print $2 }' <<<"$stats")
		if [ -z "$lds" ] || [ -z "$cds" ]; then
			log "ERROR: NACK check: $name: no lds/cds update_rejected stats at $url"
			bad=1
		elif [ "$lds" != 0 ] || [ "$cds" != 0 ]; then
			log "ERROR: $name rejected istiod's config: listener_manager.lds.update_rejected=$lds cluster_manager.cds.update_rejected=$cds; from its log ($logf):"
			grep -h 'rejected' "$logf" 2>/dev/null | tail -n 5 | cut -c1-600 | sed 's/^/  /' >&2
			bad=1
		fi
	done < <(proxies)
	[ "$bad" = 0 ] || die "a proxy rejected config (see above): the lab's mesh does not work as configured"
	log "NACK check: $n proxies, no rejected listener or cluster config"
}

write_envoy_bootstrap() {
	mkdir -p "$run/envoy"
	# A router (gateway) node: istiod matches Gateways to it by LABELS.
	cat >"$run/envoy/bootstrap.yaml" <<BOOTSTRAP
node:
  id: router~127.0.0.1~gw.istio-system~istio-system.svc.cluster.local
  cluster: istio-ingressgateway.istio-system
  metadata:
    ISTIO_VERSION: "$ISTIO_VERSION"
    CLUSTER_ID: Kubernetes
    NAMESPACE: istio-system
    NAME: gw
    WORKLOAD_NAME: istio-ingressgateway
    LABELS: {istio: ingressgateway, app: istio-ingressgateway}
    INSTANCE_IPS: 127.0.0.1
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: $ENVOY_ADMIN_PORT}}
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: xds-grpc}}]
  cds_config: {ads: {}, resource_api_version: V3}
  lds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
  - name: xds-grpc
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds-grpc
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $ISTIOD_GRPC_PORT}}}}]}]
# Istio's stats tags (tools/packaging/common/envoy_bootstrap.json): without
# them Envoy cuts cluster names like outbound|8080||app-stable.default.svc…
# at the first dot.
stats_config:
  use_all_default_tags: false
  stats_tags:
  - {tag_name: cluster_name, regex: '^cluster(\.(.+);)'}
  - {tag_name: http_conn_manager_prefix, regex: '^http\.(((?:[_.[:digit:]\w]*|[_\[\]aAbBcCdDeEfF[:digit:]\w\:]*));\.)'}
  - {tag_name: thread_name, regex: '^server(\.(.+))\.watchdog'}
  - {tag_name: tcp_prefix, regex: '^tcp\.((.*?)\.)\w+?$'}
  - {tag_name: response_code, regex: '_rq(_(\d{3}))$'}
  - {tag_name: response_code_class, regex: '_rq(_(\dxx))$'}
  - {tag_name: http_conn_manager_listener_prefix, regex: '^listener(?=\.).*?\.http\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)'}
  - {tag_name: listener_address, regex: '^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)'}
BOOTSTRAP
}

start_envoy() {
	write_envoy_bootstrap
	start envoy "$bin/envoy" -c "$run/envoy/bootstrap.yaml" --disable-hot-restart --log-level warn --concurrency 2
	wait_for envoy 30 curl -fsS "http://127.0.0.1:$ENVOY_ADMIN_PORT/ready"
}

write_prometheus_config() {
	mkdir -p "$run/prometheus/data"
	cat >"$run/prometheus/prometheus.yml" <<PROM
# Generated by lab/scripts/mesh.sh.
global: {scrape_interval: 1s, evaluation_interval: 1s}
# The Helm chart's alerts (hack/helm.sh rules: its PrometheusRule's spec).
rule_files: ["$run/prometheus/rules/danki.yaml"]
scrape_configs:
- job_name: envoy-gateway
  metrics_path: /stats/prometheus
  static_configs: [{targets: ["127.0.0.1:$ENVOY_ADMIN_PORT"], labels: {gateway: istio-ingressgateway}}]
- job_name: pods
  # The lab runner lists the pods annotated prometheus.io/scrape: "true" here
  # (Debian's Prometheus is built without kubernetes_sd).
  file_sd_configs: [{files: ["$run/prometheus/pods.json"], refresh_interval: 1s}]
- job_name: envoy-stats
  # Every sidecar's Envoy (Istio's 15090 listener, per pod here), labelled
  # namespace, pod and the pod's labels, by the runner (lab/runner/filesd.go).
  metrics_path: /stats/prometheus
  file_sd_configs: [{files: ["$run/prometheus/envoy-stats.json"], refresh_interval: 1s}]
- job_name: argo-rollouts
  static_configs: [{targets: ["127.0.0.1:$ARGO_METRICS_PORT"]}]
- job_name: danki-plugins
  # Each plugin process the controller starts serves its own (docs/metrics.md).
  static_configs:
  - {targets: ["127.0.0.1:$DANKI_LATENCY_METRICS_PORT"], labels: {plugin: danki/latency}}
  - {targets: ["127.0.0.1:$DANKI_ISTIO_METRICS_PORT"], labels: {plugin: danki/istio}}
  - {targets: ["127.0.0.1:$DANKI_WARMUP_METRICS_PORT"], labels: {plugin: danki/warmup}}
- job_name: danki-gate
  # Up only while a test or the bench runs the warm gate.
  static_configs: [{targets: ["127.0.0.1:$DANKI_GATE_METRICS_PORT"]}]
PROM
}

start_prometheus() {
	write_prometheus_config
	mkdir -p "$run/prometheus/rules"
	"$repo/hack/helm.sh" rules "$run/prometheus/rules/danki.yaml" >"$logs/helm-rules.log" 2>&1 ||
		die "hack/helm.sh rules (the chart's alerts for the lab's Prometheus) failed: $logs/helm-rules.log"
	start prometheus "$bin/prometheus" --config.file "$run/prometheus/prometheus.yml" \
		--storage.tsdb.path "$run/prometheus/data" --storage.tsdb.retention.time 6h \
		--web.listen-address "127.0.0.1:$PROMETHEUS_PORT" --web.enable-lifecycle --log.level warn
	wait_for prometheus 30 curl -fsS "http://127.0.0.1:$PROMETHEUS_PORT/-/ready"
}

start_argo() {
	kubectl_lab create namespace argo-rollouts --dry-run=client -o yaml | kubectl_lab apply -f - >/dev/null
	if [ "$LAB_ARGO_INSTALL" = pod ]; then start_argo_pod; else start_argo_process; fi
	local running=
	for _ in $(seq 1 20); do
		running=$(argo_running_version)
		[ -z "$running" ] || break
		sleep 0.5
	done
	[[ $running == "$ARGO_VERSION"+* || $running == "$ARGO_VERSION" ]] || die "the Argo Rollouts controller reports version '$running', want $ARGO_VERSION ($bin/$ARGO_BIN)"
	log "argo-rollouts: controller $running ($ARGO_BIN, LAB_ARGO_INSTALL=$LAB_ARGO_INSTALL)"
}

# plugin_config LOCATION [SHA256]: ConfigMap argo-rollouts-config with
# danki's three plugin entries. danki's one binary serves the three plugin kinds
# (`danki plugin`). Its args are the operator's policy (docs/security.md):
# the lab's Prometheus is the one tenant configs may query, and the
# capacity checks of the lab e2e ramp to 600 qps, above the default cap of
# 500. LAB_MESH on: danki's own mesh identity (docs/install.md),
# ServiceAccount danki beside the controller (the controller's
# POD_NAMESPACE names the namespace), istiod's CA on the veth address.
# Each entry's process serves danki's metrics on its own port, scraped by
# the lab's Prometheus (job danki-plugins).
plugin_config() {
	local location=$1 sha=${2:-}
	local plugin_args='["plugin", "--prometheus", "http://127.0.0.1:'"$PROMETHEUS_PORT"'", "--max-qps", "1000"'
	mesh_on && plugin_args+=', "--istiod-address", "'"$HOST_IP:$ISTIOD_SECURE_PORT"'", "--mesh-service-account", "danki"'
	local kind name port
	echo "apiVersion: v1"
	echo "kind: ConfigMap"
	echo "metadata: {name: argo-rollouts-config, namespace: argo-rollouts}"
	echo "data:"
	for kind in metricProviderPlugins:danki/latency:$DANKI_LATENCY_METRICS_PORT trafficRouterPlugins:danki/istio:$DANKI_ISTIO_METRICS_PORT \
		stepPlugins:danki/warmup:$DANKI_WARMUP_METRICS_PORT; do
		IFS=: read -r kind name port <<<"$kind"
		echo "  $kind: |"
		echo "    - name: $name"
		echo "      location: $location"
		[ -z "$sha" ] || echo "      sha256: $sha"
		echo "      args: $plugin_args"', "--metrics-address", "127.0.0.1:'"$port"'"]'
	done
}

# argo_flags: the controller's flags, the same either way. v1.8.5 knows
# only --metricsport; v1.10.2 added --metricsPort and deprecated the
# lower-case spelling. Its metrics and healthz servers listen on all
# interfaces (0.0.0.0 is hard-coded in v1.8.5 and v1.10.2; only the ports
# can be chosen).
argo_flags() {
	local metrics_flag=--metricsPort
	case $ARGO_VERSION in v1.[0-9].*) metrics_flag=--metricsport ;; esac
	echo --leader-elect=false "$metrics_flag" "$ARGO_METRICS_PORT" --healthzPort "$ARGO_HEALTHZ_PORT" \
		--loglevel info --logformat text --rollout-resync 60
}

# start_argo_process: the controller as a local process with the admin
# kubeconfig, the plugin by file:// (LAB_ARGO_INSTALL=process).
start_argo_process() {
	if mesh_on; then
		kubectl_lab -n argo-rollouts create serviceaccount danki --dry-run=client -o yaml | kubectl_lab apply -f - >/dev/null
	fi
	plugin_config "file://$bin/danki" | kubectl_lab apply -f - >/dev/null
	mkdir -p "$run/argo"
	# The controller copies plugins into ./plugin-bin: run it in its own dir.
	# KUBECONFIG is for the plugin processes it starts: they inherit its
	# environment, not its --kubeconfig flag, and out of cluster there is no
	# service account.
	local flags
	read -ra flags <<<"$(argo_flags)"
	(cd "$run/argo" && rm -rf plugin-bin &&
		start argo-rollouts env POD_NAMESPACE=argo-rollouts KUBECONFIG="$kubeconfig" "$bin/$ARGO_BIN" --kubeconfig "$kubeconfig" "${flags[@]}")
	wait_for argo-rollouts 90 curl -fsS "http://127.0.0.1:$ARGO_HEALTHZ_PORT/healthz"
}

# start_argo_pod: the controller as users install it (LAB_ARGO_INSTALL=pod).
# make release's files (hack/release.sh, linux/amd64) served on
# 127.0.0.1:$DANKI_RELEASE_PORT; upstream's base manifests and cluster role
# (the controller module's manifests/, without its CRDs and its empty
# argo-rollouts-config) with a kustomize patch for the lab: the host's
# network (the lab's API server, Prometheus and istiod are on the host),
# the flags above, CPU and memory requests for the load danki's step
# generates from inside it; deploy/rbac (danki's rules bound to the
# controller's ServiceAccount, danki's mesh identity). The lab runner runs
# the pod with its ServiceAccount token and in-cluster config.
start_argo_pod() {
	local argo dir=$run/argo-install sha flags=() f
	argo=$(moddir "$ARGO_MODULE")
	[ -d "$argo/manifests/base" ] || die "go mod download $ARGO_MODULE (for its manifests) failed"
	log "release: hack/release.sh $run/release linux/amd64 (the plugin the controller downloads)"
	"$repo/hack/release.sh" "$run/release" linux/amd64 >"$logs/release.log" 2>&1 || die "hack/release.sh failed: $logs/release.log"
	sha=$(awk '$2 == "danki-linux-amd64" {print $1}' "$run/release/checksums.txt")
	start release-server "$bin/danki-lab" files --dir "$run/release" --addr "127.0.0.1:$DANKI_RELEASE_PORT"
	wait_for release-server 30 curl -fsS -o /dev/null "http://127.0.0.1:$DANKI_RELEASE_PORT/checksums.txt"
	rm -rf "$dir" && mkdir -p "$dir/upstream"
	cp -R "$argo/manifests/base" "$argo/manifests/role" "$argo/manifests/cluster-install" "$dir/upstream/"
	chmod -R u+w "$dir"
	read -ra flags <<<"$(argo_flags)"
	{
		cat <<KUSTOMIZATION
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argo-rollouts
resources:
- upstream/base/argo-rollouts-sa.yaml
- upstream/base/argo-rollouts-deployment.yaml
- upstream/base/argo-rollouts-aggregate-roles.yaml
- upstream/base/argo-rollouts-metrics-service.yaml
- upstream/base/argo-rollouts-notification-secret.yaml
- upstream/role/argo-rollouts-clusterrole.yaml
- upstream/cluster-install/argo-rollouts-clusterrolebinding.yaml
- argo-rollouts-config.yaml
images:
- name: quay.io/argoproj/argo-rollouts
  newTag: $ARGO_VERSION
patches:
- target: {kind: Deployment, name: argo-rollouts}
  patch: |-
    - {op: add, path: /spec/template/spec/hostNetwork, value: true}
    - {op: add, path: /spec/template/spec/dnsPolicy, value: ClusterFirstWithHostNet}
    - op: add
      path: /spec/template/spec/containers/0/args
      value: [$(printf '"%s", ' "${flags[@]}" | sed 's/, $//')]
    - op: replace
      path: /spec/template/spec/containers/0/ports
      value: [{name: metrics, containerPort: $ARGO_METRICS_PORT}, {name: healthz, containerPort: $ARGO_HEALTHZ_PORT}]
    - op: add
      path: /spec/template/spec/containers/0/resources/requests
      value: {cpu: "1", memory: 1Gi}
KUSTOMIZATION
	} >"$dir/kustomization.yaml"
	plugin_config "http://127.0.0.1:$DANKI_RELEASE_PORT/danki-linux-amd64" "$sha" >"$dir/argo-rollouts-config.yaml"
	kubectl_lab apply -k "$repo/deploy/rbac" >/dev/null
	kubectl_lab apply -k "$dir" >/dev/null
	wait_for argo-rollouts 120 curl -fsS "http://127.0.0.1:$ARGO_HEALTHZ_PORT/healthz"
	# Its PID (the runner's container ID), so alive and stop know it.
	f=$(kubectl_lab -n argo-rollouts get pods -l app.kubernetes.io/name=argo-rollouts \
		-o jsonpath='{.items[0].status.containerStatuses[0].containerID}')
	echo "${f#danki-lab://}" >"$pids/argo-rollouts.pid"
}

# argo_running_version: the version the running controller reports in its
# metric argo_rollouts_controller_info (e.g. v1.8.5+unknown: the lab builds
# it from the module, without git metadata).
argo_running_version() {
	curl -fsS --max-time 5 "http://127.0.0.1:$ARGO_METRICS_PORT/metrics" 2>/dev/null |
		sed -n 's/^argo_rollouts_controller_info{.*version="\([^"]*\)".*/\1/p' | head -1 || true
}

info() {
	local argo_now
	argo_now=$(argo_running_version)
	cat <<INFO
danki lab:
  kubeconfig      $kubeconfig     (kubectl --kubeconfig $kubeconfig get pods -A)
  API server      https://127.0.0.1:$APISERVER_PORT
  gateway         http://127.0.0.1:$GATEWAY_PORT/     (Envoy $("$bin/envoy" --version 2>/dev/null | sed -n 's/.*\/\(1\.[0-9.]*\)\/.*/\1/p'), Istio Gateway + VirtualService)
  Envoy admin     http://127.0.0.1:$ENVOY_ADMIN_PORT/   (/stats/prometheus, /config_dump, /clusters)
  mesh            LAB_MESH=$LAB_MESH$(mesh_on && echo "  (istiod CA $HOST_IP:$ISTIOD_SECURE_PORT; sidecars: $run/mesh/pods/*/proxy.env; lab/scripts/mesh.sh check)")
  istiod          127.0.0.1:$ISTIOD_GRPC_PORT (xDS), http://127.0.0.1:$ISTIOD_HTTP_PORT/debug
  Prometheus      http://127.0.0.1:$PROMETHEUS_PORT/
  Argo Rollouts   controller ${argo_now:-not running} ($bin/$ARGO_BIN; ARGO_VERSION=$ARGO_VERSION), healthz :$ARGO_HEALTHZ_PORT, metrics :$ARGO_METRICS_PORT (all interfaces)
  pod network     $LAB_POD_CIDR in netns $NETNS (host end $HOST_DEV $HOST_IP)
  logs            $logs (pods: $logs/pods)
try:  kubectl --kubeconfig $kubeconfig apply -f lab/manifests/ && curl -s http://127.0.0.1:$GATEWAY_PORT/
INFO
}

up() {
	if [ -n "$running_mesh" ] && [ "$running_mesh" != "$LAB_MESH" ] && alive lab-runner; then
		die "a lab with LAB_MESH=$running_mesh is up: make lab-down first, then LAB_MESH=$LAB_MESH make lab-up"
	fi
	if [ -n "$running_argo" ] && [ "$running_argo" != "$ARGO_VERSION" ] && alive argo-rollouts; then
		die "a lab with the Argo Rollouts controller $running_argo is up: make lab-down first, then ARGO_VERSION=$ARGO_VERSION make lab-up"
	fi
	mkdir -p "$run"
	echo "$LAB_MESH" >"$mesh_mode_file"
	echo "$ARGO_VERSION" >"$argo_version_file"
	echo "$LAB_ARGO_INSTALL" >"$argo_install_file"
	build_parts
	netns_up
	install_crds
	start_runner
	start_istiod
	if mesh_on; then
		mesh_config
		start_gateway
		sleep 2 # a NACK comes a moment after the first push
		check_nacks
	else
		start_envoy
	fi
	start_prometheus
	start_argo
	info
}

down() {
	# Clients first; the runner stops its pod processes on TERM.
	local name
	# A controller pod is the runner's to stop, with its plugins (its
	# process group): stopped alone, the runner would start it again and
	# its plugins stay behind.
	if [ "$LAB_ARGO_INSTALL" = pod ]; then rm -f "$pids/argo-rollouts.pid"; fi
	for name in argo-rollouts release-server prometheus gateway envoy istiod; do
		stop "$name"
	done
	# The runner's TERM takes a while: each pod gets --stop-grace (5 s) to
	# exit, a JVM KILLed under its CPU quota exits slowly, and each cgroup
	# may stay busy up to 15 s more. Killing the runner early leaves its
	# cgroups behind (down.sh then fails), so it gets a minute.
	stop lab-runner 60
	netns_down
	rm -rf "$run/prometheus/data" "$run/argo/plugin-bin" "$run/pods" "$run/argo-install" "$run/mesh" "$run/gateway" "$mesh_mode_file" "$argo_version_file" "$argo_install_file"
}

# check: LAB_MESH on, the lab up: deploys the sample app (lab/manifests'
# Services, Gateway and Rollout) unless a Rollout app runs, waits for its
# pods, then proves the mesh: every pod has a ready sidecar and the tlsMode
# label, no proxy NACKed, the gateway answers 200 (over mTLS to the pods),
# the app saw the gateway's mesh identity (x-forwarded-client-cert), and a
# plaintext request straight to podIP:containerPort is refused under strict
# (under permissive: answered 403 by the AuthorizationPolicy).
check() {
	mesh_on || die "mesh.sh check: LAB_MESH=$LAB_MESH: nothing to check (set LAB_MESH=permissive or strict, as for up)"
	if ! kubectl_lab get rollout app -n default >/dev/null 2>&1; then
		kubectl_lab apply -f "$repo/lab/manifests/10-services.yaml" -f "$repo/lab/manifests/20-gateway.yaml" -f "$repo/lab/manifests/30-rollout.yaml" >/dev/null
		log "check: applied lab/manifests' Services, Gateway and Rollout app"
	fi
	wait_for "sample app pods Ready" 120 kubectl_lab wait --for=condition=Ready pod -l app=sample-app -n default --timeout=2s
	local pods
	pods=$(kubectl_lab get pods -n default -l app=sample-app -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP} {.metadata.labels.security\.istio\.io/tlsMode} {.spec.containers[*].name}{"\n"}{end}')
	local lines
	mapfile -t lines <<<"$pods"
	printf '  %s\n' "${lines[@]}" >&2
	local name ip mode containers
	while read -r name ip mode containers; do
		[ "$mode" = istio ] || die "check: pod $name has no security.istio.io/tlsMode=istio label"
		[[ " $containers " == *" istio-proxy "* ]] || die "check: pod $name has no istio-proxy container"
	done <<<"$pods"
	check_nacks
	local out code seen
	for _ in $(seq 1 20); do
		out=$(curl -sS -o /dev/null -D - --max-time 5 "http://127.0.0.1:$GATEWAY_PORT/" 2>&1) || true
		code=$(sed -n '1s/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' <<<"$out")
		[ "$code" = 200 ] && break
		sleep 1
	done
	[ "$code" = 200 ] || die "check: the gateway did not answer 200 for http://127.0.0.1:$GATEWAY_PORT/: $out"
	seen=$(tr -d '\r' <<<"$out" | sed -n 's/^[Xx]-[Ss]een-[Cc]lient-[Cc]ert: //p')
	[[ $seen == *"URI=spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway"* ]] ||
		die "check: the app saw no mesh identity of the gateway in x-forwarded-client-cert (X-Seen-Client-Cert: '$seen')"
	log "check: gateway → app: 200 over mTLS; the app saw x-forwarded-client-cert ${seen:0:120}…"
	local rc
	while read -r name ip _; do
		rc=0
		out=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "http://$ip:8080/" 2>&1) || rc=$?
		if [ "$LAB_MESH" = strict ]; then
			[ "$rc" != 0 ] || die "check: plaintext http://$ip:8080/ ($name) answered $out under STRICT"
			log "check: plaintext http://$ip:8080/ ($name) refused under STRICT: curl exit $rc: $(sed -n 's/^curl: //p' <<<"$out")"
		else
			# Accepted by the sidecar, denied by AuthorizationPolicy
			# gateway-and-danki: plaintext carries no principal.
			if [ "$rc" != 0 ] || [ "$out" != 403 ]; then
				die "check: plaintext http://$ip:8080/ ($name) under PERMISSIVE: curl exit $rc $out, want 403 (RBAC: access denied)"
			fi
			log "check: plaintext http://$ip:8080/ ($name) answered $out under PERMISSIVE (AuthorizationPolicy: no principal)"
		fi
	done <<<"$pods"
	log "check: LAB_MESH=$LAB_MESH OK"
}

case ${1:-} in
up) up ;;
check) check ;;
down) down ;;
info) info ;;
step) # debugging: run single steps, e.g. mesh.sh step netns_up start_runner
	shift
	for f in "$@"; do "$f"; done ;;
configs) write_envoy_bootstrap && write_prometheus_config && log "wrote $run/envoy/bootstrap.yaml $run/prometheus/prometheus.yml" ;;
*) echo "usage: $0 up|down|info|check|configs|step FUNC…" >&2; exit 2 ;;
esac
