#!/usr/bin/env bash
# Builds the sample app with the JDK alone (no Maven): generates the filter
# chain's classes, compiles with javac --release 17 and packs a runnable jar.
#
#   examples/sample-app/build.sh [OUT_DIR]     # default: ./build → OUT_DIR/sample-app.jar
#
# FILTERS (default 300) sets how many small classes the chain has: more classes
# means a longer warm-up.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
filters=${FILTERS:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen=$work/gen/dev/danki/sample
mkdir -p "$gen" "$work/classes"

# Each generated class does a little distinct work, so the JIT has to compile
# each one separately (as with a real service's many handlers and filters).
for ((i = 0; i < filters; i++)); do
	n=$(printf 'F%03d' "$i")
	case $((i % 5)) in
	0) body="long h = c.hash; for (int k = $((i % 7)); k < c.data.length; k += $((61 + i % 13))) h = (h ^ c.data[k]) * 0x100000001b3L; c.hash = h;" ;;
	1) body="c.sb.setLength(0); c.sb.append(\"$n:\").append(Long.toHexString(c.hash >>> $((i % 40)))); if ((c.hash & $((i % 7 + 1))) == 0) c.notes.put(\"$n\", c.sb.toString());" ;;
	2) body="int n = 0; for (int k = $((i % 11)); k < c.data.length; k += $((97 + i % 17))) if (Character.isLetter(c.data[k])) n++; c.hash += n * $((i + 3))L;" ;;
	3) body="String s = Long.toString(c.hash & 0xffffffL, $((16 + i % 20))); if (s.indexOf('$((i % 10))') >= 0) c.tags.add(s.substring(0, Math.min(4, s.length())));" ;;
	4) body="java.math.BigInteger b = java.math.BigInteger.valueOf(c.hash & 0xffffffffL).pow($((2 + i % 3))).mod(java.math.BigInteger.valueOf($((1000003 + i)))); c.hash ^= b.longValue() << $((i % 17));" ;;
	esac
	printf 'package dev.danki.sample;\n\nfinal class %s implements Filter {\n    @Override\n    public void apply(Ctx c) {\n        %s\n    }\n}\n' "$n" "$body" >"$gen/$n.java"
done
{
	printf 'package dev.danki.sample;\n\nimport java.util.List;\n\n/** Generated: the filter chain, in order. */\nfinal class Filters {\n    private Filters() {}\n\n    static final List<Filter> CHAIN = List.of(\n'
	for ((i = 0; i < filters; i++)); do
		sep=,; [ $i -eq $((filters - 1)) ] && sep=
		printf '        new F%03d()%s\n' "$i" "$sep"
	done
	printf '    );\n}\n'
} >"$gen/Filters.java"

mapfile -t sources < <(find "$here/src" "$work/gen" -name '*.java')
javac --release 17 -Xlint:all -Werror -d "$work/classes" "${sources[@]}"
jar --create --file "$out/sample-app.jar" --main-class dev.danki.sample.Main -C "$work/classes" .
echo "built $out/sample-app.jar ($filters filter classes)" >&2
