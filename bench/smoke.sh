#!/usr/bin/env bash
# bench/smoke.sh — every command of the README's "Measuring" section, run
# once with the shortest settings that still exercise it end to end: the
# builds, the servers, the load, the /proc and /metrics readings and the
# summaries. The figures mean nothing at these lengths; that the commands
# work is what CI checks (.ci/run). TestREADMEMeasuring checks that every
# command of that section is here. Loopback only; about two and a half minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
	echo
	echo "=== smoke: $*"
	local start=$SECONDS
	"$@"
	echo "=== smoke: $1 ${2:-} ok in $((SECONDS - start)) s"
}

# The many-account benchmarks spend a minute building a million accounts;
# bench/scale.sh below runs them.
step make bench BENCHTIME=100x BENCHSKIP='FullPathAccounts|MemoryPerAccount'
# No warm-up: each server answers a one-second window cold, which the
# figures (meaningless here anyway) may show; the commands are what count.
step env ROUNDS=3 ROUND_SECS=1 WARMUP_SECS=0 make bench-http
step make bench-plane PLANE_N=20000
# The README compares main with the working tree; a clone need not have a
# local main branch, so this compares HEAD with it.
step env ROUNDS=1 ROUND_SECS=1 WARMUP_SECS=1 bash bench/ab-http.sh HEAD WORKTREE
step env ROUNDS=1 ROUND_SECS=1 bash bench/loadgen.sh
step env BENCHTIME=1000x bash bench/scale.sh active1k 1
step go run ./cmd/loadtest --help
# .ci/run simulates two hundred seeds of its own: here the command is what counts.
step make sim SEEDS=20 STEPS=100
# Idle phases of 12 s still leave the second half (6 s) after a short lease
# (5 s) has been handed back, so the idle targets are checked; about a
# minute.
step env CYCLES=2 LOAD_SECS=2 IDLE_SECS=12 LEASE_TTL=5s make soak
