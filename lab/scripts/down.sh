#!/usr/bin/env bash
# Stops the processes lab/scripts/up.sh started (and only those), each with what
# it started (the Argo controller's plugin processes), and removes the lab's
# state. Safe to run when nothing is running. Then checks that nothing the lab
# started is still running (lib.sh's lab_leftovers: its processes and what
# they started, plugin copies, pods' JVMs), nor its network namespace, nor
# the lab runner's cgroups (lab_cgroup_leftovers; groups of that name its runner
# did not create are removed with a warning): if something is, it names
# it, kills or removes it and fails (a teardown bug).
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"

# The data plane first (Argo, Prometheus, Envoy, istiod, the lab runner and
# its pod processes, the network namespace), then the control plane.
"$here/mesh.sh" down

# Reverse start order: clients before the API server, etcd last.
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
	stop "$name"
done
rm -rf "$run/etcd" "$pids" "$run/kwok-node-stages.yaml"

leftovers=$(lab_leftovers)
if [ -n "$leftovers" ]; then
	log "ERROR: still running after lab down (started by the lab, missed by its teardown):"
	mapfile -t leftover_lines <<<"$leftovers"
	printf '  %s\n' "${leftover_lines[@]}" >&2
	mapfile -t leftover_pids < <(cut -d' ' -f1 <<<"$leftovers")
	terminate leftovers "${leftover_pids[@]}" || true
	die "lab down left ${#leftover_pids[@]} processes behind (killed now, see above)"
fi
cgroups=$(lab_cgroup_leftovers)
if [ -n "$cgroups" ]; then
	mapfile -t found <<<"$cgroups"
	# Only the groups this lab's runner created are its teardown's to
	# remove; a group of the same name elsewhere (below another process
	# group's memory cgroup: an earlier lab run from another session) is
	# not, and is removed with a warning.
	runner_groups=" $(lab_runner_cgroups) "
	cgroup_dirs=() others=()
	for d in "${found[@]}"; do
		if [[ $runner_groups == *" $d "* ]]; then cgroup_dirs+=("$d"); else others+=("$d"); fi
	done
	if [ ${#others[@]} -gt 0 ]; then
		log "WARNING: removing ${#others[@]} group(s) named $LAB_CGROUP that this lab's runner did not create (its groups: [$(lab_runner_cgroups)]):"
		describe_cgroups "${others[@]}"
		remove_cgroups "${others[@]}"
	fi
	if [ ${#cgroup_dirs[@]} -gt 0 ]; then
		log "ERROR: the lab runner's cgroups still exist after lab down (its teardown removes them):"
		describe_cgroups "${cgroup_dirs[@]}"
		# Why: the runner logs its failed removals, how long its stop took
		# and the groups it removed.
		grep -hE 'level=(WARN|ERROR)|pods stopped|cgroups removed' "$logs/lab-runner.log" 2>/dev/null | tail -n 8 | sed 's/^/  runner: /' >&2 || true
		tail -n 3 "$logs/lab-runner.log" 2>/dev/null | sed 's/^/  runner log ends: /' >&2 || true
		remove_cgroups "${cgroup_dirs[@]}"
		die "lab down left ${#cgroup_dirs[@]} cgroup(s) behind (removed now, see above)"
	fi
fi
if command -v ip >/dev/null && ip netns list 2>/dev/null | grep -qw "$NETNS"; then
	die "network namespace $NETNS still exists after lab down"
fi
log "lab down: nothing left running"
