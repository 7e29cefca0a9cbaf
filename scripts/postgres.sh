#!/usr/bin/env bash
# Installs PostgreSQL's server binaries (Debian's postgresql package) when
# they are missing. The tests start a throwaway cluster of their own with
# them (internal/pgtest); no server is configured or started here.
#
# Quiet and idempotent: prints nothing and changes nothing when initdb and
# postgres are already installed. Needs root (CI runs as root) or sudo.
set -euo pipefail

# Where Debian puts each major version's binaries (overridable for tests).
root=${TOLLGATED_POSTGRES_ROOT:-/usr/lib/postgresql}

installed() {
	local d
	for d in "$root"/*/bin; do
		[[ -x $d/initdb && -x $d/postgres ]] && return 0
	done
	return 1
}

installed && exit 0

apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || { echo "postgres.sh: PostgreSQL is missing and installing it needs root" >&2; exit 1; }
	apt=(sudo "${apt[@]}")
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
install() { "${apt[@]}" install -y -q --no-install-recommends postgresql >>"$log" 2>&1; }
# A fresh machine's package lists may be missing or stale: update once, only
# if the first attempt fails.
if ! install; then
	"${apt[@]}" update -q >>"$log" 2>&1 && install || { cat "$log" >&2; exit 1; }
fi
installed || { cat "$log" >&2; echo "postgres.sh: postgresql installed, but no initdb and postgres under $root/*/bin" >&2; exit 1; }
