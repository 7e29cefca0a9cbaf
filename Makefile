# tollgated — build, test and benchmark targets. `make test` is what CI runs.
GO      ?= go
PKGS    ?= ./...
BIN     := bin
# Test binaries are built with the invariants tag: a broken invariant
# panics where it broke instead of being counted (package invariant).
TAGS    ?= invariants

.PHONY: all build run test test-short vet fmt-check fuzz sim soak bench bench-plane bench-http bench-peers bench-fleet clean

all: build

build:
	$(GO) build -o $(BIN)/tollgated ./cmd/tollgated
	$(GO) build -o $(BIN)/tollgatectl ./cmd/tollgatectl
	$(GO) build -o $(BIN)/loadtest ./cmd/loadtest

# run starts tollgated with embedded defaults: no external service needed.
run:
	$(GO) run ./cmd/tollgated

# test is the whole suite: formatting, vet, then every package under the
# race detector, with broken invariants panicking. Each package's tests are
# bounded in time. Tests that start real daemons run four at a time
# (-parallel 4), as do packages (-p 4): they spend most of their time
# waiting on daemons' cadences, PostgreSQL and sockets, so overlapping them
# roughly halves the suite's wall time even on two CPUs (BENCHMARKS.md,
# "Test suite").
test: fmt-check vet
	$(GO) test -tags $(TAGS) -race -count=1 -p 4 -parallel 4 -timeout 10m $(PKGS)

test-short:
	$(GO) test -tags $(TAGS) -short -count=1 $(PKGS)

# vet compiles every package without the race detector, as the daemon
# binaries that tests and the measuring scripts build are. (go vet -race
# would share test's race build instead, but on a clean machine it leaves
# the plain build to the tests that build binaries, beside the race tests,
# and the suite takes longer: BENCHMARKS.md, "Test suite".)
vet:
	$(GO) vet -tags $(TAGS) $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# fuzz runs every Go fuzz target of every package (go test -fuzz), one
# after another, for FUZZTIME each: the data-plane routes, the admin API,
# HTTP framing, policy documents... scripts/fuzz.sh finds the targets in
# the test files, so a new one is fuzzed without being listed here, and
# builds one instrumented test binary per package. FUZZFLAGS are flags of
# that test binary (-test.parallel=1). `make test` only replays their
# corpora. See docs/FUZZING.md.
FUZZTIME  ?= 30s
FUZZFLAGS ?=
# sim runs SEEDS more seeded simulations of one node and SEEDS of a fleet
# (internal/sim) after the ones make test runs, starting at SEED, in
# parallel; a failure names its test and seed, and
# `make sim SEED=<it> SEEDS=1` replays it exactly. STEPS=0 keeps the
# default; CI runs two hundred seeds at STEPS=800.
SEEDS ?= 50
SEED  ?= 1000
STEPS ?= 0
sim:
	$(GO) test -tags $(TAGS) -count=1 -timeout 60m -run '^TestSimulation' ./internal/sim -sim.seed=$(SEED) -sim.seeds=$(SEEDS) -sim.steps=$(STEPS)

# soak runs the real daemon through cycles of load and quiet and checks an
# idle daemon's costs (bench/soak.sh; about 6 minutes: 3 cycles of 100 s, and the builds).
soak:
	bash bench/soak.sh

fuzz:
	GO=$(GO) TAGS=$(TAGS) PKGS="$(PKGS)" FUZZTIME=$(FUZZTIME) FUZZFLAGS="$(FUZZFLAGS)" bash scripts/fuzz.sh

# bench runs the Go micro-benchmarks (engine, seqlock, rings) for
# BENCHTIME each (a duration, or a count such as 100x), leaving out those
# BENCHSKIP matches (go test -skip).
BENCHTIME ?= 1s
BENCHSKIP ?=
bench:
	$(GO) test -run '^$$' -bench . -skip '$(BENCHSKIP)' -benchmem -benchtime $(BENCHTIME) ./bench/... ./seqlock/... ./ring/...

# bench-plane: what one control plane serves for 16 to 64 shards,
# where it is the bottleneck (BenchmarkPlaneBurst: plane CPU per durable
# check) and under the shards' own load (BenchmarkPlaneShards); PLANE_N
# requests each, about a minute in all.
PLANE_N ?= 600000
bench-plane:
	$(GO) test -run '^$$' -bench 'PlaneBurst|PlaneShards' -benchtime $(PLANE_N)x ./control/

# bench-http: tollgated vs a bare fasthttp server (bench/baseline), in
# alternating rounds of identical closed-loop load from wrk (bench/wrk.lua;
# installed by scripts/install-bench-tools.sh when missing): durable
# POST /v1/check at 64 and at 256 connections, GET /v1/admission, and the
# staged admit + commit + finish from cmd/loadtest, and what an answer's
# I/O alone costs by epoll and by io_uring (bench/recvfloor); servers and
# load generator pinned to separate CPUs, the servers' CPU per request from
# /proc/PID/stat, medians and ratios. Then open-loop runs of cmd/loadtest
# at half the durable check's peak: the data directory on disk and on
# tmpfs, beside an fdatasync probe of the same disk. About 6 minutes
# (bench/http.sh refuses settings over 6.5), loopback only. tollgated serves
# a demo account for it.
BENCH_KEY ?= bench-demo-key
bench-http:
	BENCH_KEY=$(BENCH_KEY) BENCH_TOLLGATED_ARGS="--demo-key $(BENCH_KEY) $(BENCH_TOLLGATED_ARGS)" bash bench/http.sh

# bench-peers: tollgated's durable check beside gubernator and
# envoyproxy/ratelimit + Redis (built from the Go module proxy at pinned
# versions; Redis and wrk from Debian) and the bare server, under the same
# wrk harness: req/s, server CPU per request, and tollgated's durable
# checks per CPU-second against each peer's (bench/peers.sh). About 3
# minutes once the peers are built.
bench-peers:
	bash bench/peers.sh

# bench-fleet: what a fleet costs its PostgreSQL (ledger transactions per
# node a second and per 1,000 durable checks, where they come from, and
# PostgreSQL CPU per 1,000 checks; checks per tollgated CPU-second), 1, 2
# and 4 nodes at 30 and 1,000 checks/s per node, 1 and 2 at 3,000/s and
# closed loop, on a durable cluster of their own; how fast an admin change
# reaches the other nodes (p50/p99), and how fast spending through one node
# shows on another's /v1/admission. About four minutes.
bench-fleet:
	$(GO) test -count=1 -run 'TestFleetPropagatesAdminChanges$$|TestFleetAdmissionIsFleetWide$$' -bench '^BenchmarkFleetCost$$' -benchtime 1x -v ./cmd/tollgated/ | grep -E 'node\(s\)|samples|denied|^(ok|FAIL|---)'

clean:
	rm -rf $(BIN)
