#!/usr/bin/env bash
# make bench: Go benchmarks (speed and memory: warm-up windows, tail test,
# traffic generator achieved/asked QPS at 500 and 2,000 qps, plugin RPC per
# call), then — as root — the lab bench: the demo's baseline and danki
# rollouts, between them what users would pick instead (Istio's slow start,
# lab/manifests/slowstart; a fixed warm-up of 100 requests, lab/manifests/fixed100)
# and, next to danki, danki warming on mirrored user traffic instead of
# synthetic load (lab/manifests/mirror), plus an oracle warm-up curve,
# reporting each rollout's warm-up length and ratios (contender ÷ danki)
# measured side by side in one run; after danki, its control (danki's
# Rollout with a pause as long as danki's warm-up instead of it: users on
# stable during the warm-up, danki ÷ control); then the slow-warming workload
# (the Spring Boot sample app rolled out with a fixed 100-request warm-up and
# with danki's: fixed ÷ danki); $BENCH_RUNS times (default 2). The demo's bad
# version is left out (it yields no ratio; make demo shows it). Results:
# $BENCH_OUT (default bench-results/). Then the warm gate's bench
# (danki-lab gate-bench): new pods three ways side by side; then the lab's
# BlueGreen pre-promotion load test (TestLabBlueGreenLoadAnalysis); then the
# capacity check: knee accuracy on known capacities and the lab's two
# versions' knees (TestKneeOfKnownCapacities, TestLabDankiRollout/capacity).
# Last, lab/RESULTS.md is rewritten from these results (danki-lab results).
set -euo pipefail
# shellcheck source=lab/scripts/lib.sh
source "$(dirname "$0")/lib.sh"
# go.mod asks for a newer go than Debian's: let the go command fetch it.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=-buildvcs=false

out=${BENCH_OUT:-$repo/bench-results}
mkdir -p "$out"
cd "$repo"
log "bench: Go benchmarks → $out/go-bench.txt"
go test -run '^$' -bench . -benchmem -count=1 ./... | tee "$out/go-bench.txt"
# One JSON object per benchmark line: name, iterations, then value/unit pairs.
awk 'BEGIN { print "[" } /^Benchmark/ {
	printf "%s{\"name\":\"%s\",\"n\":%s", (n++ ? ",\n" : ""), $1, $2
	for (i = 3; i < NF; i += 2) printf ",\"%s\":%s", $(i+1), $i
	printf "}"
} END { print "\n]" }' "$out/go-bench.txt" >"$out/go-bench.json"

# rewrite_results DIR: lab/RESULTS.md from DIR's result files (danki-lab
# results), the machine described as in summary.md.
rewrite_results() {
	local machine
	machine="$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
	log "bench: rewriting lab/RESULTS.md from $1"
	go run ./lab/cmd/danki-lab results --out "$repo/lab/RESULTS.md" --machine "$machine" "$1"
}

if [ "$(id -u)" != 0 ]; then
	log "bench: not root — the lab bench (rollouts in the lab) needs root; Go benchmarks only"
	rewrite_results "$out"
	exit 0
fi
# The lab bench, repeated: each run puts baseline, the contenders (Istio slow
# start, fixed warm-up 100, danki (mirror)), danki and its control side by
# side under the same load, then the Spring pair under its own users, so
# each run's ratios stand on their own; the summary lists them run by run:
# the rollout tables (time, warm-up length and source, users' p99/p99.9/max
# before, during, after; the sample app's, then Spring's), the control's
# table (users on stable during danki's warm-up and the control's pause)
# and the ratio lines. One run took ~15 min before the mirror scenario (15.4
# measured, lab already built, up and down included), which adds ~4 min;
# the control adds ~6 min and the Spring pair ~8 (6.3 and 7.5 measured,
# 2026-11-28): with 2 runs and the Go benchmarks, ~75 min.
runs=${BENCH_RUNS:-2}
summary=$out/summary.md
{
	echo "# danki bench: ratios, each measured within one run"
	echo
	echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM."
} >"$summary"
for i in $(seq 1 "$runs"); do
	log "bench: lab run $i of $runs → $out/run-$i"
	DEMO_OUT=$out/run-$i "$here/demo.sh" --oracle --contenders --mirror --control --spring --skip-bad-version --gate=false
	{
		echo; echo "## run $i"; echo
		sed -n '/^| rollout | time /,/^$/p' "$out/run-$i/results.md"
		sed -n '/^| rollout | new pods at weight 0 /,/^$/p' "$out/run-$i/results.md"
		sed -n '/^- .* ÷ /p' "$out/run-$i/results.md"
	} >>"$summary"
done
# The warm gate (#16): new pods of a plain Deployment — scale-up 2 → 4 and a
# killed pod — with no warm-up, Istio slow start and the danki gate side by
# side under the same user traffic, beside the controls (two JVMs started
# with no request to them; quiet minutes: the lab's noise, 5 of them first),
# each event 3 times per way, pooled (one minute's p99.9 is a handful of
# requests) (about an hour, lab up and down included).
log "bench: the warm gate → $out/gate"
build_danki danki danki-lab # the gate runs the lab's danki binary
"$bin/danki-lab" gate-bench --root "$repo" --out "$out/gate" --noise-minutes 5 --repeat 3
{
	echo; echo "## the warm gate: new pods, three ways (scale-up 2 → 4, a killed pod), and the lab's noise"; echo
	sed -n '/^## The lab/,/^## Raw figures/{/^## Raw figures/!p}' "$out/gate/gatebench.md"
} >>"$summary"
# BlueGreen with danki's load test as the pre-promotion gate (#15): the lab
# e2e test run as a bench (~7 min): what the AnalysisRuns measured and how
# many user requests reached the bad version (Envoy).
log "bench: BlueGreen pre-promotion load test → $out/bluegreen.log"
go test -count=1 -run TestLabBlueGreenLoadAnalysis -v -timeout 20m ./test/e2e/ >"$out/bluegreen.log" 2>&1 || log "bench: the BlueGreen run failed (see $out/bluegreen.log)"
{
	echo; echo "## BlueGreen: danki load-tests the preview pods before the switch"; echo
	grep -E 'bluegreen_test.go:[0-9]+: (AnalysisRun app-bg|good version|slow version|--- )|^(--- |ok|FAIL)' "$out/bluegreen.log" | sed 's/^ *//; s/^/    /'
} >>"$summary"
# The capacity check (#17): knee accuracy on servers of known capacity (C
# slots of S each: C/S), then the lab's two versions — the sample app with a
# 10 ms wait per request, in parallel and behind a lock — through the real
# Argo controller (~12 min).
log "bench: capacity check → $out/capacity-known.log, $out/capacity-lab.log"
go test -count=1 -run TestKneeOfKnownCapacities -v ./pkg/capacity/ >"$out/capacity-known.log" 2>&1 || log "bench: the knee accuracy run failed (see $out/capacity-known.log)"
go test -count=1 -run 'TestLabDankiRollout/capacity' -v -timeout 30m ./test/e2e/ >"$out/capacity-lab.log" 2>&1 || log "bench: the lab capacity run failed (see $out/capacity-lab.log)"
{
	echo; echo "## capacity check: knee ÷ known capacity, and the lab's two versions"; echo
	grep -E 'capacity_test.go:[0-9]+: .*knee .* × capacity' "$out/capacity-known.log" | sed 's/^ *capacity_test.go:[0-9]*: /    /'
	grep -E 'knee recorded for|capacity check of|knee [0-9.]+ qps is [0-9.]+× the stable|^ *--- (PASS|FAIL): TestLabDankiRollout/capacity' "$out/capacity-lab.log" | sed 's/^ */    /'
} >>"$summary"
cat "$summary"
log "bench: results in $out (summary.md, run-N/{results.md,results.json,latency.svg,latency.png}, go-bench.txt, go-bench.json)"
# lab/RESULTS.md: one dated table per scenario this bench measured, from its
# result files; the scenarios it did not measure keep their tables.
rewrite_results "$out"
