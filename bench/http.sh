#!/usr/bin/env bash
# bench/http.sh — tollgated's HTTP data plane against a bare fasthttp server
# (bench/baseline), side by side, with the same load.
#
# It builds bench/baseline, cmd/tollgated, cmd/loadtest, bench/recvfloor and
# bench/syncprobe,
# starts both servers on loopback, and runs rounds of identical closed-loop
# load from wrk (one thread; bench/wrk.lua builds the requests): in each
# round every run of RUNS once — the baseline at CONNS and at HIGH_CONNS
# connections, and tollgated's scenarios (the order reverses in even rounds,
# so drift on this shared machine hits both servers alike):
#   check       POST /v1/check at CONNS connections, every check billed
#               durably (the shipped --ack)
#   check256    the same at HIGH_CONNS connections, where throughput is the
#               server's and not the fdatasync round trip's: at CONNS
#               closed-loop connections a durable check is bound by
#               CONNS / (fdatasync + service time)
#   admission   GET /v1/admission?agent_id=demo at CONNS connections
#   staged      admit + commit + finish at CONNS connections, driven by
#               cmd/loadtest (three dependent requests: wrk sends one kind)
# Servers and load generator are pinned to separate CPUs with taskset.
#
# For every run it reports throughput, p99 and the server's CPU per request:
# user + system time of the server process (/proc/PID/stat) over the
# measured wrk run, divided by the requests wrk counted. (Softirq time the
# kernel spends delivering loopback packets is charged to no process, for
# either server.) Then min/median/max of the per-round ratios
# tollgated/baseline — check and admission against the baseline at CONNS,
# check256 against the baseline at HIGH_CONNS, staged per operation against
# one baseline request at CONNS — beside the targets.
#
# Unless FLOORS=0, every round also measures bench/recvfloor at CONNS
# connections, with the baseline's requests: a responder that parses
# nothing, driven by epoll (floor-epoll: a read per readable connection, a
# write per answer, as tollgated's loop does) and by io_uring (floor-uring:
# multishot receives into provided buffers, sends batched, one
# io_uring_enter an iteration). Their CPU per request is what the I/O alone
# costs each way on this machine: the floor any server's ratio stands on.
#
# Last, unless OPEN_LOOP=0, open-loop runs of cmd/loadtest (HdrHistogram,
# latency from each request's due time) at half the median throughput of
# check256: the baseline while bench/syncprobe measures the fdatasync
# latency of the disk under the data directory (a sync about every
# millisecond, near the spool's own rate at that load, on the server's CPU,
# with the load generator busy on the other as in tollgated's runs),
# tollgated with its data directory on that disk, and tollgated with it on
# tmpfs (/dev/shm).
# Defaults take about 6 minutes, and the script refuses settings that
# could pass 6.5.
#
# A check needs a key: BENCH_KEY (a --demo-key tollgated is given in
# BENCH_TOLLGATED_ARGS; `make bench-http` does this). The admission run
# gets a platform token through the admin API with a token this script
# gives tollgated (TOLLGATED_ADMIN_TOKEN); the agent is "demo".
#
# Knobs (environment): ROUNDS=3 ROUND_SECS=8 WARMUP_SECS=2 CONNS=64
# HIGH_CONNS=256 SCENARIOS="check check256 admission staged" OPEN_LOOP=1
# FLOORS=1 TG_PORT=18080 TG_ADMIN_PORT=18091 BASE_PORT=18081 TMPFS_PORT=18082
# TMPFS_ADMIN_PORT=18092 FLOOR_PORT=18083 (and FLOOR_PORT+1). Everything stays on 127.0.0.1.
set -euo pipefail

cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-64}
HIGH_CONNS=${HIGH_CONNS:-256}
TG_PORT=${TG_PORT:-18080}
TG_ADMIN_PORT=${TG_ADMIN_PORT:-18091}
BASE_PORT=${BASE_PORT:-18081}
FLOOR_PORT=${FLOOR_PORT:-18083}
FLOORS=${FLOORS:-1}
TMPFS_PORT=${TMPFS_PORT:-18082}
TMPFS_ADMIN_PORT=${TMPFS_ADMIN_PORT:-18092}
SCENARIOS=${SCENARIOS:-check check256 admission staged}
OPEN_LOOP=${OPEN_LOOP:-1}
WRK_LUA=$PWD/bench/wrk.lua
read -r -a scenarios <<<"$SCENARIOS"
for sc in "${scenarios[@]}"; do
	case "$sc" in
	check | check256 | admission | staged) ;;
	*)
		echo "http.sh: unknown scenario $sc (want check, check256, admission or staged)" >&2
		exit 2
		;;
	esac
done
if [[ -z "${BENCH_KEY:-}" ]]; then
	echo "http.sh: BENCH_KEY is not set (make bench-http sets it and gives tollgated --demo-key)" >&2
	exit 2
fi
if (( ROUNDS < 3 )); then
	echo "http.sh: ROUNDS must be at least 3" >&2
	exit 2
fi
has() { [[ " ${scenarios[*]} " == *" $1 "* ]]; }
# The baseline at HIGH_CONNS runs only when check256 does.
base_runs=1
has check256 && base_runs=2
# Each run is a warm-up, a measured window and about a second of overhead;
# the open loop is three more runs; building and start-up take about 60 s.
floors=()
(( FLOORS )) && floors=(floor-epoll floor-uring)
runs=$(( ROUNDS * (base_runs + ${#floors[@]} + ${#scenarios[@]}) + (OPEN_LOOP ? 3 : 0) ))
budget=$(( runs * (ROUND_SECS + WARMUP_SECS + 1) + 60 ))
if (( budget > 390 )); then
	echo "http.sh: ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS WARMUP_SECS=$WARMUP_SECS SCENARIOS=\"$SCENARIOS\" FLOORS=$FLOORS would take about ${budget}s; the limit is 390s" >&2
	exit 2
fi

bash scripts/install-bench-tools.sh wrk

work=$(mktemp -d)
tmpfs_dir=""
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
	[[ -z "$tmpfs_dir" ]] || rm -rf "$tmpfs_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "http.sh: $*" >&2; }
# shellcheck source=bench/wrkrun.sh
source bench/wrkrun.sh

# --- build -----------------------------------------------------------------
log "building baseline, tollgated, loadtest, recvfloor and syncprobe"
go build -o "$work/baseline" ./bench/baseline
go build -o "$work/tollgated" ./cmd/tollgated
go build -o "$work/loadtest" ./cmd/loadtest
go build -o "$work/recvfloor" ./bench/recvfloor
go build -o "$work/syncprobe" ./bench/syncprobe

log "$(pin_cpus)"
pin_cpus >/dev/null

check_body='{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}'

# wait_200 URL SECONDS waits until a check with BENCH_KEY is answered 200;
# prints the last status seen ("000" if nothing answers).
wait_200() {
	local status=000 i
	for (( i = 0; i < $2 * 10; i++ )); do
		status=$(curl -s -o /dev/null -m 1 -w '%{http_code}' -X POST \
			-H "Authorization: Bearer $BENCH_KEY" -H 'Content-Type: application/json' \
			--data "$check_body" "$1/v1/check" || true)
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
baseline_pid=$!
if [[ $(wait_200 "$base_url" 5) != 200 ]]; then
	log "baseline did not come up:"
	cat "$work/baseline.log" >&2
	exit 1
fi

# The floors: floor_url[MODE] and floor_pid[MODE], each idle (blocked in
# epoll_wait or io_uring_enter) while the others are measured.
declare -A floor_url floor_pid
port=$FLOOR_PORT
for f in "${floors[@]}"; do
	mode=${f#floor-}
	"${server_pin[@]}" "$work/recvfloor" --mode "$mode" --listen "127.0.0.1:$port" 2>"$work/$f.log" &
	pids+=($!)
	floor_pid[$f]=$!
	floor_url[$f]="http://127.0.0.1:$port"
	if [[ $(wait_200 "${floor_url[$f]}" 5) != 200 ]]; then
		log "recvfloor --mode $mode did not come up:"
		cat "$work/$f.log" >&2
		exit 1
	fi
	port=$(( port + 1 ))
done

# The admin token this run gives tollgated (through its environment, so it
# does not show in ps).
admin_token="bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

# start_tollgated PORT ADMIN_PORT DATA_DIR LOG starts tollgated and waits for
# it to answer checks; sets started_pid.
start_tollgated() {
	# shellcheck disable=SC2086 # BENCH_TOLLGATED_ARGS is a list of flags
	env "TOLLGATED_ADMIN_TOKEN=$admin_token" "${server_pin[@]}" "$work/tollgated" \
		--listen "127.0.0.1:$1" --admin "127.0.0.1:$2" --data-dir "$3" \
		${BENCH_TOLLGATED_ARGS:-} >"$4" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
	local status
	status=$(wait_200 "http://127.0.0.1:$1" 10)
	if [[ "$status" != 200 ]]; then
		log "tollgated (data in $3) answers POST /v1/check with HTTP $status, not 200; last lines of its log:"
		tail -n 5 "$4" | sed 's/^/    /' >&2 || true
		exit 1
	fi
}
start_tollgated "$TG_PORT" "$TG_ADMIN_PORT" "$work/tollgated-data" "$work/tollgated.log"
tollgated_pid=$started_pid

# --- admission set-up --------------------------------------------------------
ptoken=""
if has admission; then
	ptoken=$(curl -s -m 2 -X POST -H "Authorization: Bearer $admin_token" --data '{}' \
		"http://127.0.0.1:$TG_ADMIN_PORT/v1/platform-tokens" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
	status=000
	if [[ -n "$ptoken" ]]; then
		status=$(curl -s -o /dev/null -m 1 -w '%{http_code}' -H "Authorization: Bearer $ptoken" \
			"$tg_url/v1/admission?agent_id=demo" || true)
	fi
	if [[ "$status" != 200 ]]; then
		log "GET /v1/admission cannot be measured (platform token ${ptoken:+issued}${ptoken:-not issued}, HTTP $status): skipped"
		keep=()
		for s in "${scenarios[@]}"; do [[ "$s" == admission ]] || keep+=("$s"); done
		scenarios=("${keep[@]}")
	fi
fi

# --- rounds ------------------------------------------------------------------
clk_tck=$(getconf CLK_TCK)

# json_num FILE KEY prints the first numeric value of "KEY": in FILE. The
# loadtest JSON is one compact line whose "latency_us" object comes before
# any other "p99" key.
json_num() {
	grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2
}

# loadtest_measure TAG URL PID ARGS... runs cmd/loadtest against the server
# PID and prints "rps p50 p99 cpu_us_per_request busy_percent
# cpu_us_per_op missed" or FAILED; the CPU is read when the warm-up ends
# and when the measured window does.
loadtest_measure() {
	local tag=$1 url=$2 pid=$3
	shift 3
	local out="$work/lt-$tag.json" c0 c1
	"${load_pin[@]}" timeout $(( ROUND_SECS + WARMUP_SECS + 15 )) "$work/loadtest" --url "$url" \
		-c "$CONNS" -d "${ROUND_SECS}s" --warmup "${WARMUP_SECS}s" --json -q "$@" >"$out" 2>"$work/lt-$tag.err" &
	local lt=$!
	sleep "$WARMUP_SECS"
	c0=$(cpu_ticks "$pid")
	sleep "$ROUND_SECS"
	c1=$(cpu_ticks "$pid")
	if ! wait "$lt"; then
		log "loadtest $tag failed:"
		sed 's/^/    /' "$work/lt-$tag.err" >&2
		echo FAILED
		return
	fi
	awk -v rps="$(json_num "$out" throughput_rps)" -v p50="$(json_num "$out" p50)" -v p99="$(json_num "$out" p99)" \
		-v req="$(json_num "$out" requests)" -v ops="$(json_num "$out" ops)" -v missed="$(json_num "$out" missed)" \
		-v c="$(( c1 - c0 ))" -v hz="$clk_tck" -v s="$ROUND_SECS" 'BEGIN {
			cpu = c / hz * 1e6
			printf "%s %s %s %.2f %.0f %.2f %d\n", rps, p50, p99, cpu / req, cpu / s / 1e4,
				cpu / (ops > 0 ? ops : req), missed }'
}

declare -A r_rps r_p99 r_cpu r_busy

# run_one ROUND NAME measures one run and stores its figures.
run_one() {
	local res
	case "$2" in
	baseline) res=$(wrk_measure "$2-r$1" "$CONNS" "$base_url/v1/check" "$baseline_pid" post "$check_body") ;;
	baseline256) res=$(wrk_measure "$2-r$1" "$HIGH_CONNS" "$base_url/v1/check" "$baseline_pid" post "$check_body") ;;
	floor-*) res=$(wrk_measure "$2-r$1" "$CONNS" "${floor_url[$2]}/v1/check" "${floor_pid[$2]}" post "$check_body") ;;
	check) res=$(wrk_measure "$2-r$1" "$CONNS" "$tg_url/v1/check" "$tollgated_pid" check "$BENCH_KEY") ;;
	check256) res=$(wrk_measure "$2-r$1" "$HIGH_CONNS" "$tg_url/v1/check" "$tollgated_pid" check "$BENCH_KEY") ;;
	admission) res=$(wrk_measure "$2-r$1" "$CONNS" "$tg_url/v1/admission?agent_id=demo" "$tollgated_pid" admission "$ptoken") ;;
	staged)
		res=$(loadtest_measure "$2-r$1" "$tg_url" "$tollgated_pid" --scenario staged --key "$BENCH_KEY")
		# CPU per operation in place of CPU per request.
		[[ "$res" == FAILED ]] || res=$(awk '{ print $1, $2, $3, $6, $5 }' <<<"$res")
		;;
	esac
	if [[ "$res" == FAILED ]]; then
		failed=1
		return
	fi
	read -r r_rps[$2,$1] _ r_p99[$2,$1] r_cpu[$2,$1] r_busy[$2,$1] <<<"$res"
}

# reference NAME: the baseline run a scenario is compared with.
reference() {
	case "$1" in
	check256 | baseline256) echo baseline256 ;;
	*) echo baseline ;;
	esac
}

echo
echo "HTTP benchmark: closed loop from wrk (staged: cmd/loadtest), $CONNS connections (check256 and baseline256: $HIGH_CONNS), ${ROUND_SECS}s measured after ${WARMUP_SECS}s of warm-up"
echo "CPU = user + system time of the server process over the measured run, per request (per admit + commit + finish for staged)"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
failed=0
names=(baseline)
(( base_runs == 2 )) && names+=(baseline256)
names+=("${floors[@]}" "${scenarios[@]}")
# show_one ROUND NAME prints one run's figures, against its reference's.
show_one() {
	local n=$2 r=$1 ref
	if [[ -z "${r_rps[$n,$r]:-}" ]]; then
		printf '  %-11s FAILED\n' "$n"
		return
	fi
	ref=$(reference "$n")
	awk -v n="$n" -v ref="$ref" -v rps="${r_rps[$n,$r]}" -v p99="${r_p99[$n,$r]}" -v cpu="${r_cpu[$n,$r]}" \
		-v busy="${r_busy[$n,$r]}" -v brps="${r_rps[$ref,$r]:-}" -v bcpu="${r_cpu[$ref,$r]:-}" 'BEGIN {
		line = sprintf("  %-11s %8.0f req/s  p99 %8.1f µs  CPU %6.2f µs/%s (busy %3d%%)", n, rps, p99, cpu, (n == "staged" ? "op " : "req"), busy)
		if (n !~ /^baseline/ && brps != "")
			line = line sprintf("  |  vs %s: throughput %.3f, CPU %.3f", ref, rps / brps, cpu / bcpu)
		print line }'
}
rounds run_one show_one "${names[@]}"

# stats FORMAT V... prints min/median/max of the values.
stats() {
	local f=$1
	shift
	printf '%s\n' "$@" | sort -g | awk -v f="$f" '{ v[NR] = $1 } END {
		if (NR == 0) { print "n/a"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "min " f "  median " f "  max " f, v[1], m, v[NR] }'
}

# series NAME FIELD [ratio]: the per-round values of a field, or of its
# ratio to the reference baseline's in the same round.
series() {
	local r v b ref
	ref=$(reference "$1")
	for (( r = 1; r <= ROUNDS; r++ )); do
		case "$2" in
		rps) v=${r_rps[$1,$r]:-} b=${r_rps[$ref,$r]:-} ;;
		p99) v=${r_p99[$1,$r]:-} b=${r_p99[$ref,$r]:-} ;;
		cpu) v=${r_cpu[$1,$r]:-} b=${r_cpu[$ref,$r]:-} ;;
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
for n in baseline baseline256; do
	[[ " ${names[*]} " == *" $n "* ]] || continue
	echo "$n throughput (req/s):  $(stats %.0f $(series $n rps))"
	echo "$n CPU (µs/req):        $(stats %.2f $(series $n cpu))"
	echo "$n busy (% of a CPU):   $(stats %.0f $(series $n busy))"
done
for n in "${floors[@]}"; do
	echo "$n (bench/recvfloor, nothing parsed; against baseline): CPU $(stats %.3f $(series "$n" cpu ratio)), $(stats %.2f $(series "$n" cpu)) µs/req"
done
for n in "${scenarios[@]}"; do
	target_cpu="" target_rps=""
	case "$n" in
	check) target_cpu="(target <= 1.10)" ;;
	check256) target_cpu="(target <= 1.10)" target_rps="(target >= 1.00)" ;;
	admission) target_cpu="(target <= 0.75)" ;;
	staged) target_cpu="(per operation against one bare request)" ;;
	esac
	echo "$n (against $(reference "$n")):"
	echo "  tollgated/baseline throughput: $(stats %.3f $(series "$n" rps ratio))   $target_rps"
	echo "  tollgated/baseline p99:        $(stats %.3f $(series "$n" p99 ratio))"
	echo "  tollgated/baseline CPU:        $(stats %.3f $(series "$n" cpu ratio))   $target_cpu"
	echo "  tollgated throughput (req/s):  $(stats %.0f $(series "$n" rps))"
	echo "  tollgated CPU (µs/$([[ $n == staged ]] && echo op || echo req)):        $(stats %.2f $(series "$n" cpu))"
done

# --- open loop ---------------------------------------------------------------
# Half of the median closed-loop throughput of check256 (of check when it
# did not run), offered on a fixed schedule by cmd/loadtest; latency counts
# from each request's due time.
if (( OPEN_LOOP )); then
	peak_of=check256
	has check256 || peak_of=check
	peak=$(stats %.0f $(series "$peak_of" rps) | awk '{ print $4 }')
	if [[ -n "$peak" && "$peak" != "n/a" ]]; then
		rate=$(( peak / 2 ))
		tmpfs_dir=$(mktemp -d /dev/shm/tollgated-bench.XXXXXX)
		start_tollgated "$TMPFS_PORT" "$TMPFS_ADMIN_PORT" "$tmpfs_dir/data" "$work/tollgated-tmpfs.log"
		tmpfs_pid=$started_pid
		echo
		echo "open loop at ${rate} req/s (half of the median closed-loop $peak_of throughput, $peak req/s), POST /v1/check, ${ROUND_SECS}s, cmd/loadtest:"
		# The disk's own fdatasync latency, measured on the server's CPU
		# while the baseline takes the same open-loop load.
		"${server_pin[@]}" "$work/syncprobe" --dir "$work" --gap 1ms --duration "$(( WARMUP_SECS + ROUND_SECS ))s" >"$work/syncprobe.out" 2>&1 &
		probe=$!
		for n in baseline disk tmpfs; do
			case "$n" in
			baseline) res=$(loadtest_measure open-$n "$base_url" "$baseline_pid" --rate "$rate" -c "$HIGH_CONNS") ;;
			disk) res=$(loadtest_measure open-$n "$tg_url" "$tollgated_pid" --rate "$rate" -c "$HIGH_CONNS" --scenario check --key "$BENCH_KEY") ;;
			tmpfs) res=$(loadtest_measure open-$n "http://127.0.0.1:$TMPFS_PORT" "$tmpfs_pid" --rate "$rate" -c "$HIGH_CONNS" --scenario check --key "$BENCH_KEY") ;;
			esac
			if [[ "$n" == baseline ]]; then
				wait "$probe" || true
			fi
			if [[ "$res" == FAILED ]]; then
				failed=1
				continue
			fi
			read -r rps p50 p99 cpu _ _ missed <<<"$res"
			label=$n
			[[ $n == baseline ]] || label="check, $n"
			printf '  %-12s %8.0f req/s  p50 %8.1f µs  p99 %8.1f µs  CPU %6.2f µs/req  missed sends %d\n' \
				"$label" "$rps" "$p50" "$p99" "$cpu" "$missed"
		done
		sync_line=$(grep '^SYNC ' "$work/syncprobe.out" || true)
		if [[ -n "$sync_line" ]]; then
			awk -v line="$sync_line" 'BEGIN {
				n = split(line, f, /[ =]/)
				for (i = 2; i < n; i += 2) v[f[i]] = f[i + 1]
				printf "  fdatasync of the data directory'"'"'s disk, beside the baseline'"'"'s run: %d syncs, p50 %.1f µs, p99 %.1f µs, longest %.1f µs\n", v["n"], v["p50_us"], v["p99_us"], v["max_us"]
				printf "  targets: p99 on tmpfs <= 1000 µs; p99 on disk <= %.1f µs (the disk'"'"'s fdatasync p99 + 1 ms)\n", v["p99_us"] + 1000 }'
		else
			log "syncprobe gave no result:"
			sed 's/^/    /' "$work/syncprobe.out" >&2
		fi
	fi
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
