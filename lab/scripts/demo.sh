#!/usr/bin/env bash
# make demo: start the lab (building what is missing), run `danki-lab demo`
# (baseline vs danki rollout under user traffic, then a bad version), and stop
# the lab again — unless it was already running, then it is left as it was.
# Results: $DEMO_OUT (default demo-results/): results.md, results.json,
# latency.svg, latency.png.
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# go.mod asks for a newer go than Debian's: let the go command fetch it.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

out=${DEMO_OUT:-$repo/demo-results}
[ "$(id -u)" = 0 ] || die "the lab's pod network (ip netns, veth) needs root: run make demo as root"

if alive kube-apiserver && alive argo-rollouts; then
	log "demo: using the running lab (left running afterwards)"
	build_danki danki-lab
else
	log "demo: starting the lab (first run builds istiod, Argo Rollouts, … — see lab/README.md)"
	# A teardown that leaves processes behind fails make demo too.
	trap '"$here/down.sh" || exit 1' EXIT
	"$here/up.sh" # builds danki-lab too (mesh.sh)
fi
cd "$repo"
"$bin/danki-lab" demo --root "$repo" --kubeconfig "$kubeconfig" --out "$out" "$@"
