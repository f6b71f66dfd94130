#!/usr/bin/env bash
# Builds the Spring Boot sample app: Maven (pom.xml: spring-boot-starter-parent
# 3.5.7, starter-web, validation, actuator, micrometer-registry-prometheus)
# → one runnable jar (spring-boot-maven-plugin repackage).
#
#   examples/sample-app-spring/build.sh [OUT_DIR]   # default: ./build → OUT_DIR/sample-app-spring.jar
#
# MAVEN_REPO_LOCAL sets Maven's local repository (default: Maven's own,
# ~/.m2/repository); the lab's build keeps it in its cache, so a rebuild
# downloads nothing. MAVEN_OFFLINE=1 adds -o.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
command -v mvn >/dev/null || { echo "sample-app-spring: mvn not found: install Maven 3.8+ (Debian: maven)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mvn_args=(-B -q --no-transfer-progress -Dstyle.color=never)
[ -z "${MAVEN_REPO_LOCAL:-}" ] || mvn_args+=("-Dmaven.repo.local=$MAVEN_REPO_LOCAL")
[ "${MAVEN_OFFLINE:-0}" != 1 ] || mvn_args+=(-o)

# Maven's target/ goes to the scratch directory: the source tree stays clean.
mvn "${mvn_args[@]}" -f "$here/pom.xml" -DbuildDirectory="$work/target" package
cp "$work/target/sample-app-spring.jar" "$out/sample-app-spring.jar"
echo "built $out/sample-app-spring.jar ($(du -k "$out/sample-app-spring.jar" | cut -f1) KiB)" >&2
