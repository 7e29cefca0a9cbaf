#!/usr/bin/env bash
# bench/loadgen.sh — what the load generator costs: the bare server
# (bench/baseline) on the upper half of the CPUs, cmd/loadtest on the lower
# half, closed loop at 64 connections, each loadtest engine in turn for
# ROUNDS alternating rounds of ROUND_SECS. Per run: throughput, the server's
# busy share of a CPU (near 100%: the server is the limit, as it should
# be), and CPU per request of the server and of the client (user + system
# time; the client's from its rusage). Loopback only.
#
# Knobs: ROUNDS=3 ROUND_SECS=8 CONNS=64 PIPELINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-8}
CONNS=${CONNS:-64}
PIPELINE=${PIPELINE:-1}
(( ROUNDS * 2 * (ROUND_SECS + 1) <= 300 )) || { echo "loadgen.sh: over 5 minutes" >&2; exit 2; }

work=$(mktemp -d)
bp=""
trap '[[ -n "$bp" ]] && kill "$bp" 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/loadtest" ./cmd/loadtest
go build -o "$work/baseline" ./bench/baseline
half=$(( $(nproc) / 2 ))
taskset -c "$half-$(( $(nproc) - 1 ))" "$work/baseline" --listen 127.0.0.1:18085 2>/dev/null &
bp=$!
sleep 0.5
hz=$(getconf CLK_TCK)
echo "bare server, closed loop, $CONNS connections, pipeline $PIPELINE, ${ROUND_SECS}s runs"
for (( r = 1; r <= ROUNDS; r++ )); do
	for e in goroutines epoll; do
		s0=$(awk '{ print $14 + $15 }' "/proc/$bp/stat")
		/usr/bin/time -f '%U %S' -o "$work/time" taskset -c "0-$(( half - 1 ))" "$work/loadtest" --engine "$e" \
			--url http://127.0.0.1:18085 -c "$CONNS" -p "$PIPELINE" -d "${ROUND_SECS}s" --warmup 0s -q --json >"$work/out.json"
		s1=$(awk '{ print $14 + $15 }' "/proc/$bp/stat")
		awk -v e="$e" -v r="$r" -v secs="$ROUND_SECS" -v hz="$hz" -v s=$(( s1 - s0 )) -v c="$(cat "$work/time")" \
			-v rps="$(grep -o '"throughput_rps":[0-9.]*' "$work/out.json" | cut -d: -f2)" \
			-v req="$(grep -o '"requests":[0-9]*' "$work/out.json" | head -n1 | cut -d: -f2)" 'BEGIN {
			split(c, t, " ")
			printf "round %d  %-10s %7.0f req/s  server busy %3.0f%%  server %5.2f µs/req  client %5.2f µs/req\n",
				r, e, rps, s / hz / secs * 100, s / hz * 1e6 / req, (t[1] + t[2]) * 1e6 / req }'
	done
done
