# bench/wrkrun.sh — the measurement bench/http.sh and bench/peers.sh share:
# one wrk run against a server, the server's CPU over it, and the
# interleaved rounds they are taken in. Sourced, not
# run. The caller sets: work (a scratch directory), load_pin (an array: the
# taskset prefix of the load generator, or empty), WARMUP_SECS, ROUND_SECS,
# WRK_LUA (bench/wrk.lua) and, for rounds, ROUNDS.

# cpu_ticks PID... prints the user + system time of the processes, summed,
# in clock ticks (/proc/PID/stat fields 14 and 15).
cpu_ticks() {
	local p sum=0 t
	for p in "$@"; do
		t=$(awk '{ print $14 + $15 }' "/proc/$p/stat")
		sum=$(( sum + t ))
	done
	echo "$sum"
}

# pin_cpus sets server_pin and load_pin (arrays, the taskset prefixes):
# servers on the upper half of the CPUs, the load generator on the lower.
pin_cpus() {
	local ncpu half
	ncpu=$(nproc)
	server_pin=()
	load_pin=()
	if (( ncpu >= 2 )) && command -v taskset >/dev/null; then
		half=$(( ncpu / 2 ))
		server_pin=(taskset -c "$half-$(( ncpu - 1 ))")
		load_pin=(taskset -c "0-$(( half - 1 ))")
		echo "pinning servers to CPUs $half-$(( ncpu - 1 )), the load generator to CPUs 0-$(( half - 1 ))"
	else
		echo "fewer than 2 CPUs or no taskset: not pinning (results will be less stable)"
	fi
}

# wrk_measure TAG CONNS URL "PID..." LUA_ARG... runs wrk with one thread
# and CONNS connections against URL: WARMUP_SECS of warm-up (not counted,
# its connections closed), then ROUND_SECS measured, and prints
#   rps p50_us p99_us cpu_us_per_request busy_percent
# where the CPU is that of the PIDs (summed) from just before the measured
# wrk starts to just after it ends, over the requests it counted (whatever
# they answered: a run with errors or non-2xx answers prints FAILED instead,
# with wrk's line on stderr), and busy is that CPU over the window's length.
wrk_measure() {
	local tag=$1 conns=$2 url=$3 pids=$4
	shift 4
	local out="$work/wrk-$tag.out" c0 c1 t0 t1 line
	# shellcheck disable=SC2086 # pids is a list
	if (( WARMUP_SECS > 0 )); then
		"${load_pin[@]}" timeout $(( WARMUP_SECS + 10 )) wrk -t1 -c"$conns" -d"${WARMUP_SECS}s" \
			-s "$WRK_LUA" "$url" -- "$@" >"$work/wrk-$tag.warm" 2>&1 || true
	fi
	# shellcheck disable=SC2086
	c0=$(cpu_ticks $pids)
	t0=$(date +%s%N)
	if ! "${load_pin[@]}" timeout $(( ROUND_SECS + 10 )) wrk -t1 -c"$conns" -d"${ROUND_SECS}s" \
		-s "$WRK_LUA" "$url" -- "$@" >"$out" 2>&1; then
		echo "wrk $tag failed:" >&2
		sed 's/^/    /' "$out" >&2
		echo FAILED
		return
	fi
	t1=$(date +%s%N)
	# shellcheck disable=SC2086
	c1=$(cpu_ticks $pids)
	line=$(grep '^WRK ' "$out" || true)
	if [[ -z "$line" ]] || ! grep -q ' errors=0 non2xx=0$' <<<"$line"; then
		echo "wrk $tag: errors or non-2xx answers (or no result):" >&2
		sed 's/^/    /' "$out" >&2
		echo FAILED
		return
	fi
	awk -v line="$line" -v c="$(( c1 - c0 ))" -v hz="$(getconf CLK_TCK)" -v ns="$(( t1 - t0 ))" 'BEGIN {
		n = split(line, f, /[ =]/)
		for (i = 2; i < n; i += 2) v[f[i]] = f[i + 1]
		cpu = c / hz * 1e6
		printf "%.0f %.1f %.1f %.2f %.0f\n", v["rps"], v["p50_us"], v["p99_us"], cpu / v["requests"], cpu / (ns / 1e3) * 100 }'
}

# rounds RUN SHOW NAME...: ROUNDS rounds, each measuring every NAME once
# with RUN ROUND NAME (the order reversed in even rounds, so no server
# always runs first or last), then printing each with SHOW ROUND NAME.
rounds() {
	local run=$1 show=$2 r i n order
	shift 2
	for (( r = 1; r <= ROUNDS; r++ )); do
		order=("$@")
		if (( r % 2 == 0 )); then
			order=()
			for (( i = $#; i >= 1; i-- )); do order+=("${!i}"); done
		fi
		for n in "${order[@]}"; do
			"$run" "$r" "$n"
		done
		echo "round $r"
		for n in "$@"; do
			"$show" "$r" "$n"
		done
	done
}
