#!/usr/bin/env bash
# bench/http.sh — tollgated's HTTP data plane against a bare fasthttp server,
# side by side, with the same load (ARCHITECTURE §9: one-shot check >= 85% of
# the bare server's throughput).
#
# It builds cmd/loadtest, bench/baseline and cmd/tollgated, starts both
# servers on loopback, and runs alternating rounds of identical closed-loop
# `loadtest --scenario check` against each (the order flips every round, so
# drift on this shared machine hits both alike). Servers and load generator
# are pinned to separate CPUs with taskset when there are at least 2. It
# prints every round, then min/median/max of the per-round ratios
# tollgated/baseline of throughput and of p99. Bounded: the defaults take
# about 2 minutes, and the script refuses settings that could pass 5.
#
# ASSUMPTIONS about tollgated (the lead aligns these with cmd/tollgated):
#   - it accepts --listen 127.0.0.1:PORT, --admin 127.0.0.1:PORT and
#     --data-dir DIR, and serves POST /v1/check on the --listen port;
#   - a check needs a valid key. Give one of:
#       BENCH_KEY=<api key>                 a demo key tollgated accepts, or
#       BENCH_ACCOUNTS_FILE=<file>          lines of "account_id key", or
#       BENCH_ADMIN_TOKEN=<admin token>     provision BENCH_ACCOUNTS accounts
#                                           (default 100) through the admin API;
#     plus BENCH_TOLLGATED_ARGS for any extra tollgated flags (e.g. how it
#     learns that admin token or loads a demo account).
#   If tollgated does not answer 200 to a check within a few seconds (not
#   built, not listening, 404, 401, ...), the script says so and measures the
#   baseline alone.
#
# Knobs (environment): ROUNDS=3 ROUND_SECS=10 WARMUP_SECS=2 CONNS=64
# PIPELINE=1 TG_PORT=18080 TG_ADMIN_PORT=18091 BASE_PORT=18081
# Everything stays on 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-10}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-64}
PIPELINE=${PIPELINE:-1}
TG_PORT=${TG_PORT:-18080}
TG_ADMIN_PORT=${TG_ADMIN_PORT:-18091}
BASE_PORT=${BASE_PORT:-18081}
BENCH_ACCOUNTS=${BENCH_ACCOUNTS:-100}

if (( ROUNDS < 3 )); then
	echo "http.sh: ROUNDS must be at least 3" >&2
	exit 2
fi
# Each round is two runs of warm-up + duration plus about 3 s of overhead;
# with ~40 s for building and start-up the total must stay under 5 minutes.
budget=$(( ROUNDS * 2 * (ROUND_SECS + WARMUP_SECS + 3) + 40 ))
if (( budget > 300 )); then
	echo "http.sh: ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS WARMUP_SECS=$WARMUP_SECS would take about ${budget}s; the limit is 300s" >&2
	exit 2
fi

work=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "http.sh: $*" >&2; }

# --- build -----------------------------------------------------------------
log "building loadtest, baseline and tollgated"
go build -o "$work/loadtest" ./cmd/loadtest
go build -o "$work/baseline" ./bench/baseline
have_tollgated=1
if ! go build -o "$work/tollgated" ./cmd/tollgated 2>"$work/tollgated-build.log"; then
	have_tollgated=0
	log "cmd/tollgated does not build; baseline only:"
	sed 's/^/    /' "$work/tollgated-build.log" >&2
fi

# --- CPUs --------------------------------------------------------------------
# Servers get the upper half of the CPUs, the load generator the lower half.
ncpu=$(nproc)
server_pin=()
load_pin=()
if (( ncpu >= 2 )) && command -v taskset >/dev/null; then
	half=$(( ncpu / 2 ))
	server_pin=(taskset -c "$half-$(( ncpu - 1 ))")
	load_pin=(taskset -c "0-$(( half - 1 ))")
	log "pinning servers to CPUs $half-$(( ncpu - 1 )), load generator to CPUs 0-$(( half - 1 ))"
else
	log "fewer than 2 CPUs or no taskset: not pinning (results will be less stable)"
fi

# --- accounts ----------------------------------------------------------------
account_args=()
if [[ -n "${BENCH_ACCOUNTS_FILE:-}" ]]; then
	account_args=(--accounts-file "$BENCH_ACCOUNTS_FILE")
elif [[ -n "${BENCH_KEY:-}" ]]; then
	account_args=(--key "$BENCH_KEY")
fi
probe_key=${BENCH_KEY:-dummy}
if [[ -n "${BENCH_ACCOUNTS_FILE:-}" ]]; then
	probe_key=$(awk '!/^#/ && NF == 2 { print $2; exit }' "$BENCH_ACCOUNTS_FILE")
fi

check_body='{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}'

# probe URL KEY prints the HTTP status of one check ("000" if nothing answers).
probe() {
	curl -s -o /dev/null -m 1 -w '%{http_code}' -X POST \
		-H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
		--data "$check_body" "$1/v1/check" || true
}

# wait_200 URL KEY SECONDS waits until a check is answered 200; prints the
# last status seen.
wait_200() {
	local status=000 i
	for (( i = 0; i < $3 * 10; i++ )); do
		status=$(probe "$1" "$2")
		[[ "$status" == 200 ]] && break
		sleep 0.1
	done
	echo "$status"
}

# --- servers -----------------------------------------------------------------
base_url="http://127.0.0.1:$BASE_PORT"
tg_url="http://127.0.0.1:$TG_PORT"

"${server_pin[@]}" "$work/baseline" --listen "127.0.0.1:$BASE_PORT" 2>"$work/baseline.log" &
pids+=($!)
if [[ $(wait_200 "$base_url" x 5) != 200 ]]; then
	log "baseline did not come up:"
	cat "$work/baseline.log" >&2
	exit 1
fi

if (( have_tollgated )); then
	# shellcheck disable=SC2086 # BENCH_TOLLGATED_ARGS is a list of flags
	"${server_pin[@]}" "$work/tollgated" --listen "127.0.0.1:$TG_PORT" \
		--admin "127.0.0.1:$TG_ADMIN_PORT" --data-dir "$work/tollgated-data" \
		${BENCH_TOLLGATED_ARGS:-} >"$work/tollgated.log" 2>&1 &
	pids+=($!)
	if [[ -n "${BENCH_ADMIN_TOKEN:-}" && -z "${BENCH_ACCOUNTS_FILE:-}" ]]; then
		sleep 1
		if "${load_pin[@]}" "$work/loadtest" --provision-only -q \
			--admin "http://127.0.0.1:$TG_ADMIN_PORT" --admin-token "$BENCH_ADMIN_TOKEN" \
			--accounts "$BENCH_ACCOUNTS" --accounts-out "$work/accounts.txt" 2>"$work/provision.log"; then
			account_args=(--accounts-file "$work/accounts.txt")
			probe_key=$(awk 'NF == 2 { print $2; exit }' "$work/accounts.txt")
		else
			log "provisioning through the admin API failed:"
			sed 's/^/    /' "$work/provision.log" >&2
		fi
	fi
	status=$(wait_200 "$tg_url" "$probe_key" 5)
	if [[ "$status" != 200 ]]; then
		if [[ "$status" == 000 ]]; then
			log "tollgated does not answer on $tg_url within 5s"
		else
			log "tollgated answers POST /v1/check with HTTP $status, not 200"
		fi
		log "(set BENCH_KEY, BENCH_ACCOUNTS_FILE or BENCH_ADMIN_TOKEN if it needs credentials)"
		log "last lines of its log:"
		tail -n 5 "$work/tollgated.log" | sed 's/^/    /' >&2 || true
		have_tollgated=0
	fi
fi
if (( have_tollgated )); then
	log "tollgated is serving /v1/check: running tollgated and baseline side by side"
else
	log "BASELINE ONLY: tollgated could not be measured (see above)"
fi

# --- rounds ------------------------------------------------------------------
load_args=(-c "$CONNS" -p "$PIPELINE" -d "${ROUND_SECS}s" --warmup "${WARMUP_SECS}s"
	--scenario check --json -q "${account_args[@]}")
limit=$(( ROUND_SECS + WARMUP_SECS + 15 ))

# json_num FILE KEY prints the first numeric value of "KEY": in FILE. The
# loadtest JSON is one compact line whose "latency_us" object comes before
# any other "p99" key.
json_num() {
	grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2
}

# measure NAME URL ROUND runs one round and prints "rps p99_us", or "FAILED".
measure() {
	local out="$work/$1-$3.json"
	if timeout "$limit" "${load_pin[@]}" "$work/loadtest" --url "$2" "${load_args[@]}" >"$out" 2>"$work/$1-$3.err"; then
		echo "$(json_num "$out" throughput_rps) $(json_num "$out" p99)"
	else
		log "round $3 against $1 failed:"
		sed 's/^/    /' "$work/$1-$3.err" >&2
		echo FAILED
	fi
}

fmt_round() { # NAME "rps p99"
	if [[ "$2" == FAILED ]]; then
		printf '%-9s %13s' "$1" FAILED
	else
		awk -v n="$1" -v r="${2% *}" -v p="${2#* }" 'BEGIN { printf "%-9s %9.0f req/s  p99 %8.1f µs", n, r, p }'
	fi
}

echo
echo "HTTP benchmark: closed loop, $CONNS connections, pipeline $PIPELINE, ${ROUND_SECS}s rounds after ${WARMUP_SECS}s warm-up, POST /v1/check"
failed=0
ratios_rps=()
ratios_p99=()
base_rps=()
base_p99=()
for (( r = 1; r <= ROUNDS; r++ )); do
	tg=SKIPPED
	if (( have_tollgated )) && (( r % 2 == 1 )); then
		tg=$(measure tollgated "$tg_url" "$r")
	fi
	base=$(measure baseline "$base_url" "$r")
	if (( have_tollgated )) && (( r % 2 == 0 )); then
		tg=$(measure tollgated "$tg_url" "$r")
	fi

	line="round $r  $(fmt_round baseline "$base")"
	if [[ "$base" == FAILED ]]; then
		failed=1
	else
		base_rps+=("${base% *}")
		base_p99+=("${base#* }")
	fi
	if (( have_tollgated )); then
		line+="  |  $(fmt_round tollgated "$tg")"
		if [[ "$tg" == FAILED ]]; then
			failed=1
		elif [[ "$base" != FAILED ]]; then
			rr=$(awk -v a="${tg% *}" -v b="${base% *}" 'BEGIN { printf "%.3f", a / b }')
			rp=$(awk -v a="${tg#* }" -v b="${base#* }" 'BEGIN { printf "%.3f", a / b }')
			ratios_rps+=("$rr")
			ratios_p99+=("$rp")
			line+="  |  ratio: throughput $rr, p99 $rp"
		fi
	fi
	echo "$line"
done

# stats FORMAT V... prints min/median/max of the values.
stats() {
	local f=$1
	shift
	printf '%s\n' "$@" | sort -g | awk -v f="$f" '{ v[NR] = $1 } END {
		if (NR == 0) { print "n/a"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "min " f "  median " f "  max " f, v[1], m, v[NR] }'
}

echo
echo "baseline throughput (req/s):   $(stats %.0f "${base_rps[@]}")"
echo "baseline p99 (µs):             $(stats %.1f "${base_p99[@]}")"
if (( have_tollgated )); then
	echo "tollgated/baseline throughput: $(stats %.3f "${ratios_rps[@]}")   (target >= 0.85)"
	echo "tollgated/baseline p99:        $(stats %.3f "${ratios_p99[@]}")   (lower is better)"
else
	echo "tollgated: NOT MEASURED (baseline only)"
fi
exit "$failed"
