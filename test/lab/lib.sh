# Shared helpers for the lab scripts (sourced, not run).
# shellcheck shell=bash

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${DANKI_CACHE:-$repo/.cache}
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

log() { printf '[lab %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kubectl_lab() { kubectl --kubeconfig "$kubeconfig" "$@" 2>&1 | grep -v 'version difference' ; return "${PIPESTATUS[0]}"; }

# alive NAME: the process the lab started under NAME is still running.
alive() {
	local pid
	pid=$(cat "$pids/$1.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && owned "$pid"
}

# owned PID: the process runs a binary from the lab's bin dir (a pid file can
# outlive its process and the PID be reused: never signal someone else's).
owned() {
	local exe
	exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
	case $exe in "$bin"/* | "$(readlink -f "$bin")"/*) return 0 ;; esac
	# Symlinked binaries (e.g. Debian's prometheus) resolve outside bin.
	local b
	for b in "$bin"/*; do [ -L "$b" ] && [ "$(readlink -f "$b")" = "$exe" ] && return 0; done
	return 1
}

# start NAME CMD...: starts CMD in its own session (so it outlives this
# script and can be stopped as a group), logging to $logs/NAME.log.
start() {
	local name=$1; shift
	if alive "$name"; then log "$name: already running (pid $(cat "$pids/$name.pid"))"; return; fi
	mkdir -p "$pids" "$logs"
	setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
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

# stop NAME: TERM, then KILL after a grace period (kube-apiserver sometimes
# ignores TERM), for a process the lab started.
stop() {
	local name=$1 pid
	pid=$(cat "$pids/$name.pid" 2>/dev/null) || return 0
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && owned "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name: did not stop on TERM, killing"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		log "$name: stopped (pid $pid)"
	fi
	rm -f "$pids/$name.pid"
}
