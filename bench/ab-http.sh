#!/usr/bin/env bash
# bench/ab-http.sh A B [SCENARIO] — two tollgated builds side by side: the
# same closed-loop load against each in alternating rounds (A first in odd
# rounds), server on the upper half of the CPUs, loadtest on the lower half.
# A and B are git revisions (built into a temporary worktree) or WORKTREE for
# the working tree. Per round: throughput, p99, the server's CPU per request
# (user + system time from /proc/PID/stat over the measured window),
# ledger transactions per second (lease operations + settlements, from
# /metrics) and spool fdatasyncs per second; then the medians and B/A of
# each.
#
# Knobs: ROUNDS=4 ROUND_SECS=8 WARMUP_SECS=2 CONNS=64. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $# -ge 2 ]] || { echo "usage: bench/ab-http.sh A B [check|staged|admission]" >&2; exit 2; }
ROUNDS=${ROUNDS:-4}
ROUND_SECS=${ROUND_SECS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-64}
SCENARIO=${3:-check}
(( ROUNDS * 2 * (ROUND_SECS + WARMUP_SECS + 3) <= 360 )) || { echo "ab-http.sh: over 6 minutes" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	git worktree remove --force "$work/src" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

build() { # REV OUT
	if [[ "$1" == WORKTREE ]]; then
		go build -o "$2" ./cmd/tollgated
	else
		git worktree remove --force "$work/src" 2>/dev/null || true
		git worktree add -q --detach "$work/src" "$1"
		(cd "$work/src" && go build -o "$2" ./cmd/tollgated)
	fi
}
echo "ab-http.sh: building $1 and $2" >&2
build "$1" "$work/tg-a"
build "$2" "$work/tg-b"
go build -o "$work/loadtest" ./cmd/loadtest

half=$(( $(nproc) / 2 ))
server_pin=(taskset -c "$half-$(( $(nproc) - 1 ))")
load_pin=(taskset -c "0-$(( half - 1 ))")
token="ab-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
key=ab-bench-key

start() { # NAME PORT ADMIN
	env "TOLLGATED_ADMIN_TOKEN=$token" "${server_pin[@]}" "$work/tg-$1" --listen "127.0.0.1:$2" \
		--admin "127.0.0.1:$3" --data-dir "$work/data-$1" --demo-key "$key" >"$work/$1.log" 2>&1 &
	pids+=($!)
}
start a 18180 18191
start b 18182 18193
sleep 2
echo "demo $key" >"$work/accounts.txt"
extra=(--accounts-file "$work/accounts.txt")
if [[ "$SCENARIO" == admission ]]; then
	pt=$(curl -s -X POST -H "Authorization: Bearer $token" --data '{}' http://127.0.0.1:18191/v1/platform-tokens | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
	pt_b=$(curl -s -X POST -H "Authorization: Bearer $token" --data '{}' http://127.0.0.1:18193/v1/platform-tokens | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
fi

txns() { # ADMIN_PORT
	curl -s -m 2 -H "Authorization: Bearer $token" "http://127.0.0.1:$1/metrics" |
		awk '/^tollgated_lease_operations_total\{/ && !/"error"/ { s += $2 } /^tollgated_ledger_settlements_total / { s += $2 } END { printf "%d", s }'
}
syncs() { # ADMIN_PORT
	curl -s -m 2 -H "Authorization: Bearer $token" "http://127.0.0.1:$1/metrics" |
		awk '/^tollgated_spool_syncs_total / { s = $2 } END { printf "%d", s }'
}
hz=$(getconf CLK_TCK)
measure() { # NAME PID PORT ADMIN -> "rps p99 cpu_us_per_req txn_per_s"
	local args=("${extra[@]}")
	if [[ "$SCENARIO" == admission ]]; then
		args+=(--platform-token "$( [[ $1 == a ]] && echo "$pt" || echo "$pt_b")")
	fi
	"${load_pin[@]}" "$work/loadtest" --url "http://127.0.0.1:$3" -c "$CONNS" -d "${ROUND_SECS}s" \
		--warmup "${WARMUP_SECS}s" --scenario "$SCENARIO" --json -q "${args[@]}" >"$work/out.json" &
	local lt=$!
	sleep "$WARMUP_SECS"
	local c0 l0 f0 c1 l1 f1
	c0=$(awk '{ print $14 + $15 }' "/proc/$2/stat"); l0=$(txns "$4"); f0=$(syncs "$4")
	sleep "$ROUND_SECS"
	c1=$(awk '{ print $14 + $15 }' "/proc/$2/stat"); l1=$(txns "$4"); f1=$(syncs "$4")
	wait "$lt"
	awk -v rps="$(grep -o '"throughput_rps":[0-9.]*' "$work/out.json" | cut -d: -f2)" \
		-v p99="$(grep -o '"p99":[0-9.]*' "$work/out.json" | head -n1 | cut -d: -f2)" \
		-v req="$(grep -o '"requests":[0-9]*' "$work/out.json" | head -n1 | cut -d: -f2)" \
		-v c=$(( c1 - c0 )) -v hz="$hz" -v l=$(( l1 - l0 )) -v f=$(( f1 - f0 )) -v s="$ROUND_SECS" \
		'BEGIN { printf "%.0f %.0f %.2f %.1f %.0f\n", rps, p99, c / hz * 1e6 / req, l / s, f / s }'
}

echo "$SCENARIO, $CONNS connections, ${ROUND_SECS}s rounds: A=$1 B=$2 (req/s, p99 µs, CPU µs/req, ledger txn/s, spool fsync/s)"
declare -a A B
for (( r = 1; r <= ROUNDS; r++ )); do
	if (( r % 2 )); then
		a=$(measure a "${pids[0]}" 18180 18191); b=$(measure b "${pids[1]}" 18182 18193)
	else
		b=$(measure b "${pids[1]}" 18182 18193); a=$(measure a "${pids[0]}" 18180 18191)
	fi
	A+=("$a") B+=("$b")
	echo "round $r  A: $a   B: $b"
done
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for f in 1 2 3 4 5; do
	ma=$(printf '%s\n' "${A[@]}" | cut -d' ' -f"$f" | med)
	mb=$(printf '%s\n' "${B[@]}" | cut -d' ' -f"$f" | med)
	name=$(echo "req/s p99_µs CPU_µs/req ledger_txn/s fsync/s" | cut -d' ' -f"$f")
	awk -v n="$name" -v a="$ma" -v b="$mb" 'BEGIN { printf "median %-13s A %10s  B %10s  B/A %.3f\n", n, a, b, (a ? b / a : 0) }'
done
