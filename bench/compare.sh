#!/usr/bin/env bash
# Compare one benchmark between two revisions, side by side in one run.
#
# This machine drifts by 20-50% from minute to minute, so a number measured
# now and one measured an hour ago say little about a change. This builds the
# bench/ test binary of each revision (in temporary worktrees, nothing is
# checked out here) and runs them in alternating rounds, pinned to one CPU,
# then prints the median of each and their ratio.
#
#   bash bench/compare.sh REV_A REV_B ['FullPath$'] [rounds=7] [benchtime=10000000x]
#   bash bench/compare.sh HEAD~1 WORKTREE      # WORKTREE = the uncommitted tree
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?revision A}
b=${2:?revision B}
pattern=${3:-'FullPath$'}
rounds=${4:-7}
benchtime=${5:-10000000x}
work=$(mktemp -d)
cleanup() {
	for d in "$work"/wt-*; do [ -d "$d" ] && git worktree remove --force "$d" >/dev/null 2>&1 || true; done
	rm -rf "$work"
}
trap cleanup EXIT

build() { # rev name
	if [ "$1" = WORKTREE ]; then
		go test -c -o "$work/$2.test" ./bench/
	else
		git worktree add -q "$work/wt-$2" "$1"
		(cd "$work/wt-$2" && go test -c -o "$work/$2.test" ./bench/)
	fi
}
build "$a" a
build "$b" b
pin=""
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then pin="taskset -c 1"; fi
for r in $(seq "$rounds"); do
	for side in a b; do
		$pin "$work/$side.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime" -test.cpu 1 |
			awk -v s="$side" '/^Benchmark/{print s, $1, $3}' | tee -a "$work/out"
	done
done
echo "A=$a B=$b pattern=$pattern rounds=$rounds (ns/op)"
sort -k2,2 -k1,1 -k3,3n "$work/out" | awk '
	{ k = $2; v[k, $1, ++c[k, $1]] = $3; names[k] = 1 }
	END {
		for (k in names) {
			ma = v[k, "a", int((c[k, "a"] + 1) / 2)]; mb = v[k, "b", int((c[k, "b"] + 1) / 2)]
			printf "%-50s A median %8.2f   B median %8.2f   B/A %.3f\n", k, ma, mb, mb / ma
		}
	}'
