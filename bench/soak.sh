#!/usr/bin/env bash
# bench/soak.sh — the real daemon through cycles of mixed traffic then
# quiet, measuring what an idle edge daemon must not spend.
#
# It builds cmd/tollgated and cmd/loadtest, starts tollgated on loopback
# with a demo account and a few provisioned ones, and runs CYCLES cycles of:
#   load:  LOAD_SECS of mixed traffic (one-shot checks on the demo account,
#          staged admit/commit/finish on others) from cmd/loadtest;
#   idle:  IDLE_SECS of nothing.
# For each phase it prints, from the daemon's own /metrics and /proc:
#   lease transactions per second (acquire + extend + release: each is one
#   fsync'd ledger transaction), CPU as % of one core (and, for idle phases,
#   over their second half), RSS, goroutines and the ledger file's size.
# At the end it checks the targets of an idle daemon and exits non-zero if
# one is missed:
#   - idle CPU <= IDLE_CPU_MAX (0.5) % of a core over the second half of
#     every idle phase after the first cycle's (the first half holds the
#     wind-down of the load before it: leases handed back, the last
#     settlement);
#   - 0 lease transactions per second in the last half of every idle phase;
#   - RSS and ledger size of the last cycle within GROWTH_MAX (25) % of the
#     second cycle's (the first warms caches up).
#
# Knobs (environment): CYCLES=3 LOAD_SECS=10 IDLE_SECS=40 CONNS=32
# LEASE_TTL=20s SHARDS=2 IDLE_CPU_MAX=0.5 GROWTH_MAX=25. Defaults take
# about 6 minutes (3 cycles of 100 s, and the builds). Everything stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

CYCLES=${CYCLES:-3}
LOAD_SECS=${LOAD_SECS:-10}
IDLE_SECS=${IDLE_SECS:-40}
CONNS=${CONNS:-32}
LEASE_TTL=${LEASE_TTL:-20s}
SHARDS=${SHARDS:-2}
IDLE_CPU_MAX=${IDLE_CPU_MAX:-0.5}
GROWTH_MAX=${GROWTH_MAX:-25}

work=$(mktemp -d)
tg_pid=
cleanup() {
	[ -n "$tg_pid" ] && kill "$tg_pid" 2>/dev/null && wait "$tg_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tollgated" ./cmd/tollgated
go build -o "$work/loadtest" ./cmd/loadtest

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
P=$(port)
A=$(port)
TOKEN=tga_soak-admin-token-0123456789abcdef
KEY=soak-demo-key-0123456789
TOLLGATED_ADMIN_TOKEN=$TOKEN "$work/tollgated" --listen "127.0.0.1:$P" --admin "127.0.0.1:$A" \
	--data-dir "$work/data" --demo-key "$KEY" --shards "$SHARDS" --lease-ttl "$LEASE_TTL" \
	>"$work/tollgated.log" 2>&1 &
tg_pid=$!
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$P/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done

metric() { # sum of the series matching $1
	curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$A/metrics" |
		awk -v m="$1" 'index($0, m) == 1 { s += $NF } END { printf "%.0f", s }'
}
lease_total() {
	echo $(( $(metric 'tollgated_lease_operations_total{operation="acquired"}') +
		$(metric 'tollgated_lease_operations_total{operation="extended"}') +
		$(metric 'tollgated_lease_operations_total{operation="released"}') ))
}
# The daemon's CPU time in nanoseconds, summed over its threads' schedstat:
# /proc/PID/stat counts 10 ms ticks, and the idle budget of an 8 s half-phase
# is 40 ms, four ticks. A thread that ends takes its time with it; the
# daemon's threads live as long as it does (its shards are pinned to theirs,
# and the Go runtime keeps the threads it starts).
cpu_ns() { cat /proc/"$tg_pid"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$tg_pid/status"; }
goroutines() {
	curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$A/debug/pprof/goroutine?debug=1" 2>/dev/null |
		awk 'NR == 1 { print $NF; exit }'
}
ledger_kb() { du -k "$work/data/ledger.db" | awk '{ print $1 }'; }

# staged traffic needs accounts of its own, with a policy that prices the
# load generator's check (without one every staged request was 403
# missing-permission: nothing was admitted, leased or billed)
cat >"$work/policy.json" <<'POLICY'
{"permissions":["chat"],"operations":{"input_tokens":{"weight":1},"requests":{"weight":10}},"limits":{"max_items":100000}}
POLICY
"$work/loadtest" --url "http://127.0.0.1:$P" --admin "http://127.0.0.1:$A" --admin-token "$TOKEN" \
	--accounts 20 --accounts-out "$work/accounts" --admin-policy "$work/policy.json" --provision-only >/dev/null

printf '%-6s %-5s %10s %12s %14s %9s %9s %11s\n' cycle phase lease_tx/s cpu_%_core idle_2nd_half rss_MiB gorout ledger_KiB
fail=0
declare -a RSS LEDGER
phase() { # name seconds command...
	local name=$1 secs=$2
	shift 2
	local t0 l0 t1 l1 lmid tmid=
	t0=$(cpu_ns)
	l0=$(lease_total)
	if [ "$#" -gt 0 ]; then
		# a refused load (4xx included) is not the traffic this measures
		if ! "$@" --count-4xx >"$work/load.out" 2>&1; then
			echo "  cycle $cycle $name: the load generator failed:"
			grep -E '^(status|codes|error rate)' "$work/load.out" | sed 's/^/    /'
			fail=1
		fi
	else
		sleep $((secs / 2))
		lmid=$(lease_total)
		tmid=$(cpu_ns)
		sleep $((secs - secs / 2))
	fi
	t1=$(cpu_ns)
	l1=$(lease_total)
	local cpu
	cpu=$(awk -v d=$((t1 - t0)) -v s="$secs" 'BEGIN { printf "%.2f", 100 * d / 1e9 / s }')
	local tx late=-
	tx=$(awk -v d=$((l1 - l0)) -v s="$secs" 'BEGIN { printf "%.1f", d / s }')
	if [ -n "$tmid" ]; then
		late=$(awk -v d=$((t1 - tmid)) -v s=$((secs - secs / 2)) 'BEGIN { printf "%.2f", 100 * d / 1e9 / s }')
	fi
	printf '%-6s %-5s %10s %12s %14s %9.1f %9s %11s\n' "$cycle" "$name" "$tx" "$cpu" "$late" "$(awk -v k="$(rss_kb)" 'BEGIN { print k / 1024 }')" \
		"$(goroutines)" "$(ledger_kb)"
	if [ "$name" = idle ]; then
		# The first half of an idle phase holds the wind-down of the load
		# before it (leases handed back, the last settlement); an idle
		# daemon is what the second half measures.
		if [ "$cycle" -gt 1 ] && awk -v c="$late" -v m="$IDLE_CPU_MAX" 'BEGIN { exit !(c > m) }'; then
			echo "  idle CPU ${late}% of a core > ${IDLE_CPU_MAX}% in the second half of an idle phase"
			fail=1
		fi
		if [ "$l1" != "$lmid" ]; then
			echo "  $((l1 - lmid)) lease transactions in the second half of an idle phase"
			fail=1
		fi
		RSS[$cycle]=$(rss_kb)
		LEDGER[$cycle]=$(ledger_kb)
	fi
}
for cycle in $(seq 1 "$CYCLES"); do
	phase load "$LOAD_SECS" "$work/loadtest" --url "http://127.0.0.1:$P" --key "$KEY" -d "${LOAD_SECS}s" -c "$CONNS"
	phase idle "$IDLE_SECS"
	phase stage "$LOAD_SECS" "$work/loadtest" --url "http://127.0.0.1:$P" --accounts-file "$work/accounts" \
		--scenario staged -d "${LOAD_SECS}s" -c "$CONNS"
	phase idle "$IDLE_SECS"
done
if [ "$CYCLES" -ge 3 ]; then
	for what in RSS LEDGER; do
		declare -n v=$what
		first=${v[2]} last=${v[$CYCLES]}
		if awk -v a="$first" -v b="$last" -v g="$GROWTH_MAX" 'BEGIN { exit !(b > a * (1 + g / 100)) }'; then
			echo "  $what grew from $first KiB (cycle 2) to $last KiB (cycle $CYCLES)"
			fail=1
		fi
	done
fi
if grep -q '"level":"error"' "$work/tollgated.log"; then
	echo "  the daemon logged errors:"
	grep '"level":"error"' "$work/tollgated.log" | head -5
	fail=1
fi
[ "$fail" = 0 ] && echo "soak: every target met"
exit "$fail"
