#!/usr/bin/env bash
# Checks every shell script in the repository: `bash -n` (syntax) and
# the shellcheck tool (Debian's package; installed with apt-get when missing and
# running as root). Scripts are the tracked and new (not ignored) files named
# *.sh or starting with a sh/bash shebang.
#
#   hack/shellcheck.sh            # all scripts
#   hack/shellcheck.sh FILE...    # just these
set -euo pipefail

cd "$(dirname "$0")/.."

die() { echo "hack/shellcheck.sh: $*" >&2; exit 1; }

if ! command -v shellcheck >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 ||
		die "shellcheck not found and no apt-get: install it (https://github.com/koalaman/shellcheck#installing)"
	[ "$(id -u)" = 0 ] || die "shellcheck not found: install it (sudo apt-get install -y shellcheck)"
	echo "hack/shellcheck.sh: installing shellcheck (apt-get)" >&2
	if ! apt-get install -y --no-install-recommends shellcheck >/dev/null; then
		apt-get update >/dev/null
		apt-get install -y --no-install-recommends shellcheck >/dev/null
	fi
fi

is_shell_script() {
	case $1 in
	*.sh) return 0 ;;
	esac
	local first
	IFS= read -r first <"$1" 2>/dev/null || return 1
	[[ $first =~ ^\#!.*[/[:space:]](ba)?sh([[:space:]]|$) ]]
}

scripts=("$@")
if [ ${#scripts[@]} -eq 0 ]; then
	while IFS= read -r f; do
		[ -f "$f" ] && is_shell_script "$f" && scripts+=("$f")
	done < <(git ls-files --cached --others --exclude-standard)
fi
[ ${#scripts[@]} -gt 0 ] || die "no shell scripts found"

failed=0
for f in "${scripts[@]}"; do
	bash -n "$f" || { echo "bash -n: $f has syntax errors" >&2; failed=1; }
done
# -x follows `source` directives; their `# shellcheck source=` paths are
# relative to the repository root, where this runs.
shellcheck -x "${scripts[@]}" || failed=1

if [ "$failed" -ne 0 ]; then
	die "findings above (${#scripts[@]} scripts checked)"
fi
echo "hack/shellcheck.sh: ${#scripts[@]} scripts pass bash -n and shellcheck $(shellcheck --version | sed -n 's/^version: //p')" >&2
