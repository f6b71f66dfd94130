#!/usr/bin/env bash
# Fuzzes every Go fuzz target of the tenant-facing decoders (the functions
# named Fuzz* in *_test.go) for FUZZTIME each (default 10s), one after the
# other: `go test -fuzz` takes one target per run. `go test` alone already
# runs each target's seed corpus; this explores beyond it for a bounded time.
# A failure leaves the crashing input under the package's testdata/fuzz/ and
# fails the run.
#
#   hack/fuzz.sh                  # every target
#   FUZZTIME=60s hack/fuzz.sh     # longer
set -euo pipefail

cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}

targets=$(git grep -lE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' || true)
[ -n "$targets" ] || { echo "hack/fuzz.sh: no fuzz targets found" >&2; exit 1; }
n=0
for file in $targets; do
	pkg=./$(dirname "$file")
	while read -r name; do
		echo "hack/fuzz.sh: $pkg $name for $fuzztime" >&2
		# -parallel 2: the machine's two cores; -run '^$' skips the unit tests.
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel 2 "$pkg" </dev/null
		n=$((n + 1))
	done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(f \*testing\.F\).*/\1/p' "$file")
done
echo "hack/fuzz.sh: $n fuzz targets, $fuzztime each: no failure"
