#!/usr/bin/env bash
# scripts/fuzz.sh — every Go fuzz target of the packages PKGS names, one
# after another, for FUZZTIME each (make fuzz; docs/FUZZING.md).
#
# What `go test -fuzz` does per target, done per package instead: one
# fuzz-instrumented test binary is built for a package and run once for
# each of its targets, in the package's directory (where its corpus,
# testdata/fuzz, is read and a failing input is written), with the go
# command's own cache of generated inputs. Linking an instrumented binary
# per target cost more than fuzzing it at CI's count. Targets are found
# in the packages' test files, so a new one is fuzzed without being
# listed anywhere.
#
# Environment: GO (go), TAGS (build tags), PKGS (./...), FUZZTIME (30s, or
# a count such as 20000x), FUZZFLAGS (more flags for the test binary, in
# its own spelling: -test.parallel=1).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PKGS=${PKGS:-./...}
FUZZTIME=${FUZZTIME:-30s}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache="$($GO env GOCACHE)/fuzz"
found=0
# shellcheck disable=SC2086 # PKGS and FUZZFLAGS are lists
while read -r pkg dir files; do
	[ -n "$files" ] || continue
	targets=$(cd "$dir" && sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $files)
	[ -n "$targets" ] || continue
	$GO test ${TAGS:+-tags "$TAGS"} -c -fuzz . -o "$bin/fuzz.test" "$pkg"
	for target in $targets; do
		found=$((found + 1))
		echo "fuzz: $target ($pkg) for $FUZZTIME"
		(cd "$dir" && "$bin/fuzz.test" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$FUZZTIME" \
			-test.fuzzcachedir "$cache/$pkg" ${FUZZFLAGS:-})
	done
done < <($GO list ${TAGS:+-tags "$TAGS"} -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' $PKGS)
if [ "$found" = 0 ]; then
	echo "fuzz: no fuzz targets found in $PKGS"
	exit 1
fi
