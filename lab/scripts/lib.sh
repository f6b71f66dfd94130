# Shared helpers for the lab scripts (sourced, not run).
# shellcheck shell=bash

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$("$repo/hack/cache-dir.sh")
bin=$cache/lab/bin
run=$cache/lab/run
pids=$run/pids
logs=$run/logs
kubeconfig=$cache/lab/kubeconfig

# Fixed loopback ports, away from the usual defaults so a lab can run beside
# a developer's own cluster tools.
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-10357}
SCHEDULER_PORT=${SCHEDULER_PORT:-10359}
KWOK_PORT=${KWOK_PORT:-10347}
LAB_NODE=${LAB_NODE:-danki-lab-node}
LAB_POD_CIDR=${LAB_POD_CIDR:-10.244.0.0/24}
# The pod network: a network namespace and the veth pair into it.
NETNS=${NETNS:-danki-lab}
HOST_DEV=${HOST_DEV:-danki-lab0}
NS_DEV=${NS_DEV:-danki-lab1}
# The lab runner's group in each cgroup v1 hierarchy: its default parent
# (lab/runner.DefaultCgroupParent), named like the network namespace.
# Deriving it from NETNS keeps a test that runs down.sh with a NETNS no lab
# uses (lab/scripts/teardown_test.go) away from a running lab's groups.
LAB_CGROUP=${LAB_CGROUP:-$NETNS}

log() { printf '[lab %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kubectl_lab() { kubectl --kubeconfig "$kubeconfig" "$@" 2>&1 | { grep -v 'version difference' || true; }; return "${PIPESTATUS[0]}"; }

# build_danki NAME...: builds danki's own binaries into $bin: danki (the Argo
# Rollouts plugins, what the lab's controller runs) and danki-lab (the lab
# runner and the demo; not part of a release). A failed build fails the lab:
# a binary left from an earlier build would test code that no longer exists.
build_danki() {
	local name pkg
	for name in "$@"; do
		case $name in
		danki) pkg=./cmd/danki ;;
		danki-lab) pkg=./lab/cmd/danki-lab ;;
		*) die "build_danki: no such binary: $name (danki, danki-lab)" ;;
		esac
		log "$name: building $bin/$name (go build $pkg)"
		mkdir -p "$bin"
		# Into a new file, then renamed: the running lab may be executing the old one.
		(cd "$repo" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$bin/$name.new" "$pkg") ||
			die "go build $pkg failed (see above)"
		mv -f "$bin/$name.new" "$bin/$name"
	done
}

# alive NAME: the process the lab started under NAME is still running.
alive() {
	local pid
	pid=$(cat "$pids/$1.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && owned "$pid"
}

# owned PID: the process runs a binary from the lab's bin dir, or a copy of
# one under its run dir (the Argo controller runs its plugins from
# $run/argo/plugin-bin). A pid file can outlive its process and the PID be
# reused: never signal someone else's.
owned() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
	case $exe in "$bin"/* | "$(readlink -f "$bin")"/* | "$run"/* | "$(readlink -f "$run")"/*) return 0 ;; esac
	# Symlinked binaries (e.g. Debian's prometheus) resolve outside bin.
	local b
	for b in "$bin"/*; do [ -L "$b" ] && [ "$(readlink -f "$b")" = "$exe" ] && return 0; done
	return 1
}

# running PID: the process exists and is not a zombie (an exited process
# whose parent has not reaped it yet is gone for our purposes).
running() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# session_members SID: the PIDs of the processes in session SID. start runs
# every lab process with setsid, so its PID is its session's ID and the
# session holds what it started too (the Argo controller's plugin
# processes), even after they are orphaned: go-plugin starts plugins in the
# controller's session and the controller does not stop them on TERM.
session_members() {
	local f stat fields
	for f in /proc/[0-9]*/stat; do
		read -r stat 2>/dev/null <"$f" || continue
		# After "comm)": state ppid pgrp session ...
		read -ra fields <<<"${stat##*) }"
		[ "${fields[3]:-}" = "$1" ] || continue
		f=${f#/proc/}
		echo "${f%/stat}"
	done
}

# terminate WHAT PID...: TERM, then KILL what is still running after
# $TERM_WAIT seconds (default 10: kube-apiserver sometimes ignores TERM).
# Fails if a process survives KILL.
terminate() {
	local what=$1 pid left=() still=(); shift
	kill -TERM "$@" 2>/dev/null || true
	for _ in $(seq 1 $((${TERM_WAIT:-10} * 4))); do
		left=()
		for pid in "$@"; do running "$pid" && left+=("$pid"); done
		[ ${#left[@]} -gt 0 ] || return 0
		sleep 0.25
	done
	log "$what: pids ${left[*]} did not stop on TERM, killing"
	kill -KILL "${left[@]}" 2>/dev/null || true
	for _ in $(seq 1 20); do
		still=()
		for pid in "${left[@]}"; do running "$pid" && still+=("$pid"); done
		[ ${#still[@]} -gt 0 ] || return 0
		sleep 0.25
	done
	log "$what: pids ${still[*]} survive KILL"
	return 1
}

# start NAME CMD...: starts CMD in its own session (so it outlives this
# script and can be stopped with what it starts), logging to $logs/NAME.log.
# DANKI_LAB_RUN in its environment, inherited by what it starts, tells
# lab_leftovers it is the lab's.
start() {
	local name=$1; shift
	if alive "$name"; then log "$name: already running (pid $(cat "$pids/$name.pid"))"; return; fi
	mkdir -p "$pids" "$logs"
	DANKI_LAB_RUN=$run setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
	echo $! >"$pids/$name.pid"
	log "$name: started (pid $!, log $logs/$name.log)"
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
	local what=$1 timeout=$2; shift 2
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || die "$what not ready after ${timeout}s (logs: $logs)"
		sleep 0.5
	done
	log "$what: ready"
}

# stop NAME [SECONDS]: stops the process the lab started under NAME and
# everything else in its session that runs one of the lab's binaries (the
# Argo controller's plugin processes): TERM, then KILL after SECONDS
# (default 10).
stop() {
	local name=$1 pid procs=() stopped=() p ok=1
	local TERM_WAIT=${2:-} # terminate's; empty: its default
	pid=$(cat "$pids/$name.pid" 2>/dev/null) || return 0
	if [ -n "$pid" ]; then
		# The leader first: a controller still running starts again the
		# plugin processes it finds dead (Argo's workers do), after they were
		# listed. Then what is left in its session, listed anew until none is.
		if running "$pid" && owned "$pid"; then
			terminate "$name" "$pid" || ok=
			stopped+=("$pid")
		fi
		for _ in 1 2 3; do
			procs=()
			for p in $(session_members "$pid"); do running "$p" && owned "$p" && procs+=("$p"); done
			[ ${#procs[@]} -gt 0 ] || break
			terminate "$name" "${procs[@]}" || ok=
			stopped+=("${procs[@]}")
		done
	fi
	if [ ${#stopped[@]} -gt 0 ]; then
		# On failure, go on stopping the rest: down.sh's final check names
		# what survived and fails.
		if [ -n "$ok" ]; then
			log "$name: stopped (pids ${stopped[*]})"
		else
			log "ERROR: $name: could not stop all of pids ${stopped[*]}"
		fi
	fi
	rm -f "$pids/$name.pid"
}

# lab_leftovers: one line "PID COMMAND" per running process the lab started:
# what start started and everything that inherited its environment (the Argo
# controller's plugin processes), any program run from the lab's run dir (the
# controller's plugin copies, even orphaned by an older teardown), and pods'
# JVMs (a jar from the bin dir). Not the lab's binaries run by others:
# test/testenv runs etcd and kube-apiserver from the bin dir too.
lab_leftovers() {
	local f pid exe args arg envs lab
	for f in /proc/[0-9]*/exe; do
		pid=${f#/proc/}; pid=${pid%/exe}
		{ [ "$pid" != $$ ] && running "$pid"; } || continue
		exe=$(readlink "$f" 2>/dev/null) || continue
		mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || continue
		lab=
		[[ $exe == "$run"/* ]] && lab=1
		for arg in "${args[@]:1}"; do [[ $arg == "$bin"/*.jar ]] && lab=1; done
		if [ -z "$lab" ] && mapfile -d '' -t envs 2>/dev/null <"/proc/$pid/environ"; then
			for arg in "${envs[@]}"; do [ "$arg" = "DANKI_LAB_RUN=$run" ] && lab=1; done
		fi
		[ -z "$lab" ] || echo "$pid ${args[*]}"
	done
}

# lab_cgroup_leftovers: the lab runner's cgroup v1 groups still present, one
# directory a line. The runner creates $LAB_CGROUP below its own group in
# each hierarchy it uses (cpu, cpuacct, memory) and removes it when it stops.
lab_cgroup_leftovers() {
	local mnt
	# mountinfo: "… MOUNTPOINT OPTS … - cgroup SOURCE SUPEROPTS": v1 hierarchies only.
	while read -r mnt; do
		find "$mnt" -mindepth 1 -type d -name "$LAB_CGROUP" -prune -print 2>/dev/null
	done < <(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup") print $5; break } }' /proc/self/mountinfo)
}

# lab_runner_cgroups: the groups the lab's runner created (its log's line
# when it applied pods' resources), space-separated; empty if it ran
# without cgroups.
lab_runner_cgroups() {
	sed -n 's/.*applied through cgroup v1.* groups="\[\([^]]*\)\]".*/\1/p' "$logs/lab-runner.log" 2>/dev/null | tail -n 1
}

# describe_cgroups DIR...: each group's creation time, members and child
# groups, one line each (why a group is left: a process that escaped, or a
# group made anew).
describe_cgroups() {
	local d
	for d in "$@"; do
		printf '  %s: created %s, members [%s], groups [%s]\n' "$d" "$(stat -c %y "$d" 2>/dev/null)" \
			"$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')" \
			"$(find "$d" -mindepth 1 -type d -printf '%P ' 2>/dev/null)" >&2
	done
}

# remove_cgroups DIR...: kills what runs in each group and below it, then
# removes the groups, deepest first.
remove_cgroups() {
	local d pid
	for d in "$@"; do
		while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done < <(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)
		sleep 0.2
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
}
