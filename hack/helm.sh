#!/usr/bin/env bash
# Runs helm, built from the Go module proxy into $DANKI_CACHE/tools/bin (like
# staticcheck; ~2.5 min cold on 2 cores, then cached). The pin is here.
#
#   hack/helm.sh --path           # build if needed, print the binary's path
#   hack/helm.sh lint deploy/helm/danki
#   hack/helm.sh check            # make test's static check: lint + template of deploy/helm/danki
set -euo pipefail

HELM_VERSION=v3.22.0

repo=$(cd "$(dirname "$0")/.." && pwd)
tools=${DANKI_CACHE:-$repo/.cache}/tools/bin
helm=$tools/helm
stamp=$tools/helm.version
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

if [ ! -x "$helm" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$HELM_VERSION" ]; then
	echo "hack/helm.sh: building helm $HELM_VERSION into $tools (~2.5 min cold)" >&2
	mkdir -p "$tools"
	GOBIN=$tools go install -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
		"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	echo "$HELM_VERSION" >"$stamp"
fi

case ${1:-} in
--path) echo "$helm" ;;
check)
	chart=$repo/deploy/helm/danki
	"$helm" lint --strict "$chart"
	"$helm" lint --strict "$chart" --set certificates.certManager.enabled=true
	# Render both certificate modes; the API server checks the output in
	# test/manifests (TestHelmChart).
	# (--kube-version: the lab's API server; helm's own default is 1.20.)
	"$helm" template danki "$chart" --namespace danki-gate --kube-version 1.34.4 >/dev/null
	"$helm" template danki "$chart" --namespace danki-gate --kube-version 1.34.4 --set certificates.certManager.enabled=true >/dev/null
	echo "hack/helm.sh: $chart lints and renders (self-managed and cert-manager certificates)" >&2
	;;
*) exec "$helm" "$@" ;;
esac
