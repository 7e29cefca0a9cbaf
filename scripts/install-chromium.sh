#!/usr/bin/env bash
# scripts/install-chromium.sh — installs the headless browser the dashboard's
# end-to-end test drives (cmd/tollgated's TestDashboardInChromium), from
# Debian's chromium package, when it is missing.
#
# Idempotent and quiet: with chromium installed it prints nothing and
# changes nothing. The test starts the browser itself, headless, on a fresh
# profile, talking to loopback only.
set -euo pipefail

command -v chromium >/dev/null 2>&1 && exit 0

if (( EUID != 0 )); then
	echo "install-chromium.sh: chromium missing; run as root to install it" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
	cat "$log" >&2
	rm -f "$log"
	echo "install-chromium.sh: could not install chromium" >&2
	exit 1
fi
rm -f "$log"
echo "install-chromium.sh: installed chromium" >&2
