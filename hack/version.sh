#!/usr/bin/env bash
# danki's versions, the one place they are written.
#
#   hack/version.sh               the build's version: the nearest v* tag (git describe:
#                                 v0.1.0, or v0.1.0-3-gabc1234 after it, -dirty with local
#                                 changes); without a tag v0.0.0-dev.<commit>, without git
#                                 v0.0.0-dev. Valid as SemVer, a Helm chart version and an
#                                 image tag. make build and make release use it.
#   hack/version.sh --manifests   the version this tree's manifests name: deploy/gate's image
#                                 tag, deploy/helm/danki's version and appVersion, the init
#                                 image of deploy/helm/argo-rollouts-values.yaml (test/release
#                                 checks they agree with it)
#   hack/version.sh --set vX.Y.Z  writes vX.Y.Z into those manifests and into this script
#                                 (before tagging vX.Y.Z)
#
# A release (hack/release.sh) writes every file that names a version — the binaries'
# -X main.version, checksums.txt's binaries, deploy/http's URL, the gate's image tag, the
# chart's version and appVersion, the init image — at the build's version, so what a user
# installs from one release names one version.
set -euo pipefail
cd "$(dirname "$0")/.."

manifests_version=v0.1.0

semver='^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'

case ${1:-} in
--manifests)
	echo "$manifests_version"
	;;
--set)
	v=${2:?usage: hack/version.sh --set vX.Y.Z}
	if ! [[ $v =~ $semver ]]; then
		echo "hack/version.sh: $v is not vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2
		exit 1
	fi
	old=$manifests_version
	sed -i "s|^manifests_version=$old\$|manifests_version=$v|" hack/version.sh
	sed -i -e "s|^version: ${old#v}\$|version: ${v#v}|" -e "s|^appVersion: $old\$|appVersion: $v|" \
		deploy/helm/danki/Chart.yaml
	sed -i "s|^  newTag: $old\$|  newTag: $v|" deploy/gate/kustomization.yaml
	sed -i "s|ghcr.io/danki-dev/danki-plugin:$old\$|ghcr.io/danki-dev/danki-plugin:$v|" \
		deploy/helm/argo-rollouts-values.yaml
	echo "hack/version.sh: manifests $old -> $v (go test ./test/release -run TestOneVersion checks)" >&2
	;;
'')
	if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
		echo "$v"
	elif c=$(git describe --always --dirty 2>/dev/null); then
		echo "v0.0.0-dev.$c"
	else
		echo v0.0.0-dev
	fi
	;;
*)
	echo "usage: hack/version.sh [--manifests | --set vX.Y.Z]" >&2
	exit 2
	;;
esac
