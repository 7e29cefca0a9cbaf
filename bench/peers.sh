#!/usr/bin/env bash
# bench/peers.sh — tollgated's durable check against two rate limiters that
# answer the same question ("may this request run?"), under the same wrk
# harness as bench/http.sh: the bare fasthttp server (bench/baseline),
# tollgated (POST /v1/check, every check billed durably before its answer),
# gubernator (its HTTP gateway, POST /v1/GetRateLimits) and
# envoyproxy/ratelimit (its HTTP POST /json) with Redis behind it.
#
# The peers are built from the Go module proxy at pinned versions, each in a
# throw-away module under this run's scratch directory:
#   github.com/gubernator-io/gubernator/v2                 v2.13.0
#   github.com/envoyproxy/ratelimit   v1.4.1-0.20260122083618-3fb702589d36
# Redis is Debian's redis-server (scripts/install-bench-tools.sh installs it
# and wrk when missing), run with persistence off. Every server runs on the
# upper half of the CPUs (ratelimit and its Redis together there, so they
# share what the others have alone), wrk on the lower half.
#
# Each round measures every server once (the order reverses in even rounds)
# at CONNS connections: req/s, p99, and the server's CPU per request
# (user + system from /proc/PID/stat over the measured run; for ratelimit
# its own and its Redis's, and their sum). Then the medians and the ratio of
# tollgated's durable checks per CPU-second to each peer's answers per
# CPU-second (the inverse ratio of CPU per request). The limits are set so
# high that every answer is "allowed": each server does its whole work per
# request, and wrk counts any non-2xx answer as a failure.
#
# Then, when ratelimit is among the peers, the gRPC path: Envoy's
# RateLimitService/ShouldRateLimit against tollgated's --grpc-listen and
# ratelimit's gRPC port, driven by bench/grpcload (2 HTTP/2 connections,
# CONNS/2 calls in flight on each, as Envoy multiplexes), the same rounds,
# CPU per decision read by grpcload over its measured window; beside them
# bench/grpcfloor, grpc-go answering OK from an empty handler with
# tollgated's server options: the floor of any service built on grpc-go.
#
# The peers do not do what tollgated does per request — neither prices a
# workload nor makes its decision durable before it answers (gubernator
# keeps its counters in memory; ratelimit's Redis here never persists) —
# so the comparison is of the question answered per CPU-second, and is in
# their favour.
#
# Knobs (environment): ROUNDS=3 ROUND_SECS=8 WARMUP_SECS=2 CONNS=64
# PEERS="gubernator ratelimit". Ports 18180-18190 on 127.0.0.1. Defaults
# take about 3 minutes after the first build (which downloads and compiles
# the peers: a few minutes more).
set -euo pipefail

cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-8}
WARMUP_SECS=${WARMUP_SECS:-2}
CONNS=${CONNS:-64}
PEERS=${PEERS:-gubernator ratelimit}
GUBERNATOR_VERSION=v2.13.0
RATELIMIT_VERSION=v1.4.1-0.20260122083618-3fb702589d36
BENCH_KEY=bench-demo-key
WRK_LUA=$PWD/bench/wrk.lua
read -r -a peers <<<"$PEERS"
for p in "${peers[@]}"; do
	case "$p" in
	gubernator | ratelimit) ;;
	*)
		echo "peers.sh: unknown peer $p (want gubernator or ratelimit)" >&2
		exit 2
		;;
	esac
done
(( ROUNDS >= 3 )) || { echo "peers.sh: ROUNDS must be at least 3" >&2; exit 2; }
grpc_servers=0
[[ " ${peers[*]} " == *" ratelimit "* ]] && grpc_servers=3
budget=$(( ROUNDS * (2 + ${#peers[@]} + grpc_servers) * (ROUND_SECS + WARMUP_SECS + 1) + 30 ))
if (( budget > 360 )); then
	echo "peers.sh: ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS WARMUP_SECS=$WARMUP_SECS would take about ${budget}s; the limit is 360s" >&2
	exit 2
fi

tools=(wrk)
[[ " ${peers[*]} " == *" ratelimit "* ]] && tools+=(redis-server)
bash scripts/install-bench-tools.sh "${tools[@]}"

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

log() { echo "peers.sh: $*" >&2; }
# shellcheck source=bench/wrkrun.sh
source bench/wrkrun.sh

# build_peer NAME MODULE VERSION PACKAGE builds PACKAGE of MODULE@VERSION in
# a module of its own under the scratch directory, into $work/NAME.
build_peer() {
	local dir="$work/build-$1"
	mkdir -p "$dir"
	(
		cd "$dir"
		go mod init "peerbench/$1" >/dev/null 2>&1
		go get "$4@$3" >build.log 2>&1 || { cat build.log >&2; exit 1; }
		go build -o "$work/$1" "$4" >>build.log 2>&1 || { cat build.log >&2; exit 1; }
	)
}

log "building baseline and tollgated"
go build -o "$work/baseline" ./bench/baseline
go build -o "$work/tollgated" ./cmd/tollgated
go build -o "$work/grpcload" ./bench/grpcload
go build -o "$work/grpcfloor" ./bench/grpcfloor
for p in "${peers[@]}"; do
	log "building $p from the Go module proxy"
	case "$p" in
	gubernator) build_peer gubernator github.com/gubernator-io/gubernator/v2 "$GUBERNATOR_VERSION" \
		github.com/gubernator-io/gubernator/v2/cmd/gubernator ;;
	ratelimit) build_peer ratelimit github.com/envoyproxy/ratelimit "$RATELIMIT_VERSION" \
		github.com/envoyproxy/ratelimit/src/service_cmd ;;
	esac
done

log "$(pin_cpus)"
pin_cpus >/dev/null

check_body='{"permission":"chat","workload":[{"op":"input_tokens","count":1200},{"op":"requests","count":1}]}'
guber_body='{"requests":[{"name":"bench","unique_key":"demo","hits":1,"limit":1000000000000,"duration":3600000}]}'
rl_body='{"domain":"bench","descriptors":[{"entries":[{"key":"account","value":"demo"}]}]}'

# wait_status URL BODY [HEADER] waits up to 10 s for a POST to answer 200.
wait_status() {
	local status=000 i hdr=()
	[[ -z "${3:-}" ]] || hdr=(-H "$3")
	for (( i = 0; i < 100; i++ )); do
		status=$(curl -s -o /dev/null -m 1 -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
			"${hdr[@]}" --data "$2" "$1" || true)
		[[ "$status" == 200 ]] && return 0
		sleep 0.1
	done
	log "$1 answers HTTP $status, not 200"
	return 1
}

# --- servers -------------------------------------------------------------------
declare -A url pidsof
"${server_pin[@]}" "$work/baseline" --listen 127.0.0.1:18180 2>"$work/baseline.log" &
pids+=($!)
pidsof[baseline]=$!
url[baseline]=http://127.0.0.1:18180/v1/check
wait_status "${url[baseline]}" "$check_body" || exit 1

admin_token=bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
env "TOLLGATED_ADMIN_TOKEN=$admin_token" "${server_pin[@]}" \
	"$work/tollgated" --listen 127.0.0.1:18181 --admin 127.0.0.1:18182 --data-dir "$work/tollgated-data" \
	--grpc-listen 127.0.0.1:18189 --demo-key "$BENCH_KEY" >"$work/tollgated.log" 2>&1 &
pids+=($!)
pidsof[tollgated]=$!
url[tollgated]=http://127.0.0.1:18181/v1/check
wait_status "${url[tollgated]}" "$check_body" "Authorization: Bearer $BENCH_KEY" || { tail -n 5 "$work/tollgated.log" >&2; exit 1; }

for p in "${peers[@]}"; do
	case "$p" in
	gubernator)
		# One node, no peer discovery; no tracing exporter.
		env GUBER_HTTP_ADDRESS=127.0.0.1:18183 GUBER_GRPC_ADDRESS=127.0.0.1:18184 \
			GUBER_PEER_DISCOVERY_TYPE=none GUBER_LOG_LEVEL=warn OTEL_TRACES_EXPORTER=none \
			"${server_pin[@]}" "$work/gubernator" >"$work/gubernator.log" 2>&1 &
		pids+=($!)
		pidsof[gubernator]=$!
		url[gubernator]=http://127.0.0.1:18183/v1/GetRateLimits
		wait_status "${url[gubernator]}" "$guber_body" || { tail -n 5 "$work/gubernator.log" >&2; exit 1; }
		;;
	ratelimit)
		"${server_pin[@]}" redis-server --bind 127.0.0.1 --port 18185 --save '' --appendonly no \
			--daemonize no --logfile "$work/redis.log" --dir "$work" &
		pids+=($!)
		redis_pid=$!
		# ratelimit panics if Redis does not answer when it starts.
		for (( i = 0; i < 100; i++ )); do
			[[ "$(redis-cli -h 127.0.0.1 -p 18185 ping 2>/dev/null)" == PONG ]] && break
			sleep 0.1
		done
		mkdir -p "$work/runtime/ratelimit/config"
		cat >"$work/runtime/ratelimit/config/bench.yaml" <<-'YAML'
			domain: bench
			descriptors:
			  - key: account
			    rate_limit:
			      unit: hour
			      requests_per_unit: 1000000000
		YAML
		env HOST=127.0.0.1 PORT=18186 GRPC_HOST=127.0.0.1 GRPC_PORT=18187 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18188 \
			USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:18185 \
			RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			"${server_pin[@]}" "$work/ratelimit" >"$work/ratelimit.log" 2>&1 &
		pids+=($!)
		pidsof[ratelimit]="$! $redis_pid"
		url[ratelimit]=http://127.0.0.1:18186/json
		wait_status "${url[ratelimit]}" "$rl_body" || { tail -n 5 "$work/ratelimit.log" >&2; exit 1; }
		;;
	esac
done

# --- rounds --------------------------------------------------------------------
declare -A r_rps r_p99 r_cpu r_redis
failed=0

run_one() { # ROUND NAME
	local res rs=""
	case "$2" in
	baseline) res=$(wrk_measure "$2-r$1" "$CONNS" "${url[$2]}" "${pidsof[$2]}" post "$check_body") ;;
	tollgated) res=$(wrk_measure "$2-r$1" "$CONNS" "${url[$2]}" "${pidsof[$2]}" check "$BENCH_KEY") ;;
	gubernator) res=$(wrk_measure "$2-r$1" "$CONNS" "${url[$2]}" "${pidsof[$2]}" post "$guber_body") ;;
	ratelimit)
		# Redis's share, read around the same run.
		local r0 r1
		r0=$(cpu_ticks "$redis_pid")
		res=$(wrk_measure "$2-r$1" "$CONNS" "${url[$2]}" "${pidsof[$2]}" post "$rl_body")
		r1=$(cpu_ticks "$redis_pid")
		rs=$(( r1 - r0 ))
		;;
	esac
	if [[ "$res" == FAILED ]]; then
		failed=1
		return
	fi
	read -r r_rps[$2,$1] _ r_p99[$2,$1] r_cpu[$2,$1] _ <<<"$res"
	if [[ -n "$rs" ]]; then
		# Redis's CPU per request: its ticks over the run's requests,
		# which are the measured window's rps times its length.
		r_redis[$2,$1]=$(awk -v t="$rs" -v hz="$(getconf CLK_TCK)" -v rps="${r_rps[$2,$1]}" -v s="$ROUND_SECS" \
			'BEGIN { printf "%.2f", t / hz * 1e6 / (rps * s) }')
	fi
}

names=(baseline tollgated "${peers[@]}")
echo
echo "Peers: closed loop from wrk, $CONNS connections, ${ROUND_SECS}s measured after ${WARMUP_SECS}s of warm-up, $ROUNDS rounds"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
# print_run NAME RATE P99 CPU REDIS RATE_UNIT CPU_UNIT prints one run's
# line of a round (FAILED when it has no rate).
print_run() {
	if [[ -z "$2" ]]; then
		printf '  %-11s FAILED\n' "$1"
		return
	fi
	local extra=""
	[[ -z "$5" ]] || extra=" (of which Redis $5)"
	printf '  %-11s %8.0f %s  p99 %9.1f µs  CPU %7.2f µs/%s%s\n' "$1" "$2" "$6" "$3" "$4" "$7" "$extra"
}
show_one() { # ROUND NAME
	print_run "$2" "${r_rps[$2,$1]:-}" "${r_p99[$2,$1]:-}" "${r_cpu[$2,$1]:-}" "${r_redis[$2,$1]:-}" req/s req
}
rounds run_one show_one "${names[@]}"

median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "n/a"; exit }
		print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
col() { # NAME ARRAY
	local r out=() ref="$2[$1,\$r]"
	for (( r = 1; r <= ROUNDS; r++ )); do
		eval "v=\${$2[$1,$r]:-}"
		[[ -z "$v" ]] || out+=("$v")
	done
	echo "${out[@]}"
}

echo
echo "medians ($ROUNDS rounds):"
tg_cpu=$(median $(col tollgated r_cpu))
for n in "${names[@]}"; do
	rps=$(median $(col "$n" r_rps))
	cpu=$(median $(col "$n" r_cpu))
	line=$(printf '  %-11s %8.0f req/s  CPU %7.2f µs/req' "$n" "$rps" "$cpu")
	if [[ "$n" == ratelimit ]]; then
		line+=$(printf ' (ratelimit + Redis; Redis alone %s)' "$(median $(col "$n" r_redis))")
	fi
	if [[ "$n" == gubernator || "$n" == ratelimit ]]; then
		line+=$(awk -v p="$cpu" -v t="$tg_cpu" 'BEGIN { printf "  |  tollgated durable checks per CPU-second / %s'"'"'s: %.2f× (target >= 10)", "'"$n"'", p / t }')
	fi
	echo "$line"
done

# --- gRPC: ShouldRateLimit ------------------------------------------------------
if (( grpc_servers > 0 )); then
	declare -A g_cps g_p99 g_cpu g_redis
	# A gRPC decision prices the original request (here GET /) by the
	# account's routes, as /v1/authz does; the demo policy has none, so the
	# account gets one rule: a request is one "requests" operation.
	demo_policy='{"permissions":["chat"],
	 "operations":{"input_tokens":{"weight":1},"output_tokens":{"weight":4},"requests":{"weight":10}},
	 "limits":{"max_items":1048576,"hold_timeout_ms":60000},
	 "routes":{"rules":[{"method":"GET","path":"/","op":"requests","count":1}]}}'
	if ! curl -fsS -o /dev/null -X PUT -H "Authorization: Bearer $admin_token" -H 'Content-Type: application/json' \
		--data "$demo_policy" http://127.0.0.1:18182/v1/accounts/demo/policy; then
		log "could not give account demo a route"
		exit 1
	fi
	# grpc_one ROUND NAME: tollgated bills account "demo" (domain tollgated);
	# ratelimit counts descriptor account=demo of domain bench, in Redis.
	grpc_one() {
		local args out
		case "$2" in
		tollgated) args=(-addr 127.0.0.1:18189 -domain tollgated -pids "${pidsof[tollgated]}") ;;
		grpc-go) args=(-addr 127.0.0.1:18190 -domain tollgated -pids "${pidsof[grpc-go]}") ;;
		ratelimit) args=(-addr 127.0.0.1:18187 -domain bench -pids "${pidsof[ratelimit]// /,}") ;;
		esac
		if ! out=$("${load_pin[@]}" timeout $(( WARMUP_SECS + ROUND_SECS + 20 )) "$work/grpcload" "${args[@]}" \
			-entry account=demo -conns 2 -inflight $(( CONNS / 2 > 0 ? CONNS / 2 : 1 )) \
			-warmup "${WARMUP_SECS}s" -duration "${ROUND_SECS}s" 2>&1) || [[ "$out" != *" ok="* ]] \
			|| [[ "$out" != *" over_limit=0 errors=0 "* ]]; then
			log "grpcload against $2 (round $1) failed or was refused: $out"
			failed=1
			return
		fi
		local cps p99 cpu
		cps=$(sed -n 's/.* calls_per_sec=\([0-9]*\).*/\1/p' <<<"$out")
		p99=$(sed -n 's/.* p99_us=\([0-9]*\).*/\1/p' <<<"$out")
		cpu=$(sed -n 's/.* cpu_us_per_call=\([0-9.,]*\).*/\1/p' <<<"$out")
		g_cps[$2,$1]=$cps
		g_p99[$2,$1]=$p99
		g_cpu[$2,$1]=$(awk -v c="$cpu" 'BEGIN { n = split(c, v, ","); s = 0; for (i = 1; i <= n; i++) s += v[i]; printf "%.2f", s }')
		[[ "$2" != ratelimit ]] || g_redis[$2,$1]=${cpu##*,}
	}
	"${server_pin[@]}" "$work/grpcfloor" -listen 127.0.0.1:18190 >"$work/grpcfloor.log" 2>&1 &
	pids+=($!)
	pidsof[grpc-go]=$!
	gnames=(tollgated ratelimit grpc-go)
	echo
	echo "gRPC ShouldRateLimit: closed loop from bench/grpcload, 2 connections × $(( CONNS / 2 > 0 ? CONNS / 2 : 1 )) calls in flight, ${ROUND_SECS}s measured after ${WARMUP_SECS}s, $ROUNDS rounds"
	grpc_show() { # ROUND NAME
		print_run "$2" "${g_cps[$2,$1]:-}" "${g_p99[$2,$1]:-}" "${g_cpu[$2,$1]:-}" "${g_redis[$2,$1]:-}" calls/s call
	}
	rounds grpc_one grpc_show "${gnames[@]}"
	echo
	echo "gRPC medians ($ROUNDS rounds):"
	tg_gcpu=$(median $(col tollgated g_cpu))
	rl_gcpu=$(median $(col ratelimit g_cpu))
	for n in "${gnames[@]}"; do
		line=$(printf '  %-11s %8.0f calls/s  CPU %7.2f µs/call' "$n" "$(median $(col "$n" g_cps))" "$(median $(col "$n" g_cpu))")
		if [[ "$n" == ratelimit ]]; then
			line+=$(printf ' (ratelimit + Redis; Redis alone %s)' "$(median $(col "$n" g_redis))")
			line+=$(awk -v p="$(median $(col "$n" g_cpu))" -v t="$tg_gcpu" 'BEGIN { printf "  |  tollgated decisions per CPU-second / ratelimit'"'"'s: %.2f× (target >= 5)", p / t }')
		fi
		if [[ "$n" == grpc-go ]]; then
			line+=$(awk -v p="$rl_gcpu" -v f="$(median $(col "$n" g_cpu))" 'BEGIN { printf " (an empty handler)  |  the most a grpc-go service can beat ratelimit by: %.2f×", p / f }')
		fi
		echo "$line"
	done
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
