#!/usr/bin/env bash
# Scale in accounts: the full path over 1k, 100k and 1M accounts, run in
# alternating rounds (this machine is shared and noisy; a single run per size
# says more about the neighbours than about the engine) and summarised as the
# median per size and the ratio of the slowest median to the fastest.
#   bash bench/scale.sh [pattern] [rounds]     pattern: active1k | zipf | uniform
# Knob: BENCHTIME=5000000x (iterations per run).
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-active1k}
rounds=${2:-5}
BENCHTIME=${BENCHTIME:-5000000x}
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./bench/
pin=""
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then pin="taskset -c 1"; fi
out=$(mktemp)
for r in $(seq "$rounds"); do
  for n in 1000 100000 1000000; do
    $pin "$bin" -test.run '^$' -test.bench "FullPathAccounts/$pattern/$n\$" -test.benchtime "$BENCHTIME" -test.cpu 1 |
      awk -v n="$n" '/^Benchmark/{print n, $3}' | tee -a "$out"
  done
done
echo "pattern=$pattern rounds=$rounds (ns/op)"
sort -n -k1,1 -k2,2 "$out" | awk '
  { v[$1] = v[$1] " " $2; c[$1]++; a[$1, c[$1]] = $2 }
  END {
    for (n in c) { m = a[n, int((c[n] + 1) / 2)]; med[n] = m; printf "%8d accounts: median %7.1f  runs:%s\n", n, m, v[n] }
    lo = 1e18; hi = 0
    for (n in med) { if (med[n] < lo) lo = med[n]; if (med[n] > hi) hi = med[n] }
    printf "slowest/fastest median: %.2fx\n", hi / lo
  }'
rm -f "$out"
