#!/usr/bin/env bash
# bench/http.sh — tollgated's HTTP data plane against a bare fasthttp server,
# side by side, with the same load.
#
# It builds cmd/loadtest, bench/baseline and cmd/tollgated, starts both
# servers on loopback, and runs rounds of identical closed-loop load: in each
# round the baseline once and tollgated once per scenario of SCENARIOS (the
# baseline goes first in odd rounds and last in even ones, so drift on this
# shared machine hits both alike). Servers and load generator are pinned to
# separate CPUs with taskset when there are at least 2.
#
# For every run it reports throughput, p99 and the server's CPU per request:
# user + system time of the server process (/proc/PID/stat) over the
# measured window, divided by the requests answered in it. (Softirq time the
# kernel spends delivering loopback packets is charged to no process, for
# either server.) For tollgated it also reports the ledger transactions per
# second in the window, from its /metrics: lease operations plus the
# exporter's settlements. Then min/median/max of the per-round ratios
# tollgated/baseline of throughput, p99 and CPU per request; for "staged" the
# CPU ratio is per operation (admit + commit + finish) against one baseline
# request. Last, unless OPEN_LOOP=0, one open-loop run of each server at half
# of tollgated's median closed-loop check throughput, for the p99 there.
# Bounded: the defaults take about 4 minutes, and the script refuses
# settings that could pass 6.
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
#   - GET /v1/admission needs a platform token: the script issues one through
#     the admin API (POST /v1/platform-tokens) with BENCH_ADMIN_TOKEN, or with
#     a token it gives tollgated itself (TOLLGATED_ADMIN_TOKEN) when that is
#     unset; the agent is the first account of BENCH_ACCOUNTS_FILE, or
#     "demo" with BENCH_KEY (what --demo-key provisions). If it cannot be set
#     up, admission is skipped with a message. /metrics uses the same token.
#
# Knobs (environment): ROUNDS=3 ROUND_SECS=10 WARMUP_SECS=2 CONNS=64
# PIPELINE=1 SCENARIOS="check admission staged" OPEN_LOOP=1 TG_PORT=18080
# TG_ADMIN_PORT=18091 BASE_PORT=18081
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
SCENARIOS=${SCENARIOS:-check admission staged}
OPEN_LOOP=${OPEN_LOOP:-1}
read -r -a scenarios <<<"$SCENARIOS"
for sc in "${scenarios[@]}"; do
	case "$sc" in
	check | admission | staged) ;;
	*)
		echo "http.sh: unknown scenario $sc (want check, admission or staged)" >&2
		exit 2
		;;
	esac
done

if (( ROUNDS < 3 )); then
	echo "http.sh: ROUNDS must be at least 3" >&2
	exit 2
fi
# Each round is 1 + len(SCENARIOS) runs of warm-up + duration plus about 3 s
# of overhead, the open loop two more runs; with ~40 s for building and
# start-up the total must stay under 6 minutes.
runs=$(( ROUNDS * (1 + ${#scenarios[@]}) + (OPEN_LOOP ? 2 : 0) ))
budget=$(( runs * (ROUND_SECS + WARMUP_SECS + 3) + 40 ))
if (( budget > 360 )); then
	echo "http.sh: ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS WARMUP_SECS=$WARMUP_SECS SCENARIOS=\"$SCENARIOS\" would take about ${budget}s; the limit is 360s" >&2
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

# The admin token: the caller's, or one this run gives tollgated (through
# its environment, so it does not show in ps).
admin_token=${BENCH_ADMIN_TOKEN:-}
tg_env=()
if [[ -z "$admin_token" ]]; then
	admin_token="bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
	tg_env=(env "TOLLGATED_ADMIN_TOKEN=$admin_token")
fi

if (( have_tollgated )); then
	# shellcheck disable=SC2086 # BENCH_TOLLGATED_ARGS is a list of flags
	"${tg_env[@]}" "${server_pin[@]}" "$work/tollgated" --listen "127.0.0.1:$TG_PORT" \
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


# --- admission set-up --------------------------------------------------------
# metrics_ledger_txns prints tollgated's ledger transactions so far: lease
# operations (all but failed calls) plus settlements; "" if /metrics fails.
metrics_ledger_txns() {
	curl -s -m 2 -H "Authorization: Bearer $admin_token" "http://127.0.0.1:$TG_ADMIN_PORT/metrics" |
		awk '/^tollgated_lease_operations_total\{/ && !/"error"/ { s += $2; n++ }
			/^tollgated_ledger_settlements_total / { s += $2; n++ }
			END { if (n) printf "%d", s }'
}

admission_args=()
if (( have_tollgated )); then
	for sc in "${scenarios[@]}"; do
		[[ "$sc" == admission ]] || continue
		agents_file=""
		if [[ -n "${BENCH_ACCOUNTS_FILE:-}" ]]; then
			agents_file=$BENCH_ACCOUNTS_FILE
		elif [[ -f "$work/accounts.txt" ]]; then
			agents_file="$work/accounts.txt"
		elif [[ -n "${BENCH_KEY:-}" ]]; then
			agents_file="$work/agents.txt"
			echo "demo $BENCH_KEY" >"$agents_file"
		fi
		ptoken=$(curl -s -m 2 -X POST -H "Authorization: Bearer $admin_token" --data '{}' \
			"http://127.0.0.1:$TG_ADMIN_PORT/v1/platform-tokens" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
		agent=$(awk '!/^#/ && NF == 2 { print $1; exit }' "${agents_file:-/dev/null}")
		status=000
		if [[ -n "$ptoken" && -n "$agent" ]]; then
			status=$(curl -s -o /dev/null -m 1 -w '%{http_code}' -H "Authorization: Bearer $ptoken" \
				"$tg_url/v1/admission?agent_id=$agent" || true)
		fi
		if [[ "$status" == 200 ]]; then
			admission_args=(--accounts-file "$agents_file" --platform-token "$ptoken")
		else
			log "GET /v1/admission cannot be measured (platform token ${ptoken:+issued}${ptoken:-not issued}, agent '${agent}', HTTP $status): skipped"
			keep=()
			for s2 in "${scenarios[@]}"; do [[ "$s2" == admission ]] || keep+=("$s2"); done
			scenarios=("${keep[@]}")
		fi
	done
	if [[ -z "$(metrics_ledger_txns)" ]]; then
		log "tollgated's /metrics does not answer with the admin token: no ledger transaction rate"
	fi
fi

# --- rounds ------------------------------------------------------------------
limit=$(( ROUND_SECS + WARMUP_SECS + 15 ))
clk_tck=$(getconf CLK_TCK)

# json_num FILE KEY prints the first numeric value of "KEY": in FILE. The
# loadtest JSON is one compact line whose "latency_us" object comes before
# any other "p99" key.
json_num() {
	grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2
}

# cpu_ticks PID prints the user + system time of PID in clock ticks.
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# measure NAME URL PID TAG ARGS... runs one loadtest against the server PID
# and prints "rps p99_us cpu_us_per_request cpu_us_per_op ledger_txn_per_s
# busy_percent" (busy: the server's CPU time over the window's length; near
# 100 the server, not the load generator, is the limit), or "FAILED". The server's CPU and tollgated's ledger counters are read when
# the warm-up ends and when the measured window does.
measure() {
	local name=$1 url=$2 pid=$3 tag=$4
	shift 4
	local out="$work/$name-$tag.json" c0 c1 l0="" l1=""
	"${load_pin[@]}" timeout "$limit" "$work/loadtest" --url "$url" -c "$CONNS" -p "$PIPELINE" \
		-d "${ROUND_SECS}s" --warmup "${WARMUP_SECS}s" --json -q "$@" >"$out" 2>"$work/$name-$tag.err" &
	local lt=$!
	sleep "$WARMUP_SECS"
	c0=$(cpu_ticks "$pid")
	[[ "$name" == baseline ]] || l0=$(metrics_ledger_txns)
	sleep "$ROUND_SECS"
	c1=$(cpu_ticks "$pid")
	[[ "$name" == baseline ]] || l1=$(metrics_ledger_txns)
	if wait "$lt"; then
		awk -v rps="$(json_num "$out" throughput_rps)" -v p99="$(json_num "$out" p99)" \
			-v req="$(json_num "$out" requests)" -v ops="$(json_num "$out" ops)" \
			-v c="$(( c1 - c0 ))" -v hz="$clk_tck" -v l0="$l0" -v l1="$l1" -v s="$ROUND_SECS" 'BEGIN {
				cpu = c / hz * 1e6
				l = (l0 == "" || l1 == "") ? -1 : (l1 - l0) / s
				printf "%s %s %.2f %.2f %.1f %.0f\n", rps, p99, cpu / req, cpu / (ops > 0 ? ops : req), l, cpu / s / 1e4 }'
	else
		log "$tag against $name failed:"
		sed 's/^/    /' "$work/$name-$tag.err" >&2
		echo FAILED
	fi
}

scenario_args() { # SCENARIO
	case "$1" in
	admission) echo "--scenario admission ${admission_args[*]}" ;;
	*) echo "--scenario $1 ${account_args[*]}" ;;
	esac
}

baseline_pid=${pids[0]}
tollgated_pid=${pids[1]:-}
declare -A r_rps r_p99 r_cpu r_cpuop r_led r_busy

round_of() { # ROUND NAME: measure and store
	local res
	if [[ "$2" == baseline ]]; then
		res=$(measure baseline "$base_url" "$baseline_pid" "r$1")
	else
		# shellcheck disable=SC2046 # the arguments are words
		res=$(measure tollgated "$tg_url" "$tollgated_pid" "$2-r$1" $(scenario_args "$2"))
	fi
	if [[ "$res" == FAILED ]]; then
		failed=1
		return
	fi
	read -r r_rps[$2,$1] r_p99[$2,$1] r_cpu[$2,$1] r_cpuop[$2,$1] r_led[$2,$1] r_busy[$2,$1] <<<"$res"
}

echo
echo "HTTP benchmark: closed loop, $CONNS connections, pipeline $PIPELINE, ${ROUND_SECS}s rounds after ${WARMUP_SECS}s warm-up"
echo "CPU = user + system time of the server process over the measured window, per request (per operation for staged)"
failed=0
names=(baseline)
(( have_tollgated )) && names+=("${scenarios[@]}")
for (( r = 1; r <= ROUNDS; r++ )); do
	order=("${names[@]}")
	if (( r % 2 == 0 )); then # the baseline last
		order=("${names[@]:1}" baseline)
	fi
	for n in "${order[@]}"; do
		round_of "$r" "$n"
	done
	echo "round $r"
	for n in "${names[@]}"; do
		if [[ -z "${r_rps[$n,$r]:-}" ]]; then
			printf '  %-10s FAILED\n' "$n"
			continue
		fi
		awk -v n="$n" -v rps="${r_rps[$n,$r]}" -v p99="${r_p99[$n,$r]}" -v cpu="${r_cpu[$n,$r]}" \
			-v cpuop="${r_cpuop[$n,$r]}" -v led="${r_led[$n,$r]}" -v busy="${r_busy[$n,$r]}" \
			-v brps="${r_rps[baseline,$r]:-}" -v bp99="${r_p99[baseline,$r]:-}" -v bcpu="${r_cpu[baseline,$r]:-}" 'BEGIN {
			line = sprintf("  %-10s %8.0f req/s  p99 %8.1f µs  CPU %6.2f µs/req (busy %3d%%)", n, rps, p99, cpu, busy)
			if (n == "staged") line = line sprintf(" (%.2f µs/op)", cpuop)
			if (n != "baseline" && led >= 0) line = line sprintf("  ledger %.1f txn/s", led)
			if (n != "baseline" && brps != "") {
				c = (n == "staged") ? cpuop : cpu
				line = line sprintf("  |  ratio: throughput %.3f, p99 %.3f, CPU %.3f", rps / brps, p99 / bp99, c / bcpu)
			}
			print line }'
	done
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

# series NAME FIELD [RATIO]: the per-round values of a field, or of its ratio
# to the baseline's in the same round.
series() {
	local r v b
	for (( r = 1; r <= ROUNDS; r++ )); do
		case "$2" in
		rps) v=${r_rps[$1,$r]:-} b=${r_rps[baseline,$r]:-} ;;
		p99) v=${r_p99[$1,$r]:-} b=${r_p99[baseline,$r]:-} ;;
		cpu) v=${r_cpu[$1,$r]:-} b=${r_cpu[baseline,$r]:-} ;;
		cpuop) v=${r_cpuop[$1,$r]:-} b=${r_cpu[baseline,$r]:-} ;;
		led) v=${r_led[$1,$r]:-} b=1 ;;
		busy) v=${r_busy[$1,$r]:-} b=1 ;;
		esac
		[[ -n "$v" && -n "$b" ]] || continue
		if [[ -n "${3:-}" ]]; then
			awk -v a="$v" -v b="$b" 'BEGIN { printf "%.3f\n", a / b }'
		else
			echo "$v"
		fi
	done
}

echo
echo "baseline throughput (req/s):  $(stats %.0f $(series baseline rps))"
echo "baseline p99 (µs):            $(stats %.1f $(series baseline p99))"
echo "baseline CPU (µs/req):        $(stats %.2f $(series baseline cpu))"
echo "baseline busy (% of a CPU):    $(stats %.0f $(series baseline busy))"
if (( have_tollgated )); then
	for n in "${scenarios[@]}"; do
		cpu_field=cpu target_cpu="" target_rps=""
		case "$n" in
		check) target_cpu="(target <= 1.30)" target_rps="(target >= 0.80)" ;;
		admission) target_cpu="(target <= 1.15)" ;;
		staged) cpu_field=cpuop target_cpu="(per operation; target <= 3.50)" ;;
		esac
		echo "$n:"
		echo "  tollgated/baseline throughput: $(stats %.3f $(series "$n" rps ratio))   $target_rps"
		echo "  tollgated/baseline p99:        $(stats %.3f $(series "$n" p99 ratio))"
		echo "  tollgated/baseline CPU:        $(stats %.3f $(series "$n" "$cpu_field" ratio))   $target_cpu"
		echo "  tollgated CPU (µs/req):        $(stats %.2f $(series "$n" cpu))"
		echo "  ledger transactions/s:        $(stats %.1f $(series "$n" led))"
	done
else
	echo "tollgated: NOT MEASURED (baseline only)"
fi

# --- open loop ---------------------------------------------------------------
# Half of tollgated's median closed-loop check throughput (of the baseline's
# when there is no tollgated), offered to both servers on a fixed schedule;
# latency counts from each request's due time.
if (( OPEN_LOOP )); then
	peak_of=baseline
	if (( have_tollgated )) && [[ " ${scenarios[*]} " == *" check "* ]]; then
		peak_of=check
	fi
	peak=$(stats %.0f $(series "$peak_of" rps) | awk '{ print $4 }')
	if [[ -n "$peak" && "$peak" != "n/a" ]]; then
		rate=$(( peak / 2 ))
		echo
		echo "open loop at ${rate} req/s (half of the median closed-loop $peak_of throughput, $peak req/s), POST /v1/check, ${ROUND_SECS}s:"
		open_names=(baseline)
		[[ "$peak_of" == check ]] && open_names+=(check)
		for n in "${open_names[@]}"; do
			if [[ "$n" == baseline ]]; then
				res=$(measure baseline "$base_url" "$baseline_pid" open --rate "$rate")
			else
				# shellcheck disable=SC2046
				res=$(measure tollgated "$tg_url" "$tollgated_pid" open --rate "$rate" $(scenario_args check))
			fi
			if [[ "$res" == FAILED ]]; then
				failed=1
				continue
			fi
			read -r rps p99 cpu _ _ _ <<<"$res"
			f="$work/$( [[ $n == baseline ]] && echo baseline || echo tollgated )-open.json"
			awk -v n="$n" -v rps="$rps" -v p50="$(json_num "$f" p50)" -v p99="$p99" -v cpu="$cpu" \
				-v missed="$(json_num "$f" missed)" 'BEGIN {
				printf "  %-10s %8.0f req/s  p50 %8.1f µs  p99 %8.1f µs  CPU %6.2f µs/req  missed sends %d%s\n",
					n, rps, p50, p99, cpu, missed, (n == "check" ? "   (target p99 <= 1000 µs)" : "") }'
		done
	fi
fi
exit "$failed"
