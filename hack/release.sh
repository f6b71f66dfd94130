#!/usr/bin/env bash
# Builds danki's release files (make release) into OUT (default dist/), every
# one at the same version (hack/version.sh, or $VERSION):
#
#   danki-<os>-<arch>          static (CGO_ENABLED=0), -trimpath, version by -ldflags
#   checksums.txt              sha256sum format: `sha256sum -c checksums.txt` checks them
#   argo-rollouts-config.yaml  deploy/http with this version's URL and the sha256 of
#                              danki-linux-amd64 filled in (docs/install.md, 1b)
#   argo-rollouts-values.yaml  deploy/helm/argo-rollouts-values.yaml, init image at this version
#   deploy/                    the tree's deploy/ with this version everywhere it names one:
#                              deploy/gate's image tag, the chart's version and appVersion
#                              (deploy/helm/danki), the init image, deploy/http (the file above)
#   VERSION                    the version; the images are tagged with it (images/*/Dockerfile)
#   images/danki-linux-<arch>.tar, images/danki-plugin-linux-<arch>.tar
#                              the two images per linux platform built, as archives for
#                              `kind load image-archive` / `docker load`, built without a
#                              Docker daemon (hack/ociarchive; their cp is hack/ocicp)
#   images/checksums.txt       their sha256, sha256sum format
#
#   hack/release.sh [OUT [OS/ARCH...]]   # default: linux and darwin × amd64 and arm64
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/dist}
[ $# -gt 0 ] && shift
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
version=${VERSION:-$("$repo/hack/version.sh")}
# The version the tree's manifests name; the released copies name $version.
manifests_version=$("$repo/hack/version.sh" --manifests)
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false CGO_ENABLED=0

if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$ ]]; then
	echo "release: version $version is not vMAJOR.MINOR.PATCH[-PRERELEASE] (a tag, a chart version)" >&2
	exit 1
fi
# A final version (a release tag) is the one the tree's manifests were bumped
# to: tagging v0.2.0 on a tree whose deploy/gate still names v0.1.0 is a
# mistake, not a release.
if [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] && [ "$version" != "$manifests_version" ]; then
	echo "release: $version is a final version but the manifests name $manifests_version: hack/version.sh --set $version first" >&2
	exit 1
fi

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

# deploy/ at this version: each substitution is of the exact line the tree
# writes (hack/version.sh --set writes the same lines); test/release checks
# that no file of the copy names another version.
cp -R "$repo/deploy" "$out/deploy"
sed -i "s|^  newTag: $manifests_version\$|  newTag: $version|" "$out/deploy/gate/kustomization.yaml"
sed -i -e "s|^version: ${manifests_version#v}\$|version: ${version#v}|" \
	-e "s|^appVersion: $manifests_version\$|appVersion: $version|" "$out/deploy/helm/danki/Chart.yaml"
sed -i "s|ghcr.io/danki-dev/danki-plugin:$manifests_version\$|ghcr.io/danki-dev/danki-plugin:$version|" \
	"$out/deploy/helm/argo-rollouts-values.yaml"
cp "$out/deploy/helm/argo-rollouts-values.yaml" "$out/argo-rollouts-values.yaml"

# The plugin-by-URL registration: Argo downloads danki-linux-amd64 and checks it.
asset=danki-linux-amd64
sum=$(awk -v f="$asset" '$2 == f {print $1}' "$out/checksums.txt")
if [ -n "$sum" ]; then
	{
		echo "# danki $version from its GitHub release, checked by sha256 (hack/release.sh; template: deploy/http)."
		sed -e '/^#/d' -e "s|/download/vX/|/download/$version/|" -e "s|SHA256_OF_$asset|$sum|" \
			"$repo/deploy/http/argo-rollouts-config.yaml"
	} >"$out/argo-rollouts-config.yaml"
	cp "$out/argo-rollouts-config.yaml" "$out/deploy/http/argo-rollouts-config.yaml"
else
	echo "release: no $asset built: no argo-rollouts-config.yaml" >&2
	rm -r "$out/deploy/http"
fi

# The images as archives (hack/ociarchive), for the linux platforms built;
# their files' times and created time are SOURCE_DATE_EPOCH, by default the
# commit's time, so a release of one commit gives the same bytes.
linux_platforms=()
for p in "${platforms[@]}"; do
	if [ "${p%/*}" = linux ]; then linux_platforms+=("$p"); fi
done
if [ ${#linux_platforms[@]} -gt 0 ]; then
	cpdir=$(mktemp -d)
	trap 'rm -rf "$cpdir"' EXIT
	for p in "${linux_platforms[@]}"; do
		(cd "$repo" && GOOS=linux GOARCH=${p#*/} go build -trimpath -ldflags "-s -w" -o "$cpdir/cp-linux-${p#*/}" ./hack/ocicp)
	done
	revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || true)
	SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}
	export SOURCE_DATE_EPOCH
	list=$(IFS=,; echo "${linux_platforms[*]}")
	(cd "$repo" && go run ./hack/ociarchive --dist "$out" --out "$out/images" --cp-dir "$cpdir" \
		--version "$version" --revision "$revision" --platforms "$list")
	(cd "$out/images" && sha256sum -- *.tar >checksums.txt)
	cat "$out/images/checksums.txt"
fi
cat "$out/checksums.txt"
