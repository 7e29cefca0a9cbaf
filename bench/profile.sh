#!/usr/bin/env bash
# bench/profile.sh — where a request's CPU goes, tollgated beside the bare
# fasthttp server (bench/baseline), under the wrk load bench/http.sh uses.
#
# Each server runs alone on the upper half of the CPUs, wrk on the lower;
# for each scenario, after WARMUP_SECS of warm-up, perf samples the server
# (software cpu-clock, call graphs by frame pointer) for ROUND_SECS while
# wrk runs. Every sample is put in the first of these classes any frame of
# its stack matches:
#   durability  spool, control plane, exporter, ledger
#   decision    shard, core, policy, routes (with the shard's hand-over
#               of usage and its doorbell)
#   send        the answer's write(2) and the loopback TCP under it
#   receive     the request's read(2)
#   waiting     epoll, the Go scheduler, futexes, the runtime's monitor
#   http        framing, parsing and writing HTTP (fasthttp, httploop)
#   gc          the collector and allocation
#   other       the rest
# and the table gives, per class, its share of the samples and that share
# of the server's CPU per request (user + system from /proc/PID/stat over
# the same window, over the requests wrk counted).
#
# Scenarios (SCENARIOS, default "admission check check256"): the bare
# server at 64 and 256 connections is always measured (POST /v1/check with
# the check's body, as bench/http.sh loads it); check is the
# durable POST /v1/check at CONNS, check256 at HIGH_CONNS, admission
# GET /v1/admission?agent_id=demo at CONNS.
#
# Needs perf (Debian's linux-perf; scripts/install-bench-tools.sh perf) and
# permission to sample another process (root, or perf_event_paranoid ≤ 1).
# Knobs: ROUND_SECS=5 WARMUP_SECS=2 CONNS=64 HIGH_CONNS=256 SCENARIOS=…
# PROFILE_KEEP=1 keeps the scratch directory (perf data, wrk output).
# Ports 18280-18282 on 127.0.0.1. About a minute.
set -euo pipefail

cd "$(dirname "$0")/.."

ROUND_SECS=${ROUND_SECS:-5}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-64}
HIGH_CONNS=${HIGH_CONNS:-256}
SCENARIOS=${SCENARIOS:-admission check check256}
BENCH_KEY=bench-demo-key
WRK_LUA=$PWD/bench/wrk.lua
TG_PORT=18280
TG_ADMIN_PORT=18281
BASE_PORT=18282

scripts/install-bench-tools.sh wrk perf

work=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ -n "${PROFILE_KEEP:-}" ]] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=bench/wrkrun.sh
source bench/wrkrun.sh
pin_cpus >/dev/null

go build -o "$work/tollgated" ./cmd/tollgated
go build -o "$work/baseline" ./bench/baseline

# up URL: waits until URL answers 200.
up() {
	local i
	for (( i = 0; i < 100; i++ )); do
		curl -sf -o /dev/null -m 1 "$1" && return 0
		sleep 0.1
	done
	echo "profile.sh: $1 does not answer 200" >&2
	exit 1
}

"${server_pin[@]}" "$work/baseline" --listen "127.0.0.1:$BASE_PORT" 2>"$work/baseline.log" &
base_pid=$!
pids+=("$base_pid")
admin_token="profile-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
env "TOLLGATED_ADMIN_TOKEN=$admin_token" "${server_pin[@]}" "$work/tollgated" \
	--listen "127.0.0.1:$TG_PORT" --admin "127.0.0.1:$TG_ADMIN_PORT" --data-dir "$work/data" \
	--demo-key "$BENCH_KEY" >"$work/tollgated.log" 2>&1 &
tg_pid=$!
pids+=("$tg_pid")
up "http://127.0.0.1:$BASE_PORT/"
up "http://127.0.0.1:$TG_PORT/readyz"
ptoken=$(curl -s -m 2 -X POST -H "Authorization: Bearer $admin_token" --data '{}' \
	"http://127.0.0.1:$TG_ADMIN_PORT/v1/platform-tokens" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
if [[ -z "$ptoken" && " $SCENARIOS " == *" admission "* ]]; then
	echo "profile.sh: no platform token was issued: the admission scenario cannot run" >&2
	exit 1
fi

# classify: reads `perf script` output, prints "class count" lines. The
# project's own classes are tested first (their doorbells and marks are
# file reads and writes too), then the sockets (the loop's read and write,
# or the bare server's net.Conn), then the waits (the loop's epoll_wait is
# under Loop.Run like its HTTP work).
classify() {
	awk '
	function flush() {
		if (!insample) return
		c = "other"
		if (s ~ /tollgated\/(spool|control|ledger)[.\/]/) c = "durability"
		else if (s ~ /tollgated\/(shard|core|policy|route|credential)[.\/]|tollgated\/ring\.\(\*Doorbell/) c = "decision"
		else if (s ~ /httploop\.\(\*Loop\)\.(flush|sendQueued)|net\.\(\*conn\)\.Write/) c = "send"
		else if (s ~ /httploop\.\(\*Loop\)\.read[^a-zA-Z]|net\.\(\*conn\)\.Read/) c = "receive"
		else if (s ~ /httploop\.\(\*Loop\)\.wait|unix\.EpollWait|runtime\.(findRunnable|schedule|park_m|mcall|netpoll|futex|notesleep|sysmon|stopm|mstart)/) c = "waiting"
		else if (s ~ /fasthttp|httploop\.|tollgated\/(h2|hpack|grpcmsg|grpcapi)[.\/]/) c = "http"
		else if (s ~ /runtime\.(gcBgMarkWorker|gcDrain|mallocgc|bgsweep|bgscavenge)/) c = "gc"
		n[c]++
		insample = 0; s = ""
	}
	/^[^ \t]/ { flush(); insample = 1; next }
	/^$/ { flush(); next }
	{ s = s " " $2 }
	END { flush(); for (c in n) print c, n[c] }'
}

# profile NAME PID CONNS URL LUA_ARG...: one profiled run; leaves
# "NAME cpu_us_per_request" and "class count" lines in $work/NAME.prof.
# The server's CPU and the wall clock are read around perf's sampling
# window, wrk runs past both ends of it, and the requests of the window
# are wrk's rate over it.
profile() {
	local name=$1 pid=$2 conns=$3 url=$4
	shift 4
	"${load_pin[@]}" wrk -t1 -c"$conns" -d"${WARMUP_SECS}s" -s "$WRK_LUA" "$url" -- "$@" >/dev/null
	"${load_pin[@]}" wrk -t1 -c"$conns" -d"$(( ROUND_SECS + 3 ))s" -s "$WRK_LUA" "$url" -- "$@" >"$work/$name.wrk" &
	local wrk_pid=$!
	pids+=("$wrk_pid")
	sleep 0.5
	local t0 t1 w0 w1
	t0=$(cpu_ticks "$pid")
	w0=$(date +%s%N)
	if ! perf record -q -e cpu-clock -g -p "$pid" -o "$work/$name.data" -- sleep "$ROUND_SECS" 2>"$work/$name.perf.err"; then
		echo "profile.sh: perf cannot sample $name (root, or kernel.perf_event_paranoid <= 1, is needed):" >&2
		cat "$work/$name.perf.err" >&2
		exit 1
	fi
	w1=$(date +%s%N)
	t1=$(cpu_ticks "$pid")
	wait "$wrk_pid"
	local out rps
	out=$(grep '^WRK ' "$work/$name.wrk" || true)
	if [[ -z "$out" || "$out" != *" errors=0 non2xx=0"* ]]; then
		echo "profile.sh: wrk against $name failed or was refused: ${out:-no result}" >&2
		exit 1
	fi
	rps=$(sed -n 's/.* rps=\([0-9.]*\).*/\1/p' <<<"$out")
	perf script -i "$work/$name.data" 2>/dev/null | classify >"$work/$name.classes"
	# perf samples at 4 kHz: a busy server gives about 4,000 a second.
	local samples
	samples=$(awk '{ n += $2 } END { print n + 0 }' "$work/$name.classes")
	if (( samples < ROUND_SECS * 1000 )); then
		echo "profile.sh: only $samples samples of $name in ${ROUND_SECS}s: was it busy, and did perf resolve its stacks?" >&2
		exit 1
	fi
	{
		awk -v n="$name" -v t="$(( t1 - t0 ))" -v hz="$(getconf CLK_TCK)" -v r="$rps" -v ns="$(( w1 - w0 ))" \
			'BEGIN { printf "%s %.2f\n", n, (t / hz * 1e6) / (r * ns / 1e9) }'
		cat "$work/$name.classes"
	} >"$work/$name.prof"
}

check_body='{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}'
profile bare "$base_pid" "$CONNS" "http://127.0.0.1:$BASE_PORT/v1/check" post "$check_body"
profile bare256 "$base_pid" "$HIGH_CONNS" "http://127.0.0.1:$BASE_PORT/v1/check" post "$check_body"
cols=(bare bare256)
for s in $SCENARIOS; do
	case "$s" in
	admission) profile admission "$tg_pid" "$CONNS" "http://127.0.0.1:$TG_PORT/v1/admission?agent_id=demo" admission "$ptoken" ;;
	check) profile check "$tg_pid" "$CONNS" "http://127.0.0.1:$TG_PORT/v1/check" check "$BENCH_KEY" ;;
	check256) profile check256 "$tg_pid" "$HIGH_CONNS" "http://127.0.0.1:$TG_PORT/v1/check" check "$BENCH_KEY" ;;
	*) echo "profile.sh: unknown scenario $s" >&2; exit 2 ;;
	esac
	cols+=("$s")
done

profs=()
for c in "${cols[@]}"; do profs+=("$work/$c.prof"); done
echo "CPU per request by class, µs (share of samples): bench/profile.sh, ${ROUND_SECS}s sampled per run after ${WARMUP_SECS}s, $(date -u '+%Y-%m-%d %H:%M UTC')"
awk '
	FNR == 1 { col[++ncol] = $1; total[$1] = $2; next }
	{ n[$1, col[ncol]] = $2; sum[col[ncol]] += $2; seen[$1] = 1 }
	END {
		split("send receive durability decision http waiting gc other", order, " ")
		printf "%-12s", "class"
		for (i = 1; i <= ncol; i++) printf "%20s", col[i]
		printf "\n"
		for (k = 1; k <= 8; k++) {
			c = order[k]
			printf "%-12s", c
			for (i = 1; i <= ncol; i++) {
				m = col[i]; f = sum[m] ? n[c, m] / sum[m] : 0
				printf "%20s", sprintf("%.2f (%4.1f%%)", f * total[m], 100 * f)
			}
			printf "\n"
		}
		printf "%-12s", "total"
		for (i = 1; i <= ncol; i++) printf "%20s", sprintf("%.2f", total[col[i]])
		printf "\n"
	}' "${profs[@]}"
