#!/usr/bin/env bash
# make compat: the oldest Argo Rollouts controller danki supports, in the real
# lab. Builds that controller (lab/build/argo-v1.8, beside the default v1.10.2
# that `make test` runs) and runs the end-to-end tests that drive danki's three
# plugin kinds through it, each bringing its own lab up and down with
# ARGO_VERSION=$COMPAT_ARGO_VERSION (its own CRDs too; lab/scripts/mesh.sh):
#
#   TestLabDankiRollout, its first two subtests: danki/warmup (step) warms the
#     canary at weight 0, danki/istio (traffic router) ramps its weight through
#     the rungs and on abort puts every user back on stable at once,
#     danki/latency (metric provider, Prometheus) passes the analysis step;
#   TestLabBlueGreenLoadAnalysis: danki/latency with source: load as a
#     BlueGreen prePromotionAnalysis, passing a good preview, failing a slow one.
#
# Writes $COMPAT_OUT (default compat-results/): compat.md (versions, date,
# each test's result and duration) and e2e.log. Needs root (as make test's
# end-to-end tests) and no lab running. ~9 min with the lab built.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

# The matrix's oldest row; docs/install.md, "Compatibility", names it
# (lab/scripts/compat_test.go checks that they agree).
COMPAT_ARGO_VERSION=${COMPAT_ARGO_VERSION:-v1.8.5}
# As make test runs v1.10.2: the controller installed from its own release's
# manifests/base under its ServiceAccount, danki by URL and sha256
# (LAB_ARGO_INSTALL=pod, mesh.sh's default; process runs it locally).
export LAB_ARGO_INSTALL=${LAB_ARGO_INSTALL:-pod}
COMPAT_RUN='^(TestLabDankiRollout|TestLabBlueGreenLoadAnalysis)$/^(good_version|abort_mid-ramp|slow_version:_fails_the_pre-promotion)'

out=${COMPAT_OUT:-$repo/compat-results}
[ "$(id -u)" = 0 ] || die "the lab's pod network (ip netns, veth) needs root: run make compat as root"
if alive kube-apiserver || alive argo-rollouts; then
	die "a lab is running: make lab-down first (the end-to-end tests bring their own up and down)"
fi
mkdir -p "$out"

log "compat: building the Argo Rollouts controller $COMPAT_ARGO_VERSION (~7 min cold, cached after)"
ARGO_VERSION=$COMPAT_ARGO_VERSION "$here/build.sh" argo

started=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$SECONDS
log "compat: go test -run '$COMPAT_RUN' ./test/e2e/ with ARGO_VERSION=$COMPAT_ARGO_VERSION (log: $out/e2e.log)"
rc=0
(cd "$repo" && ARGO_VERSION=$COMPAT_ARGO_VERSION go test -count=1 -timeout 40m -v -run "$COMPAT_RUN" ./test/e2e/) >"$out/e2e.log" 2>&1 || rc=$?
took=$((SECONDS - t0))

# What ran: the controller each lab reported (mesh.sh's start_argo), the tests.
controllers=$(sed -n 's/.*argo-rollouts: controller \(v[^ ]*\).*/\1/p' "$out/e2e.log" | sort -u | paste -sd, -)
results=$(grep -E '^\s*--- (PASS|FAIL|SKIP): ' "$out/e2e.log" | sed -E 's/^\s*--- /| /; s/: / | /; s/ \(([0-9.]+s)\)$/ | \1 |/' || true)
verdict=PASS
[ "$rc" = 0 ] || verdict="FAIL (go test exit $rc)"
[ -n "$results" ] || verdict="FAIL (no test ran: see e2e.log)"
commit=$(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(cd "$repo" && git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit+=" (with uncommitted changes)"
{
	echo "# make compat: $verdict"
	echo
	echo "- date: $started, $((took / 60)) min $((took % 60)) s"
	echo "- Argo Rollouts controller: $COMPAT_ARGO_VERSION (reported by the running controller: ${controllers:-none seen})"
	echo "- danki: $commit; lab: $(uname -m), LAB_MESH=${LAB_MESH:-strict}, LAB_ARGO_INSTALL=$LAB_ARGO_INSTALL"
	echo "- go test -run '$COMPAT_RUN' ./test/e2e/"
	echo
	echo "| result | test | duration |"
	echo "|---|---|---|"
	echo "$results"
} >"$out/compat.md"
cat "$out/compat.md" >&2
[ "$verdict" = PASS ] || die "make compat: $verdict; see $out/e2e.log"
log "compat: $out/compat.md"
