#!/usr/bin/env bash
# scripts/install-bench-tools.sh — installs what the HTTP benchmarks run
# beside tollgated, from Debian packages, when it is missing: the load
# generator (wrk) for bench/http.sh and bench/peers.sh, Redis
# (redis-server) for the envoyproxy/ratelimit peer of bench/peers.sh, and
# perf (Debian's linux-perf) for bench/profile.sh.
#
# Usage: scripts/install-bench-tools.sh [wrk] [redis-server] [perf]   (default: wrk)
#
# Idempotent and quiet: with everything installed it prints nothing and
# changes nothing. The packages' own services must not start (Debian's
# redis-server would start one on port 6379): the benchmarks start each
# program as their own process on 127.0.0.1 ports. Where no policy-rc.d
# already forbids starting services, one does for the duration of the install.
set -euo pipefail

want=("$@")
(( ${#want[@]} > 0 )) || want=(wrk)
missing=()
for pkg in "${want[@]}"; do
	case "$pkg" in
	wrk) command -v wrk >/dev/null 2>&1 || missing+=(wrk) ;;
	redis-server) command -v redis-server >/dev/null 2>&1 || missing+=(redis-server) ;;
	perf) command -v perf >/dev/null 2>&1 || missing+=(linux-perf) ;;
	*)
		echo "install-bench-tools.sh: unknown tool $pkg (want wrk, redis-server or perf)" >&2
		exit 2
		;;
	esac
done
(( ${#missing[@]} == 0 )) && exit 0

if (( EUID != 0 )); then
	echo "install-bench-tools.sh: ${missing[*]} missing; run as root to install them" >&2
	exit 1
fi

policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
	cat "$log" >&2
	rm -f "$log"
	echo "install-bench-tools.sh: could not install ${missing[*]}" >&2
	exit 1
fi
rm -f "$log"
echo "install-bench-tools.sh: installed ${missing[*]}" >&2
