#!/usr/bin/env bash
# Builds danki's release files (make release) into OUT (default dist/):
#
#   danki-<os>-<arch>          static (CGO_ENABLED=0), -trimpath, version by -ldflags
#   checksums.txt              sha256sum format: `sha256sum -c checksums.txt` checks them
#   argo-rollouts-config.yaml  deploy/http with this version's URL and the sha256 of
#                              danki-linux-amd64 filled in (docs/install.md, 1b)
#   argo-rollouts-values.yaml  deploy/helm/argo-rollouts-values.yaml, init image at this version
#   VERSION                    the version (hack/version.sh unless $VERSION is set)
#
#   hack/release.sh [OUT [OS/ARCH...]]   # default: linux and darwin × amd64 and arm64
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/dist}
[ $# -gt 0 ] && shift
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
version=${VERSION:-$("$repo/hack/version.sh")}
# The in-repo version the manifests name (deploy/gate/kustomization.yaml,
# the chart's appVersion); the released copies get $version instead.
repo_version=v0.1.0
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false CGO_ENABLED=0

rm -rf "$out"
mkdir -p "$out"
echo "$version" >"$out/VERSION"
for p in "${platforms[@]}"; do
	os=${p%/*} arch=${p#*/}
	echo "release: building danki-$os-$arch ($version)" >&2
	(cd "$repo" && GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" \
		-o "$out/danki-$os-$arch" ./cmd/danki)
done
(cd "$out" && sha256sum danki-* >checksums.txt)

# The plugin-by-URL snippet: Argo downloads danki-linux-amd64 and checks it.
asset=danki-linux-amd64
sum=$(awk -v f="$asset" '$2 == f {print $1}' "$out/checksums.txt")
if [ -n "$sum" ]; then
	{
		echo "# danki $version from its GitHub release, checked by sha256 (hack/release.sh; template: deploy/http)."
		sed -e '/^#/d' -e "s|/download/vX/|/download/$version/|" -e "s|SHA256_OF_$asset|$sum|" \
			"$repo/deploy/http/argo-rollouts-config.yaml"
	} >"$out/argo-rollouts-config.yaml"
else
	echo "release: no $asset built: no argo-rollouts-config.yaml" >&2
fi
sed "s|ghcr.io/danki-dev/danki-plugin:$repo_version|ghcr.io/danki-dev/danki-plugin:$version|" \
	"$repo/deploy/helm/argo-rollouts-values.yaml" >"$out/argo-rollouts-values.yaml"
cat "$out/checksums.txt"
