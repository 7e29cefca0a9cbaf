#!/usr/bin/env bash
# bench/gateway.sh — what tollgated's forward-auth costs behind nginx: nginx
# alone in front of a service vs the same nginx with auth_request to
# tollgated's /v1/authz (examples/gateways/nginx/tollgated.conf), under the
# same closed-loop wrk load, side by side.
#
# The service is a second nginx server that answers 200 (so the difference
# is the forward-auth round trip and its billing, nothing else). tollgated
# runs one shard; every admitted request is billed (a default route of the
# example policy), its answer sent once the usage is on disk (--ack durable,
# the default) or at once (ACK=immediate). Servers run on the upper half of
# the CPUs, wrk on the lower half. Rounds alternate the order of the two
# setups, and the script prints each round, then the median added p50 and
# p99 latency and the median throughput ratio.
#
# Needs nginx and wrk (scripts/install-gateways.sh). Loopback only; bounded:
# ROUNDS × 2 × (ROUND_SECS + 2) seconds plus start-up, at most 5 minutes.
#
# Knobs: ROUNDS=3 ROUND_SECS=10 CONNS=32 THREADS=1 ACK=durable
# PORT_BASE=28000 (uses PORT_BASE .. PORT_BASE+4)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
ROUND_SECS=${ROUND_SECS:-10}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
ACK=${ACK:-durable}
PORT_BASE=${PORT_BASE:-28000}
if (( ROUNDS < 3 )); then
	echo "gateway.sh: ROUNDS must be at least 3" >&2
	exit 2
fi
if (( ROUNDS * 2 * (ROUND_SECS + 2) + 40 > 300 )); then
	echo "gateway.sh: ROUNDS=$ROUNDS ROUND_SECS=$ROUND_SECS would take more than 5 minutes" >&2
	exit 2
fi
for tool in nginx wrk curl; do
	if ! command -v "$tool" >/dev/null && [[ ! -x /usr/sbin/$tool ]]; then
		echo "gateway.sh: $tool is missing (bash scripts/install-gateways.sh)" >&2
		exit 1
	fi
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

plain_port=$PORT_BASE           # nginx alone → service
gated_port=$((PORT_BASE + 1))   # nginx + tollgated → service
app_port=$((PORT_BASE + 2))     # the service (nginx return 200)
tg_port=$((PORT_BASE + 3))      # tollgated data plane
tg_admin_port=$((PORT_BASE + 4))

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "gateway.sh: $*" >&2; }

ncpu=$(nproc)
server_pin=() load_pin=()
if (( ncpu >= 2 )) && command -v taskset >/dev/null; then
	half=$(( ncpu / 2 ))
	server_pin=(taskset -c "$half-$(( ncpu - 1 ))")
	load_pin=(taskset -c "0-$(( half - 1 ))")
fi

# --- tollgated, with an account whose policy prices every route ---------------
log "building tollgated"
go build -o "$work/tollgated" ./cmd/tollgated
token=tga_gateway-bench-admin-token-0123456789
TOLLGATED_ADMIN_TOKEN=$token "${server_pin[@]}" "$work/tollgated" --listen "127.0.0.1:$tg_port" \
	--admin "127.0.0.1:$tg_admin_port" --data-dir "$work/data" --shards 1 --ack "$ACK" \
	>"$work/tollgated.log" 2>&1 &
pids+=($!)
admin() { curl -sf -X "$1" "http://127.0.0.1:$tg_admin_port$2" -H "Authorization: Bearer $token" ${3:+-d "$3"}; }
for _ in $(seq 100); do # until the admin API answers at all
	[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$tg_admin_port/") != 000 ]] && break
	sleep 0.1
done
admin POST /v1/accounts '{"id":"bench"}' >/dev/null
admin POST /v1/accounts/bench/deposits '{"units":1000000000000,"idempotency_key":"bench"}' >/dev/null
admin PUT /v1/accounts/bench/policy "$(cat examples/gateways/policy.json)" >/dev/null
key=$(admin POST /v1/accounts/bench/keys | sed 's/.*"key":"\([^"]*\)".*/\1/')

# --- nginx: the example site, a plain proxy, and the service ------------------
user=""
(( EUID == 0 )) && user="user nobody nogroup;"
sed -e "s/127.0.0.1:8000/127.0.0.1:$gated_port/" -e "s/127.0.0.1:8080/127.0.0.1:$tg_port/" \
	-e "s/127.0.0.1:9000/127.0.0.1:$app_port/" examples/gateways/nginx/tollgated.conf >"$work/tollgated.conf"
cat >"$work/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
$user
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/body; proxy_temp_path $work/proxy; fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi; scgi_temp_path $work/scgi;
    include $work/tollgated.conf;
    upstream plain_app { server 127.0.0.1:$app_port; keepalive 32; }
    server {
        listen 127.0.0.1:$plain_port;
        location / { proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://plain_app; }
    }
    server {
        listen 127.0.0.1:$app_port;
        location / { return 200 "ok\n"; }
    }
}
EOF
"${server_pin[@]}" "$NGINX" -p "$work" -c "$work/nginx.conf" -e "$work/error.log" &
pids+=($!)
url_plain="http://127.0.0.1:$plain_port/v1/models"
url_gated="http://127.0.0.1:$gated_port/v1/models"
for _ in $(seq 100); do
	[[ $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$url_gated") == 200 ]] && break
	sleep 0.1
done
if [[ $(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$url_gated") != 200 ]]; then
	log "nginx + tollgated does not answer 200:"
	tail -n 5 "$work/error.log" "$work/tollgated.log" >&2
	exit 1
fi
log "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///'), tollgated 1 shard, --ack $ACK, wrk -t$THREADS -c$CONNS, ${ROUND_SECS}s rounds"

# measure URL prints "rps p50_ms p99_ms" from one wrk round.
measure() {
	"${load_pin[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${ROUND_SECS}s" --latency \
		-H "Authorization: Bearer $key" "$1" >"$work/wrk.out"
	local rps p50 p99
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$work/wrk.out")
	p50=$(awk '$1 == "50%" { print $2 }' "$work/wrk.out")
	p99=$(awk '$1 == "99%" { print $2 }' "$work/wrk.out")
	if grep -qE "Non-2xx|Socket errors" "$work/wrk.out"; then
		log "errors in a round against $1:"; grep -E "Non-2xx|Socket errors" "$work/wrk.out" >&2
	fi
	echo "$rps $(ms "$p50") $(ms "$p99")"
}
# ms converts wrk's latency ("812.00us", "2.31ms", "1.02s") to milliseconds.
ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000
		printf "%.3f", n }'
}

printf "%-6s %-8s %12s %10s %10s\n" round setup req/s p50_ms p99_ms
results=()
for (( r = 1; r <= ROUNDS; r++ )); do
	order=(plain gated)
	(( r % 2 == 0 )) && order=(gated plain)
	declare -A got=()
	for setup in "${order[@]}"; do
		url=$url_plain; [[ $setup == gated ]] && url=$url_gated
		got[$setup]=$(measure "$url")
		printf "%-6s %-8s %12s %10s %10s\n" "$r" "$setup" ${got[$setup]}
	done
	read -r prps pp50 pp99 <<<"${got[plain]}"
	read -r grps gp50 gp99 <<<"${got[gated]}"
	results+=("$(awk -v a="$grps" -v b="$prps" -v c="$gp50" -v d="$pp50" -v e="$gp99" -v f="$pp99" \
		'BEGIN { printf "%.3f %.3f %.3f", a / b, c - d, e - f }')")
	unset got
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio=$(printf '%s\n' "${results[@]}" | awk '{ print $1 }' | median)
add50=$(printf '%s\n' "${results[@]}" | awk '{ print $2 }' | median)
add99=$(printf '%s\n' "${results[@]}" | awk '{ print $3 }' | median)
echo "median over $ROUNDS rounds: throughput nginx+tollgated / nginx alone = $ratio; added p50 = ${add50} ms; added p99 = ${add99} ms"
