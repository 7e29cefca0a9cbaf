#!/usr/bin/env bash
# scripts/install-gateways.sh — installs the gateways the end-to-end tests
# put in front of tollgated (nginx, Caddy) and the load generator the
# gateway benchmark uses (wrk), from Debian packages, when they are missing.
#
# Idempotent and quiet: with everything installed it prints nothing and
# changes nothing. The packages' own services must not start (nginx's would
# listen on every address on port 80): the tests start each gateway as its
# own process on free 127.0.0.1 ports. Where no policy-rc.d already forbids
# starting services, one does for the duration of the install.
set -euo pipefail

missing=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v caddy >/dev/null 2>&1 || missing+=(caddy)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
(( ${#missing[@]} == 0 )) && exit 0

if (( EUID != 0 )); then
	echo "install-gateways.sh: ${missing[*]} missing; run as root to install them" >&2
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
	echo "install-gateways.sh: could not install ${missing[*]}" >&2
	exit 1
fi
rm -f "$log"
echo "install-gateways.sh: installed ${missing[*]}" >&2
