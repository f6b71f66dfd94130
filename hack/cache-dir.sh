#!/usr/bin/env bash
# Prints danki's cache directory: the lab's builds (lab/bin, lab/venv, m2),
# the tools (tools/bin) and the running lab's state (lab/run, lab/kubeconfig).
#
#   $DANKI_CACHE, when set;
#   else the clone's .cache, kept as it is when it exists (a directory or a
#   link);
#   else .cache is made a link to one cache per machine outside the clone,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/danki, so every clone on the machine — a
#   CI run's fresh clone too — reuses the lab a clone built once (~25 min
#   cold) instead of building it again.
#
# The state of a running lab lives there too: one lab per machine, as its
# fixed loopback ports already require.
set -euo pipefail

if [ -n "${DANKI_CACHE:-}" ]; then
	echo "$DANKI_CACHE"
	exit 0
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -e "$repo/.cache" ] && [ ! -L "$repo/.cache" ]; then
	shared=${XDG_CACHE_HOME:-$HOME/.cache}/danki
	mkdir -p "$shared"
	ln -s "$shared" "$repo/.cache"
fi
echo "$repo/.cache"
