#!/usr/bin/env bash
# examples/kind/up.sh — danki on a real Kubernetes cluster on one machine:
# a kind cluster with Istio, Prometheus and Argo Rollouts, danki's plugins in
# the Argo Rollouts controller, the cold-starting JVM sample app as a danki
# canary, and fortio user traffic while the canary rolls out.
#
#   examples/kind/up.sh                  # everything, then roll out v2 and watch it
#   START_ROLLOUT=0 examples/kind/up.sh  # set up, leave the Rollout at v1
#   examples/kind/down.sh                # delete the cluster
#
# Needs: docker (a running engine), kind (v0.30.x: the node image is pinned
# for it), kubectl, and istioctl 1.27.0 (downloaded, sha256-checked, into
# ~/.cache/danki-kind when not on PATH at that version; set ISTIOCTL to use
# another binary). Re-running it reuses the cluster and rebuilds the images.
# See examples/kind/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

CLUSTER=${CLUSTER:-danki}
CTX=kind-$CLUSTER
NS=danki-demo
ISTIO_VERSION=1.27.0
ARGO_ROLLOUTS_VERSION=v1.10.2
ARGO_ROLLOUTS_INSTALL=https://github.com/argoproj/argo-rollouts/releases/download/$ARGO_ROLLOUTS_VERSION/install.yaml
PROMETHEUS_ADDON=https://raw.githubusercontent.com/istio/istio/$ISTIO_VERSION/samples/addons/prometheus.yaml
APP_IMAGE=danki.dev/sample-app
DANKI_IMAGE=danki.dev/argo-rollouts-danki:dev
CACHE=${DANKI_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/danki-kind}
START_ROLLOUT=${START_ROLLOUT:-1}
ROLLOUT_TIMEOUT=${ROLLOUT_TIMEOUT:-1200} # seconds

steps=8
[ "$START_ROLLOUT" = 1 ] || steps=7
n=0
step() {
	n=$((n + 1))
	printf '\n==> [%d/%d] %s\n' "$n" "$steps" "$*" >&2
}
log() { printf '    %s\n' "$*" >&2; }
die() {
	printf 'examples/kind/up.sh: %s\n' "$*" >&2
	exit 1
}
k() { kubectl --context "$CTX" "$@"; }

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"
}

check_tools() {
	need docker "install Docker (https://docs.docker.com/get-docker/); kind runs the cluster's node in it"
	docker info >/dev/null 2>&1 || die "docker is installed but its engine does not answer (docker info failed): start Docker, or check that your user may use it"
	need kind "install kind v0.30.x (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
	need kubectl "install kubectl (https://kubernetes.io/docs/tasks/tools/)"
	local kv
	kv=$(kind version 2>/dev/null || true)
	case $kv in
	*v0.30.*) ;;
	*) log "warning: $kv: the node image in kind-config.yaml is the one kind v0.30.0 was released with; other kind versions may not boot it" ;;
	esac
}

# istioctl prints the path of an istioctl $ISTIO_VERSION: $ISTIOCTL, the one on
# PATH if it is that version, else the pinned release download (checked
# against the release's published sha256).
istioctl_path() {
	if [ -n "${ISTIOCTL:-}" ]; then
		[ -x "$ISTIOCTL" ] || die "ISTIOCTL=$ISTIOCTL is not an executable file"
		echo "$ISTIOCTL"
		return
	fi
	if command -v istioctl >/dev/null 2>&1 &&
		istioctl version --remote=false 2>/dev/null | grep -q "$ISTIO_VERSION"; then
		command -v istioctl
		return
	fi
	local dir=$CACHE/istio-$ISTIO_VERSION
	if [ -x "$dir/istioctl" ]; then
		echo "$dir/istioctl"
		return
	fi
	local os arch asset
	case $(uname -s) in
	Linux) os=linux ;;
	Darwin) os=osx ;;
	*) die "istioctl $ISTIO_VERSION not found and no download for $(uname -s): install it (https://istio.io/latest/docs/setup/additional-setup/download-istio-release/) and set ISTIOCTL" ;;
	esac
	case $(uname -m) in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) die "istioctl $ISTIO_VERSION not found and no download for $(uname -m): install it and set ISTIOCTL" ;;
	esac
	asset=istioctl-$ISTIO_VERSION-$os-$arch.tar.gz
	[ "$os/$arch" = osx/amd64 ] && asset=istioctl-$ISTIO_VERSION-osx.tar.gz
	need curl "needed to download $asset (or install istioctl $ISTIO_VERSION and set ISTIOCTL)"
	local url=https://github.com/istio/istio/releases/download/$ISTIO_VERSION/$asset
	log "istioctl $ISTIO_VERSION not on PATH: downloading $url"
	mkdir -p "$dir"
	curl -fsSL -o "$dir/$asset" "$url" || die "download of $url failed"
	curl -fsSL -o "$dir/$asset.sha256" "$url.sha256" || die "download of $url.sha256 failed"
	local want got
	want=$(cut -d' ' -f1 <"$dir/$asset.sha256")
	if command -v sha256sum >/dev/null 2>&1; then
		got=$(sha256sum "$dir/$asset" | cut -d' ' -f1)
	else
		got=$(shasum -a 256 "$dir/$asset" | cut -d' ' -f1)
	fi
	if [ -z "$want" ] || [ "$want" != "$got" ]; then
		rm -f "$dir/$asset"
		die "$asset: sha256 $got does not match the release's ${want:-(empty .sha256 file)} (download removed)"
	fi
	tar -xzf "$dir/$asset" -C "$dir" istioctl
	rm -f "$dir/$asset" "$dir/$asset.sha256"
	echo "$dir/istioctl"
}

create_cluster() {
	step "kind cluster $CLUSTER"
	if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
		log "exists: reusing it (examples/kind/down.sh deletes it)"
	else
		kind create cluster --name "$CLUSTER" --config "$here/kind-config.yaml" --wait 3m
	fi
	k cluster-info >/dev/null || die "cannot reach the cluster with kubectl context $CTX"
}

build_images() {
	step "build and load images: $APP_IMAGE:v1, $APP_IMAGE:v2, $DANKI_IMAGE"
	local version
	version=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
	docker build -t "$APP_IMAGE:v1" --build-arg VERSION=v1 "$repo/examples/sample-app"
	docker build -t "$APP_IMAGE:v2" --build-arg VERSION=v2 "$repo/examples/sample-app"
	# The Argo Rollouts v1.10.2 controller image with danki at
	# /home/argo-rollouts/danki (Dockerfile at the repository root).
	docker build -t "$DANKI_IMAGE" --build-arg VERSION="$version" "$repo"
	kind load docker-image --name "$CLUSTER" "$APP_IMAGE:v1" "$APP_IMAGE:v2" "$DANKI_IMAGE"
}

install_istio() {
	step "Istio $ISTIO_VERSION (default profile: istiod + ingress gateway)"
	local istioctl
	istioctl=$(istioctl_path)
	log "istioctl: $istioctl"
	"$istioctl" install --context "$CTX" --set profile=default -y
	k -n istio-system rollout status deployment/istiod --timeout=5m
	k -n istio-system rollout status deployment/istio-ingressgateway --timeout=5m
}

install_prometheus() {
	step "Prometheus with Istio's standard scrape config ($PROMETHEUS_ADDON)"
	k apply -f "$PROMETHEUS_ADDON"
	k -n istio-system rollout status deployment/prometheus --timeout=5m
}

install_argo_rollouts() {
	step "Argo Rollouts $ARGO_ROLLOUTS_VERSION with danki (deploy/: plugin registration + RBAC)"
	k create namespace argo-rollouts --dry-run=client -o yaml | k apply -f -
	k apply -n argo-rollouts -f "$ARGO_ROLLOUTS_INSTALL"
	# danki's argo-rollouts-config (file:///home/argo-rollouts/danki) and its
	# ClusterRole, bound to the controller's ServiceAccount.
	k apply -k "$repo/deploy"
	# Run the controller from the image that carries danki; it was loaded
	# into the node, never pulled.
	k -n argo-rollouts patch deployment argo-rollouts --type json -p "[
		{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/image\", \"value\": \"$DANKI_IMAGE\"},
		{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/imagePullPolicy\", \"value\": \"IfNotPresent\"}]"
	# The controller reads argo-rollouts-config only at start, and a rebuilt
	# image keeps its tag: restart it either way.
	k -n argo-rollouts rollout restart deployment/argo-rollouts
	if ! k -n argo-rollouts rollout status deployment/argo-rollouts --timeout=3m; then
		k -n argo-rollouts logs deployment/argo-rollouts --tail=30 >&2 || true
		die "the Argo Rollouts controller did not become ready (log above; docs/install.md#troubleshooting)"
	fi
	local loaded
	loaded=$(k -n argo-rollouts logs deployment/argo-rollouts | grep -c 'Copied plugin' || true)
	log "controller loaded $loaded danki plugin(s) (want 3: danki/latency, danki/istio, danki/warmup)"
}

deploy_app() {
	step "sample app as a danki Rollout in namespace $NS (examples/kind/manifests)"
	k apply -f "$here/manifests/00-namespace.yaml"
	k apply -f "$here/manifests/10-services.yaml" -f "$here/manifests/20-routing.yaml" \
		-f "$here/manifests/30-analysis.yaml" -f "$here/manifests/40-rollout.yaml"
	if ! k -n "$NS" wait rollout/app --for=jsonpath='{.status.phase}'=Healthy --timeout=5m; then
		k -n "$NS" get rollout,pods -o wide >&2 || true
		die "Rollout $NS/app did not become Healthy"
	fi
}

start_users() {
	step "fortio user traffic (50 requests/s through the mesh to http://app:8080/)"
	k apply -f "$here/manifests/50-fortio-users.yaml"
	k -n "$NS" rollout status deployment/fortio-users --timeout=3m
	log "letting stable collect a baseline for 30 s"
	sleep 30
}

rollout_field() {
	k -n "$NS" get rollout app -o jsonpath="$1" 2>/dev/null || true
}

watch_rollout() {
	step "roll out $APP_IMAGE:v2 and watch it (warm-up, gated ramp, analysis)"
	local before
	before=$(rollout_field '{.status.stableRS}')
	k -n "$NS" patch rollout app --type json \
		-p "[{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/image\", \"value\": \"$APP_IMAGE:v2\"}]"
	local start=$SECONDS phase stable abort stepi weights msg plugin
	while :; do
		phase=$(rollout_field '{.status.phase}')
		stable=$(rollout_field '{.status.stableRS}')
		abort=$(rollout_field '{.status.abort}')
		stepi=$(rollout_field '{.status.currentStepIndex}')
		msg=$(rollout_field '{.status.message}')
		plugin=$(rollout_field '{.status.canary.stepPluginStatuses[-1:].message}')
		weights=$(k -n "$NS" get virtualservice app -o \
			jsonpath='{range .spec.http[?(@.name=="primary")].route[*]}{.destination.host}={.weight} {end}' 2>/dev/null || true)
		printf '    %4ds  step %s/6  %-12s %s %s\n' $((SECONDS - start)) "${stepi:-?}" "${phase:-?}" "$weights" "${msg:-$plugin}" >&2
		if [ "$abort" = true ] || [ "$phase" = Degraded ]; then
			k -n "$NS" get rollout app -o jsonpath='{.status.conditions}' >&2 || true
			die "the rollout was aborted ($phase): ${msg:-see kubectl -n $NS describe rollout app}"
		fi
		if [ "$phase" = Healthy ] && [ -n "$stable" ] && [ "$stable" != "$before" ]; then
			break
		fi
		[ $((SECONDS - start)) -lt "$ROLLOUT_TIMEOUT" ] || die "the rollout did not finish within ${ROLLOUT_TIMEOUT}s"
		sleep 10
	done
	log "v2 is stable. The warm-up's writes were rolled back by the app (X-Danki-Warmup):"
	local count
	count=$(k -n "$NS" exec deployment/fortio-users -c fortio -- fortio curl http://app:8080/orders/count 2>/dev/null | tail -n 1 || true)
	log "GET /orders/count → ${count:-(no answer)}"
}

main() {
	check_tools
	create_cluster
	build_images
	install_istio
	install_prometheus
	install_argo_rollouts
	deploy_app
	start_users
	if [ "$START_ROLLOUT" = 1 ]; then
		watch_rollout
	else
		log "START_ROLLOUT=0: the Rollout stays at v1; roll out v2 with"
		log "  kubectl --context $CTX -n $NS patch rollout app --type json -p '[{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/image\",\"value\":\"$APP_IMAGE:v2\"}]'"
	fi
	cat >&2 <<EOF

danki on kind is up (kubectl context $CTX):
  kubectl --context $CTX -n $NS get rollout,pods,virtualservice
  kubectl --context $CTX -n $NS get analysisrun -o wide
  kubectl --context $CTX -n argo-rollouts logs deployment/argo-rollouts | grep danki
  kubectl argo rollouts --context $CTX -n $NS get rollout app --watch     # with the kubectl plugin
  kubectl --context $CTX -n istio-system port-forward svc/prometheus 9090  # Prometheus
  examples/kind/down.sh                                                   # delete it all
EOF
}

main "$@"
