#!/usr/bin/env bash
# Stops the processes test/lab/up.sh started (and only those) and removes the
# lab's state. Safe to run when nothing is running.
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "$0")/lib.sh"

# The data plane first (Argo, Prometheus, Envoy, istiod, the lab runner and
# its pod processes, the network namespace), then the control plane.
"$here/mesh.sh" down

# Reverse start order: clients before the API server, etcd last.
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
	stop "$name"
done
rm -rf "$run/etcd" "$pids" "$run/kwok-node-stages.yaml"
log "lab down"
