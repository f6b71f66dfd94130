#!/usr/bin/env bash
# Fuzzes every Go fuzz target of the tenant-facing decoders (the functions
# named Fuzz* in *_test.go) for FUZZTIME each (default 20000x: twenty
# thousand inputs), one after the other: `go test -fuzz` takes one target per
# run. `go test` alone already runs each target's seed corpus; this explores
# beyond it for a bounded number of inputs.
#
# Why a count and not a duration: with a duration, Go's fuzz coordinator
# (before Go 1.27, golang/go#75804) can report its own deadline as a failure,
# `context deadline exceeded` with no failing input, when a starved worker is
# still mid-input as the time runs out; on two busy cores CI hit it. A count
# sets no deadline, so starvation only slows the run (about 10 s a target here).
# A failure leaves the crashing input under the package's testdata/fuzz/ and
# fails the run.
#
#   hack/fuzz.sh                  # every target
#   FUZZTIME=200000x hack/fuzz.sh # longer
#   FUZZTIME=60s hack/fuzz.sh     # by time (see above: may fail spuriously before Go 1.27)
set -euo pipefail

cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}

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
