#!/usr/bin/env bash
# examples/kind/down.sh — delete the kind cluster examples/kind/up.sh made
# (everything in it goes with it). The images stay in Docker; --images
# removes them too.
#
#   examples/kind/down.sh [--images]
set -euo pipefail

CLUSTER=${CLUSTER:-danki}
APP_IMAGE=danki.dev/sample-app
DANKI_IMAGE=danki.dev/argo-rollouts-danki:dev

die() {
	printf 'examples/kind/down.sh: %s\n' "$*" >&2
	exit 1
}

images=0
for arg in "$@"; do
	case $arg in
	--images) images=1 ;;
	*) die "unknown argument $arg (usage: examples/kind/down.sh [--images])" ;;
	esac
done

command -v kind >/dev/null 2>&1 || die "kind not found: install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
command -v docker >/dev/null 2>&1 || die "docker not found: kind clusters live in Docker"
docker info >/dev/null 2>&1 || die "docker is installed but its engine does not answer (docker info failed): start Docker"

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
	echo "==> deleting kind cluster $CLUSTER" >&2
	kind delete cluster --name "$CLUSTER"
else
	echo "==> no kind cluster named $CLUSTER: nothing to delete" >&2
fi

if [ "$images" = 1 ]; then
	echo "==> removing images $APP_IMAGE:v1 $APP_IMAGE:v2 $DANKI_IMAGE" >&2
	docker image rm "$APP_IMAGE:v1" "$APP_IMAGE:v2" "$DANKI_IMAGE" || true
fi
