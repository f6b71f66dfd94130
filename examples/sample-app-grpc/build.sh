#!/usr/bin/env bash
# Builds the gRPC sample app: the HTTP sample app's jar (its own build.sh,
# javac only), installed into the local Maven repository as
# dev.danki:sample-app:local, then Maven (pom.xml: grpc-java, protobuf, protoc
# and the shade plugin, all pinned) → one runnable fat jar.
#
#   examples/sample-app-grpc/build.sh [OUT_DIR]   # default: ./build → OUT_DIR/sample-app-grpc.jar
#
# MAVEN_REPO_LOCAL sets Maven's local repository (default: Maven's own,
# ~/.m2/repository); the lab's build keeps it in its cache, so a rebuild
# downloads nothing. MAVEN_OFFLINE=1 adds -o.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
command -v mvn >/dev/null || { echo "sample-app-grpc: mvn not found: install Maven 3.8+ (Debian: maven)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mvn_args=(-B -q --no-transfer-progress -Dstyle.color=never)
[ -z "${MAVEN_REPO_LOCAL:-}" ] || mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
[ "${MAVEN_OFFLINE:-0}" != 1 ] || mvn_args+=(-o)

"$here/../sample-app/build.sh" "$work/http"
mvn "${mvn_args[@]}" org.apache.maven.plugins:maven-install-plugin:3.1.2:install-file \
	-Dfile="$work/http/sample-app.jar" -DgroupId=dev.danki -DartifactId=sample-app -Dversion=local -Dpackaging=jar
# Maven's target/ goes to the scratch directory: the source tree stays clean.
mvn "${mvn_args[@]}" -f "$here/pom.xml" -DbuildDirectory="$work/target" package
cp "$work/target/sample-app-grpc.jar" "$out/sample-app-grpc.jar"
echo "built $out/sample-app-grpc.jar ($(du -k "$out/sample-app-grpc.jar" | cut -f1) KiB)" >&2
